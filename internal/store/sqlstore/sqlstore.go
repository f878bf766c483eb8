// Package sqlstore holds what the SQLite and PostgreSQL stores share: most
// methods of store.Store with their queries and row logic (Store), the
// columns of each table and the row scanners that read them, the encodings
// of times, JSON and optional values in columns, the statements both
// dialects accept, the WHERE clauses of the list filters, and the mapping of
// driver errors to store errors.
//
// Statements are written with numbered placeholders ($1, $2, …): PostgreSQL
// speaks them, and SQLite (modernc.org/sqlite) binds $N to the Nth argument
// just as it does ?N, so one text serves both. What the dialects spell
// differently (GREATEST or MAX, a boolean test, substring search, row-value
// comparison, which error is a unique violation) is a Dialect each store
// fills in.
//
// The methods of store.Store are written once, on Store, over a Plugin:
// how a database runs a transaction (SQLite's one writer with group
// commit, PostgreSQL's pipelined batches with retries) and the few
// statements whose shape differs (PostgreSQL's unnest and CTEs, its change
// feed). Packages sqlite and postgres are those plugins.
package sqlstore

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
)

// Scanner reads one row: *sql.Row, *sql.Rows, pgx.Row and pgx.Rows all are.
type Scanner interface{ Scan(dest ...any) error }

// Rows is the part of database/sql's and pgx's result rows Collect needs.
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// Collect reads every remaining row of rows with scan. The caller closes
// rows (the two drivers' Close differ).
func Collect[T any](rows Rows, scan func(Scanner) (T, error)) ([]T, error) {
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// ScanString reads a row of one text column.
func ScanString(sc Scanner) (string, error) {
	var v string
	err := sc.Scan(&v)
	return v, err
}

// Dialect is what a store's SQL spells its own way.
type Dialect struct {
	// Greatest names the function of the larger of two values: GREATEST
	// in PostgreSQL, the two-argument MAX in SQLite.
	Greatest string
	// NotDeleted tests that a queue row is not a tombstone.
	NotDeleted string
	// Contains returns a condition true when the text column col contains
	// the text of placeholder arg.
	Contains func(col, arg string) string
	// Before returns the keyset condition (created_at, id) < (c, id) for
	// the placeholders c and id, spelled so the sessions_created index
	// serves it.
	Before func(c, id string) string
	// IsUniqueViolation reports a unique or primary key violation.
	IsUniqueViolation func(error) bool
	// IsForeignKeyViolation reports a foreign key violation; nil where a
	// transaction checks the rows it refers to under a lock that keeps
	// them (SQLite's one writer).
	IsForeignKeyViolation func(error) bool
	// Tombstone tests that the queue row q is a tombstone, spelled as the
	// WHERE of the index queue_tombstones.
	Tombstone string
	// NoLimit is the LIMIT argument that sets no cap.
	NoLimit any
	// In returns the condition that column col is one of ids, adding its
	// arguments to w.
	In func(w *Where, col string, ids []string) string
	// CountIf returns the aggregate that counts the rows for which cond
	// holds; MinIf the least of col over them.
	CountIf func(cond string) string
	MinIf   func(col, cond string) string
	// OutpostCols are the columns of an outpost that ScanOutpost reads
	// (the allowed organisations are a JSON text in SQLite, an array in
	// PostgreSQL).
	OutpostCols string
	ScanOutpost func(Scanner) (store.Outpost, error)
	// Lock is how the dialect locks rows.
	Lock Lock
	// IndexedBy returns what follows a table's name to make a statement
	// read it through the named index: SQLite's planner prefers an
	// equality on the primary key's first column to a narrow range of
	// another index it has no statistics for; "" where the planner
	// weighs them (PostgreSQL).
	IndexedBy func(index string) string
	// SeqOnDemand reads a transcript's highest seq in UpdateSession and
	// its kin only when the mutation appends events, in a statement of its
	// own after fn, rather than with the session's first reads. Set it
	// where a statement costs no round trip (SQLite, in process) and the
	// plugin's QueueNotify reads no seq, which is 0 for a mutation that
	// appends none; leave it unset where the first reads go in one round
	// trip (PostgreSQL's pipelined batch), which a later read would add to:
	// there the seq comes with the entry's read (GetEntrySeqSQL), on
	// demand only for a session without an entry row.
	SeqOnDemand bool
}

// Expiry is a queue entry's Expiry as SQL; the index queue_phase_expiry is
// on it, so it must be spelled exactly so.
func (d Dialect) Expiry() string {
	return d.Greatest + `(claim_deadline, COALESCE(live_until, 0))`
}

// MapErr turns driver errors into store errors: a missing row
// (sql.ErrNoRows, which pgx.ErrNoRows matches) becomes store.ErrNotFound,
// a unique violation wraps store.ErrConflict. Other errors pass unchanged.
func (d Dialect) MapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	if d.IsUniqueViolation(err) {
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	}
	return err
}

// MS stores a time as Unix milliseconds: zero is 0.
func MS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// FromMS reads a time stored by MS, in UTC.
func FromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// NullMS stores an optional time: zero is NULL.
func NullMS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// PtrMS stores a time pointer: nil is NULL.
func PtrMS(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMilli()
}

// BytesOrNil keeps a nil json.RawMessage NULL and passes others as []byte.
func BytesOrNil(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// Marshal encodes v as JSON text.
func Marshal(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
