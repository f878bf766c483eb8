package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// plugin runs the statements of package sqlstore's core on a Store: a
// batch in one round trip (a write's first batch with its BEGIN), writes
// tried again on serialization failures and deadlocks, and the change feed
// notified as notify.go tells.
type plugin struct{ s *Store }

var _ sqlstore.Plugin = plugin{}

var _ sqlstore.ClaimWriter = plugin{}

// QueryRow runs a query on the pool.
func (p plugin) QueryRow(ctx context.Context, q string, args ...any) sqlstore.Scanner {
	return p.s.pool.QueryRow(ctx, q, args...)
}

// Query runs a query on the pool.
func (p plugin) Query(ctx context.Context, q string, args ...any) (sqlstore.ClosingRows, error) {
	rows, err := p.s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgRows{rows}, nil
}

// Exec runs a statement on the pool (see Store.exec).
func (p plugin) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := p.s.exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

// Write runs first, sent with the BEGIN, and fn in a transaction (see
// Store.writeBatch).
func (p plugin) Write(ctx context.Context, first func(*sqlstore.Batch), fn func(sqlstore.Tx) error) error {
	var begin func(*pgx.Batch)
	if first != nil {
		begin = func(pb *pgx.Batch) {
			// The first reads of an update are four statements at most.
			b := &sqlstore.Batch{Items: make([]sqlstore.BatchItem, 0, 4)}
			first(b)
			queue(pb, b)
		}
	}
	return p.s.writeBatch(ctx, begin, func(tx pgx.Tx) error { return fn(pgTx{tx}) })
}

// Read runs fn in a read-only REPEATABLE READ transaction.
func (p plugin) Read(ctx context.Context, fn func(sqlstore.Tx) error) error {
	return p.s.read(ctx, func(tx pgx.Tx) error { return fn(pgTx{tx}) })
}

// upsertEntrySQL writes a queue entry (sqlstore.EntryArgs) under the next
// global rev, which it returns. Taking the rev locks the counter row until
// the transaction ends, so revs commit in order; callers queue it last.
var upsertEntrySQL = `WITH r AS (` + sqlstore.NextRevSQL + `)
	INSERT INTO queue (` + sqlstore.EntryCols + `)
	SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, r.value, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22 FROM r
	` + dialect.EntryConflictSQL() + `
	RETURNING rev`

// QueueUpsertEntry takes the rev and writes e in one statement.
func (plugin) QueueUpsertEntry(b *sqlstore.Batch, e *store.QueueEntry) {
	b.QueryRow(func(row sqlstore.Scanner) error {
		if err := row.Scan(&e.Rev); err != nil {
			return fmt.Errorf("queue entry: %w", err)
		}
		return nil
	}, upsertEntrySQL, sqlstore.EntryArgs(e)...)
}

// insertEventsSQL inserts the events of arrays of session ids, seqs and
// bodies in one statement.
const insertEventsSQL = `INSERT INTO events (session_id, seq, body_json)
	SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])`

// QueueInsertEvents inserts every event in one statement.
func (plugin) QueueInsertEvents(b *sqlstore.Batch, id string, seqs []int64, bodies []string) {
	ids := make([]string, len(seqs))
	for i := range ids {
		ids[i] = id
	}
	b.Exec(insertEventsSQL, ids, seqs, bodies)
}

// QueueNotify notifies the write of e in its transaction.
func (p plugin) QueueNotify(b *sqlstore.Batch, id, outpostID string, seq int64, e *store.QueueEntry) {
	if e.OutpostID != "" {
		outpostID = e.OutpostID
	}
	b.Exec(notifySQL, p.s.replica, id, outpostID, seq, e.Epoch, true)
}

// Appended notifies the append just after its commit, coalesced with
// others.
func (p plugin) Appended(id, outpostID string, seq int64) { p.s.late.add(id, outpostID, seq) }

// queue queues b's statements into pb.
func queue(pb *pgx.Batch, b *sqlstore.Batch) {
	pb.QueuedQueries = slices.Grow(pb.QueuedQueries, b.Len())
	for _, it := range b.Items {
		q := pb.Queue(it.SQL, it.Args...)
		switch {
		case it.Row != nil:
			scan := it.Row
			q.QueryRow(func(row pgx.Row) error { return scan(row) })
		case it.Affected != nil:
			check := it.Affected
			q.Exec(func(tag pgconn.CommandTag) error { return check(tag.RowsAffected()) })
		}
	}
}

// pgTx is a transaction of the pool.
type pgTx struct{ tx pgx.Tx }

func (t pgTx) QueryRow(ctx context.Context, q string, args ...any) sqlstore.Scanner {
	return t.tx.QueryRow(ctx, q, args...)
}

func (t pgTx) Query(ctx context.Context, q string, args ...any) (sqlstore.ClosingRows, error) {
	rows, err := t.tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgRows{rows}, nil
}

func (t pgTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

// Send sends b in one round trip.
func (t pgTx) Send(ctx context.Context, b *sqlstore.Batch) error {
	if g, ok := t.tx.(*groupTx); ok {
		var err error
		if b, err = g.hold(b, false); err != nil {
			return err
		}
	}
	if b.Len() == 0 {
		return nil
	}
	pb := &pgx.Batch{}
	queue(pb, b)
	return t.tx.SendBatch(ctx, pb).Close()
}

// SendLast holds b back to send it with the COMMIT of a write
// (writeTx), or sends it now when it has Affected checks, which must be
// able to roll back, or the transaction is not a write's.
func (t pgTx) SendLast(ctx context.Context, b *sqlstore.Batch) error {
	if g, ok := t.tx.(*groupTx); ok && !slices.ContainsFunc(b.Items, func(it sqlstore.BatchItem) bool { return it.Affected != nil }) {
		return g.sendLast(b)
	}
	w, ok := t.tx.(*writeTx)
	if !ok || b.Len() == 0 || slices.ContainsFunc(b.Items, func(it sqlstore.BatchItem) bool { return it.Affected != nil }) {
		return t.Send(ctx, b)
	}
	if err := w.flush(ctx); err != nil {
		return err
	}
	w.last = &pgx.Batch{}
	queue(w.last, b)
	return nil
}

// pgRows are pgx's rows with database/sql's Close.
type pgRows struct{ pgx.Rows }

func (r pgRows) Close() error {
	r.Rows.Close()
	return r.Rows.Err()
}
