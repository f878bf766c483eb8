package sqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/outpost-sh/outpost/internal/store"
)

// Querier runs one statement: a plugin's pool outside a transaction, or
// the statements of one transaction (Tx).
type Querier interface {
	// QueryRow runs a query of at most one row; its error, sql.ErrNoRows
	// included, comes from Scan.
	QueryRow(ctx context.Context, q string, args ...any) Scanner
	// Query runs a query of rows; the caller closes them.
	Query(ctx context.Context, q string, args ...any) (ClosingRows, error)
	// Exec runs a statement and returns how many rows it changed.
	Exec(ctx context.Context, q string, args ...any) (int64, error)
}

// ClosingRows are the rows of Query; Close releases them.
type ClosingRows interface {
	Rows
	Close() error
}

// Tx is one transaction of a plugin.
type Tx interface {
	Querier
	// Send runs b's statements in order and each callback once its
	// statement answered: in one round trip where the database can
	// (PostgreSQL), one statement after another where it is in process
	// (SQLite). The first error of a statement or a callback ends it.
	Send(ctx context.Context, b *Batch) error
	// SendLast is Send of the transaction's last statements, which the
	// plugin may send with the COMMIT in one round trip (PostgreSQL): no
	// row lock the transaction took waits for a round trip between them.
	// A callback of such a batch runs when the COMMIT has already been
	// sent, so the transaction commits whatever it returns: b's Row
	// callbacks must not fail when their statement succeeded, or a
	// committed write is reported as failed (a plugin sends a batch with
	// Affected checks as Send does and commits after). A statement run in the transaction after SendLast sends b
	// first.
	SendLast(ctx context.Context, b *Batch) error
}

// Batch is statements queued to run together, in order, in a
// transaction. A statement's arguments are read when it is queued; what a
// statement answers is only seen by its callback, which runs when the
// batch is sent, so a later statement of the batch cannot use it.
type Batch struct {
	// Items are the statements in the order queued.
	Items []BatchItem
	// Skip names the sessions a pick queued into the batch must not take:
	// those an earlier claim of the same shared transaction (ClaimWriter)
	// claimed, whose queue entries are written only at its commit.
	Skip []string
}

// BatchItem is one statement of a Batch. At most one of Row and Affected
// is set; with neither, its answer is not read.
type BatchItem struct {
	SQL  string
	Args []any
	// Row scans the statement's one row (sql.ErrNoRows when none).
	Row func(Scanner) error
	// Affected checks the number of rows the statement changed.
	Affected func(n int64) error
}

// Exec queues a statement whose answer is not read.
func (b *Batch) Exec(q string, args ...any) {
	b.Items = append(b.Items, BatchItem{SQL: q, Args: args})
}

// MustAffect queues a statement that fails with sql.ErrNoRows when it
// changes no row.
func (b *Batch) MustAffect(q string, args ...any) {
	b.Items = append(b.Items, BatchItem{SQL: q, Args: args, Affected: func(n int64) error {
		if n == 0 {
			return sql.ErrNoRows
		}
		return nil
	}})
}

// QueryRow queues a query of one row, read by scan when the batch runs.
func (b *Batch) QueryRow(scan func(Scanner) error, q string, args ...any) {
	b.Items = append(b.Items, BatchItem{SQL: q, Args: args, Row: scan})
}

// Len is the number of statements queued.
func (b *Batch) Len() int { return len(b.Items) }

// Plugin is what a database gives the core (Store): how it runs
// transactions and the few writes whose statements differ in shape.
type Plugin interface {
	// Querier runs one statement outside a transaction: QueryRow and
	// Query read (SQLite's read-only pool), Exec writes in a transaction
	// of its own (SQLite's one writer).
	Querier
	// Write runs first's statements (nil: none) and then fn in one write
	// transaction, and returns once it committed durably. An error of fn
	// rolls back and is returned unchanged. The plugin may run the whole
	// transaction again (PostgreSQL does on a serialization failure), so
	// first and fn must start from scratch each time they are called.
	Write(ctx context.Context, first func(*Batch), fn func(Tx) error) error
	// Read runs fn in a read-only transaction of one snapshot.
	Read(ctx context.Context, fn func(Tx) error) error

	// QueueUpsertEntry queues into b the write of e under the next global
	// rev, stored in e.Rev when b runs. Taking the rev locks the counter
	// until commit, so callers queue it late.
	QueueUpsertEntry(b *Batch, e *store.QueueEntry)
	// QueueInsertEvents queues into b the insert of the events of session
	// id whose seqs and JSON bodies are seqs and bodies.
	QueueInsertEvents(b *Batch, id string, seqs []int64, bodies []string)
	// QueueNotify queues into b, after the write of e (the queue entry of
	// session id, of outpost outpostID, whose events reach seq), what
	// tells other servers of the change; nothing where no other server
	// shares the database. seq is 0 for a mutation that appends no
	// events where the dialect reads seqs on demand (Dialect.SeqOnDemand).
	QueueNotify(b *Batch, id, outpostID string, seq int64, e *store.QueueEntry)
	// Appended tells, once committed, that the events of session id of
	// outpost outpostID reach seq, in a transaction that wrote no queue
	// entry (and so notified nothing).
	Appended(id, outpostID string, seq int64)
}

// ClaimWriter is a Plugin that may run a claim's transaction together
// with other claims' in one database transaction with one commit (group
// commit), each under a savepoint of its own.
type ClaimWriter interface {
	// WriteClaim is Write of a claim (claim) or another update of
	// session id ("" when first picks the session). It returns once the
	// commit that holds the write is durable, with fn's error or the
	// commit's.
	WriteClaim(ctx context.Context, id string, claim bool, first func(*Batch), fn func(Tx) error) error
}

// Grouped is a Tx that may report it is shared by several callers'
// transactions (ClaimWriter): such a transaction may already hold the rev
// counter's lock, so it must not wait for another row lock.
type Grouped interface {
	Grouped() bool
	// Defers reports whether the transaction holds back, to write at its
	// commit, the queue entry of a claim of outpost outpostID: a count of
	// the outpost's claims read now would miss it.
	Defers(outpostID string) bool
}

// ErrRunAlone is the error of a claim that cannot run in a shared
// transaction (Grouped) as it stands and is to run again in one of its
// own.
var ErrRunAlone = errors.New("claim must run in a transaction of its own")

// Lock is how a dialect spells the row locks of its transactions; SQLite,
// whose one writer serializes every write, spells none.
type Lock struct {
	// Row is the suffix that locks the rows a query reads (" FOR UPDATE").
	Row string
	// Outpost locks the outpost row of OutpostLimitSQL (" FOR UPDATE OF o"),
	// which claims of an outpost with a max_running limit take.
	Outpost string
	// Pick locks, skipping those another writer holds, the session rows
	// of a query that joins sessions as s ("FOR UPDATE OF s SKIP LOCKED").
	Pick string
	// Deliveries locks, skipping those another writer holds, the webhook
	// delivery rows of a query that reads them as d.
	Deliveries string
	// Workers, when set, returns the statement that orders the heartbeats
	// of an outpost's workers until the transaction ends.
	Workers func(outpostID string) (q string, args []any)
	// Token, when set, returns the statement that takes token id's lock
	// as mode says, held until the transaction ends: claims take it
	// shared before they read the token, a revocation alone before it
	// writes it, so a claim in flight when a revocation comes commits
	// before it, and one that comes after reads the token revoked. Unset
	// where the one writer orders them (SQLite).
	Token func(id string, mode TokenLock) (q string, args []any)
}

// TokenLock is how a statement of Lock.Token takes a token's lock.
type TokenLock int

const (
	// TokenTryShared takes it shared if no revocation holds or waits for
	// it, without waiting, and reads whether it did (a boolean).
	TokenTryShared TokenLock = iota
	// TokenShared takes it shared, waiting for a revocation.
	TokenShared
	// TokenExclusive takes it alone (a revocation), waiting for claims.
	TokenExclusive
)
