// Package postgres is the PostgreSQL implementation of store.Store, on
// github.com/jackc/pgx/v5 (pgxpool). It is the store of a server whose
// database must outlive its machine; the embedded default is package sqlite.
//
// Transactions run at READ COMMITTED with explicit row locks:
//
//   - UpdateSession and AppendEvents lock the session row (SELECT … FOR
//     UPDATE) first, so the fn of UpdateSession sees the current session and
//     queue entry and its compare-and-swap holds across connections and
//     servers, and transcript seqs are numbered without gaps or duplicates.
//   - Every write of a queue entry takes the next rev from the 'rev' row of
//     counters (UPDATE … RETURNING), which stays locked until commit: revs
//     are assigned in commit order, as the watch cursors need. The counter is
//     taken last in a transaction, so it is held as briefly as possible.
//
// Locks are taken session row first, counter second, so writers do not
// deadlock; serialization failures and deadlocks (SQLSTATE 40001, 40P01)
// are retried a bounded number of times all the same.
//
// Round trips are few: an UpdateSession sends BEGIN, the row lock and its
// reads in one batch, then every write of the mutation with the COMMIT in
// a second (sqlstore.Tx.SendLast), so the rev counter's lock is held for
// the commit's flush and no round trip more. A claim locks its outpost's
// row only when the outpost has a max_running limit to count against.
//
// Every commit that appends events or writes a queue entry, and every
// outpost created or deleted, is notified (notify.go), so that other
// servers on the database learn of it through Listen: in the transaction,
// in the batch of its writes, when it takes a rev or changes an outpost;
// just after the commit, coalesced with others, when it only appends
// events.
//
// Times are kept as Unix milliseconds, as in the SQLite store, and come back
// in UTC. Most methods of store.Store are package sqlstore's core, written
// once for both databases; this package is its plugin (plugin.go: batches
// in one round trip, unnest, the rev taken in a CTE, the row locks the
// dialect spells) and keeps what only PostgreSQL has: the pools, retries,
// LISTEN/NOTIFY, advisory locks, migrations.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outpost-sh/outpost/backoff"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// maxAttempts bounds how often a write transaction is tried when PostgreSQL
// reports a serialization failure or a deadlock.
const maxAttempts = 8

// retryWait is the wait before trying a write transaction again: up to 5ms
// before the second try, 10ms before the third, then 20ms and at most 35ms,
// each less up to four fifths of it at random, so contending writers do not
// retry in step.
var retryWait = backoff.Policy{Base: 5 * time.Millisecond, Max: 35 * time.Millisecond, Jitter: 0.8}

// defaultMaxConns is the pool size when the URL sets no pool_max_conns.
const defaultMaxConns = 16

// connectTimeout bounds Open's first connection when the URL sets no
// connect_timeout.
const connectTimeout = 15 * time.Second

// Store is a store.Store backed by a PostgreSQL database.
type Store struct {
	// Store is what both databases share: most methods of store.Store.
	sqlstore.Store

	pool *pgxpool.Pool

	// keys seal session secrets; nil keeps them as plaintext JSON.
	keys *sealed.Keyring
	// replica is the Origin of the changes this store commits
	// (WithReplica, notify.go).
	replica string
	// late notifies appends of events once they committed (notify.go).
	late      *lateNotifier
	closeOnce sync.Once

	// migrated lists the migration versions this Open applied.
	migrated []int
	// resealed counts the sessions whose secrets this Open sealed anew.
	resealed int

	// tracer, when set (tests), traces every statement of the pool.
	tracer pgx.QueryTracer

	// locks is the pool of the connections that hold Lock's advisory
	// locks (locks.go), apart from pool so that holders waiting for a
	// connection of pool cannot starve it.
	locks *pgxpool.Pool

	// group runs claims together (group.go); nil when off. groupMax is
	// WithClaimGroup's largest group, groupSet whether it was given.
	group    *combiner
	groupMax int
	groupSet bool
	// groupUpdates groups every update of a session, not claims alone;
	// groupUpdatesSet tells WithGroupUpdates set it.
	groupUpdates, groupUpdatesSet bool
}

var _ store.Store = (*Store)(nil)

// Open connects to the database at url (postgres://user:pass@host:port/db?…,
// or a key=value DSN), checks it answers and brings its schema up to date.
// It fails when the database was written by a newer version of outpost.
// Error messages name the host, port, database and user, never the password.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgconn redacts the password in its parse errors.
		return nil, fmt.Errorf("postgres: invalid database URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	where := describe(cfg.ConnConfig)
	s := &Store{late: newLateNotifier()}
	for _, o := range opts {
		o(s)
	}
	if s.tracer != nil {
		cfg.ConnConfig.Tracer = s.tracer
	}
	if !s.groupSet {
		s.groupMax = groupMaxFromEnv(defaultGroupMax)
	}
	if s.groupMax > 1 {
		s.group = &combiner{s: s, max: s.groupMax, inflight: inflightFromEnv()}
		if !s.groupUpdatesSet {
			s.groupUpdates = os.Getenv(groupUpdatesEnv) == "1"
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", where, err)
	}
	pctx := ctx
	if cfg.ConnConfig.ConnectTimeout == 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, connectTimeout)
		defer cancel()
	}
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: cannot reach the database at %s: %w", where, oneLine{err})
	}
	locks, err := newLockPool(cfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %s: %w", where, err)
	}
	s.pool, s.locks = pool, locks
	s.Store = sqlstore.NewStore("postgres", plugin{s}, &dialect, s.keys)
	go s.runLateNotifier() // before anything can fail: Close waits for it
	if len(s.replica) > maxReplicaID {
		s.Close()
		return nil, fmt.Errorf("postgres: the replica id is %d bytes long; at most %d are allowed", len(s.replica), maxReplicaID)
	}
	if s.migrated, err = migrate(ctx, pool); err != nil {
		s.Close()
		return nil, fmt.Errorf("postgres: %s: %w", where, err)
	}
	if s.resealed, err = sqlstore.OpenKeys(ctx, &s.Store); err != nil {
		s.Close()
		return nil, fmt.Errorf("postgres: %s: %w", where, err)
	}
	return s, nil
}

// Pool is the store's connection pool, for the blob store that keeps its
// tables in the same database (package blob). Closing
// the store closes it.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// describe names a connection's target for error messages: host, port,
// database and user, without the password.
func describe(c *pgx.ConnConfig) string {
	return fmt.Sprintf("%s:%d (database %q, user %q)", c.Host, c.Port, c.Database, c.User)
}

// oneLine shows a driver error on one line, without repeated lines: pgx
// reports each address and TLS mode it tried on a line of its own.
type oneLine struct{ err error }

func (o oneLine) Error() string {
	var parts []string
	for _, l := range strings.Split(o.err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(parts, l) {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

func (o oneLine) Unwrap() error { return o.err }

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// Close notifies the changes not yet notified, then closes every
// connection of the pool.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.late.stop)
		<-s.late.done
		s.locks.Close()
		s.pool.Close()
	})
	return nil
}

// write runs fn in a READ COMMITTED transaction and commits it, trying again
// from the start, up to maxAttempts times, when PostgreSQL reports a
// serialization failure or a deadlock. An error from fn rolls back and is
// returned unchanged.
func (s *Store) write(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.writeBatch(ctx, nil, fn)
}

// writeBatch is write whose transaction starts with the queries first
// queues, sent with the BEGIN in one round trip; fn runs after their
// callbacks. first may be nil.
//
// Every write transaction of the store passes here: the audit entry ctx
// carries (see package audit) is appended in the transaction, after fn and
// only when fn succeeded, so the change and its entry commit or roll back
// together; each try appends it afresh.
func (s *Store) writeBatch(ctx context.Context, first func(b *pgx.Batch), fn func(tx pgx.Tx) error) error {
	if e, committed := audit.Pending(ctx); e != nil {
		inner := fn
		fn = func(tx pgx.Tx) error {
			if err := inner(tx); err != nil {
				return err
			}
			return sqlstore.AppendAudit(ctx, pgTx{tx}, dialect.Lock.Row, e)
		}
		err := s.retryWrite(ctx, first, fn)
		if err == nil && !e.Skip {
			committed()
		}
		return err
	}
	return s.retryWrite(ctx, first, fn)
}

// retryWrite is writeBatch's loop of tries.
func (s *Store) retryWrite(ctx context.Context, first func(b *pgx.Batch), fn func(tx pgx.Tx) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = s.tryWrite(ctx, first, fn)
		if !retryable(err) || attempt == maxAttempts {
			return err
		}
		// Back off a little, with jitter, before the next try; a context
		// that ends meanwhile gets the error of the last try.
		if retryWait.Wait(ctx, nil, attempt) != nil {
			return err
		}
	}
}

// tryWrite is one try of a write transaction: BEGIN with first's
// statements in one round trip, fn, then COMMIT — in the same round trip
// as the statements fn left to send last (pgTx.SendLast), so the row
// locks they take (the rev counter's, which orders every write of a queue
// entry) are held for the commit's own flush and no round trip more.
func (s *Store) tryWrite(ctx context.Context, first func(b *pgx.Batch), fn func(tx pgx.Tx) error) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection left inside a transaction is closed by Release, not
	// reused; the deferred rollback (run first) ends one that failed.
	defer c.Release()
	b := &pgx.Batch{}
	// Read committed whatever the database's default: each statement
	// of a transaction sees what committed before it began, which the
	// locks taken by the statements before it order (a session's row,
	// a token's lock).
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if first != nil {
		first(b)
	}
	br := c.Conn().SendBatch(ctx, b)
	w := &writeTx{Tx: br.Tx()}
	defer func() {
		if c.Conn().PgConn().TxStatus() != 'I' {
			w.Tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // the try failed already
		}
	}()
	if err := br.Close(); err != nil {
		return err
	}
	if err := fn(w); err != nil {
		return err
	}
	if w.last == nil {
		return w.Tx.Commit(ctx)
	}
	last := w.last
	w.last = nil
	// A statement that fails skips the rest of the batch, COMMIT
	// included (one Sync ends it), and leaves the transaction to roll
	// back. A COMMIT that answers ROLLBACK means the transaction had
	// failed before.
	last.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() == "ROLLBACK" {
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	return c.Conn().SendBatch(ctx, last).Close()
}

// writeTx is the transaction a write's fn runs in: pgx's, and the
// statements fn left to send with the COMMIT (pgTx.SendLast), which any
// statement fn runs after them sends first, in order.
type writeTx struct {
	pgx.Tx
	last *pgx.Batch
}

// flush sends the statements held back for the COMMIT now.
func (w *writeTx) flush(ctx context.Context) error {
	if w.last == nil {
		return nil
	}
	b := w.last
	w.last = nil
	return w.Tx.SendBatch(ctx, b).Close()
}

func (w *writeTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := w.flush(ctx); err != nil {
		return nil, err
	}
	return w.Tx.Begin(ctx)
}

func (w *writeTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := w.flush(ctx); err != nil {
		return 0, err
	}
	return w.Tx.CopyFrom(ctx, table, cols, src)
}

func (w *writeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := w.flush(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return w.Tx.SendBatch(ctx, b)
}

func (w *writeTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := w.flush(ctx); err != nil {
		return nil, err
	}
	return w.Tx.Prepare(ctx, name, sql)
}

func (w *writeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := w.flush(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return w.Tx.Exec(ctx, sql, args...)
}

func (w *writeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := w.flush(ctx); err != nil {
		return nil, err
	}
	return w.Tx.Query(ctx, sql, args...)
}

func (w *writeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := w.flush(ctx); err != nil {
		return errRow{err}
	}
	return w.Tx.QueryRow(ctx, sql, args...)
}

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// exec runs a statement on the pool, or, when ctx carries an audit entry,
// in a write transaction that appends it: a change made by one statement
// gets its entry in the same transaction too.
func (s *Store) exec(ctx context.Context, q string, args ...any) (pgconn.CommandTag, error) {
	if e, _ := audit.Pending(ctx); e == nil {
		return s.pool.Exec(ctx, q, args...)
	}
	var tag pgconn.CommandTag
	err := s.write(ctx, func(tx pgx.Tx) (err error) {
		tag, err = tx.Exec(ctx, q, args...)
		return err
	})
	return tag, err
}

// read runs fn in a read-only REPEATABLE READ transaction, so its queries
// see one snapshot.
func (s *Store) read(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only; nothing to lose
	return fn(tx)
}

// retryable reports a serialization failure or a deadlock: the transaction
// was rolled back and may be tried again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// dialect is how PostgreSQL spells what sqlstore leaves to the store.
var dialect = sqlstore.Dialect{
	Greatest:    "GREATEST",
	NotDeleted:  "NOT deleted",
	Contains:    func(col, arg string) string { return "strpos(" + col + ", " + arg + ") > 0" },
	Before:      func(c, id string) string { return "(created_at, id) < (" + c + ", " + id + ")" },
	OutpostCols: outpostCols,
	ScanOutpost: scanOutpost,
	Tombstone:   "q.deleted",
	CountIf:     func(cond string) string { return "COUNT(*) FILTER (WHERE " + cond + ")" },
	MinIf:       func(col, cond string) string { return "MIN(" + col + ") FILTER (WHERE " + cond + ")" },
	NoLimit:     nil, // LIMIT NULL
	IndexedBy:   func(string) string { return "" },
	In: func(w *sqlstore.Where, col string, ids []string) string {
		return col + " = ANY(" + w.Arg(ids) + "::text[])"
	},
	Lock: sqlstore.Lock{Row: " FOR UPDATE", Outpost: " FOR UPDATE OF o", Pick: "FOR UPDATE OF s SKIP LOCKED",
		Deliveries: " FOR UPDATE OF d SKIP LOCKED",
		// A transaction-scoped advisory lock of the outpost's presence,
		// rather than the outpost row, which claims lock.
		Workers: func(outpostID string) (string, []any) {
			return `SELECT pg_advisory_xact_lock($1)`, []any{lockKey("workers:" + outpostID)}
		},
		// Not the token's row: a shared row lock writes the row (and,
		// with many claimers of one token, a multixact) on every claim;
		// an advisory lock lives in memory only.
		Token: func(id string, mode sqlstore.TokenLock) (string, []any) {
			args := []any{lockKey("token:" + id)}
			switch mode {
			case sqlstore.TokenTryShared:
				return `SELECT pg_try_advisory_xact_lock_shared($1)`, args
			case sqlstore.TokenShared:
				return `SELECT pg_advisory_xact_lock_shared($1)`, args
			}
			return `SELECT pg_advisory_xact_lock($1)`, args
		},
	},
	IsForeignKeyViolation: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "23503"
	},
	IsUniqueViolation: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "23505"
	},
}

// mapErr turns driver errors into store errors: unique violations become
// store.ErrConflict, pgx.ErrNoRows store.ErrNotFound.
func mapErr(err error) error { return dialect.MapErr(err) }

// mustAffect turns a command that touched no row into pgx.ErrNoRows.
func mustAffect(tag pgconn.CommandTag, err error) error {
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return pgx.ErrNoRows
	}
	return nil
}

// collect reads every row of a query with scan:
// collect(scanX)(pool.Query(…)).
func collect[T any](scan func(sqlstore.Scanner) (T, error)) func(rows pgx.Rows, err error) ([]T, error) {
	return func(rows pgx.Rows, err error) ([]T, error) {
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		return sqlstore.Collect(rows, scan)
	}
}
