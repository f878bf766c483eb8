package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// plugin runs the statements of package sqlstore's core on a Store: writes
// on the one writer (group commit), reads on the read-only pool, a batch
// one statement after another on the transaction's connection, whose
// statement cache keeps them prepared.
type plugin struct{ s *Store }

var _ sqlstore.Plugin = plugin{}

// QueryRow runs a query on the read-only pool.
func (p plugin) QueryRow(ctx context.Context, q string, args ...any) sqlstore.Scanner {
	return p.s.r.QueryRowContext(ctx, q, args...)
}

// Query runs a query on the read-only pool.
func (p plugin) Query(ctx context.Context, q string, args ...any) (sqlstore.ClosingRows, error) {
	return p.s.r.QueryContext(ctx, q, args...)
}

// Exec runs a statement in a write transaction of its own.
func (p plugin) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	var n int64
	err := p.s.write(ctx, func(tx *sql.Tx) (err error) {
		n, err = sqlTx{tx}.Exec(ctx, q, args...)
		return err
	})
	return n, err
}

// Write runs first and fn in a transaction of the one writer.
func (p plugin) Write(ctx context.Context, first func(*sqlstore.Batch), fn func(sqlstore.Tx) error) error {
	return p.s.write(ctx, func(tx *sql.Tx) error {
		t := sqlTx{tx}
		if first != nil {
			// The first reads of an update are four statements at most.
			b := &sqlstore.Batch{Items: make([]sqlstore.BatchItem, 0, 4)}
			first(b)
			if err := t.Send(ctx, b); err != nil {
				return err
			}
		}
		return fn(t)
	})
}

// Read runs fn in a read transaction of the read-only pool.
func (p plugin) Read(ctx context.Context, fn func(sqlstore.Tx) error) error {
	return p.s.read(ctx, func(tx *sql.Tx) error { return fn(sqlTx{tx}) })
}

// upsertEntrySQL writes a queue entry (sqlstore.EntryArgs, then its rev
// as $23).
var upsertEntrySQL = `INSERT INTO queue (` + sqlstore.EntryCols + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $23, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)
	` + dialect.EntryConflictSQL()

// QueueUpsertEntry takes the next rev into e.Rev, then writes e under it.
func (plugin) QueueUpsertEntry(b *sqlstore.Batch, e *store.QueueEntry) {
	b.QueryRow(func(row sqlstore.Scanner) error { return row.Scan(&e.Rev) }, sqlstore.NextRevSQL)
	b.Exec(upsertEntrySQL, append(sqlstore.EntryArgs(e), revArg{e})...)
}

// revArg is the rev of e as a statement's argument, read when the
// statement runs: a batch's arguments are read when it is queued, before
// NextRevSQL took the rev. It spares the upsert a subquery of the counter.
type revArg struct{ e *store.QueueEntry }

// Value is e.Rev.
func (r revArg) Value() (driver.Value, error) { return r.e.Rev, nil }

// insertEventSQL inserts one event; SQLite runs it once an event, each a
// step of a prepared statement.
const insertEventSQL = `INSERT INTO events (session_id, seq, body_json) VALUES ($1, $2, $3)`

// QueueInsertEvents queues an insert for each event.
func (plugin) QueueInsertEvents(b *sqlstore.Batch, id string, seqs []int64, bodies []string) {
	for i := range seqs {
		b.Exec(insertEventSQL, id, seqs[i], bodies[i])
	}
}

// QueueNotify notifies nothing: no other server shares the database file.
func (plugin) QueueNotify(*sqlstore.Batch, string, string, int64, *store.QueueEntry) {}

// Appended notifies nothing, as QueueNotify.
func (plugin) Appended(string, string, int64) {}

// sqlTx is a transaction of the writer or of the read-only pool.
type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) QueryRow(ctx context.Context, q string, args ...any) sqlstore.Scanner {
	return t.tx.QueryRowContext(ctx, q, args...)
}

func (t sqlTx) Query(ctx context.Context, q string, args ...any) (sqlstore.ClosingRows, error) {
	return t.tx.QueryContext(ctx, q, args...)
}

func (t sqlTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// SendLast is Send: the one writer commits in process.
func (t sqlTx) SendLast(ctx context.Context, b *sqlstore.Batch) error { return t.Send(ctx, b) }

// Send runs b's statements one after another.
func (t sqlTx) Send(ctx context.Context, b *sqlstore.Batch) error {
	for _, it := range b.Items {
		switch {
		case it.Row != nil:
			if err := it.Row(t.tx.QueryRowContext(ctx, it.SQL, it.Args...)); err != nil {
				return err
			}
		case it.Affected != nil:
			n, err := t.Exec(ctx, it.SQL, it.Args...)
			if err != nil {
				return err
			}
			if err := it.Affected(n); err != nil {
				return err
			}
		default:
			if _, err := t.tx.ExecContext(ctx, it.SQL, it.Args...); err != nil {
				return err
			}
		}
	}
	return nil
}
