package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// PutWorker records a heartbeat in one transaction. A transaction-scoped
// advisory lock of the outpost's presence orders the heartbeats of one
// outpost, so the live count and the instance check hold across servers,
// without locking the outpost row, which claims lock. An outpost deleted
// meanwhile fails the insert's foreign key.
func (s *Store) PutWorker(ctx context.Context, w store.Worker, max int) (store.Worker, error) {
	now := sqlstore.MS(w.LastSeenAt)
	var out store.Worker
	var prev *store.Worker
	var live int
	err := s.writeBatch(ctx, func(b *pgx.Batch) {
		prev, live = nil, 0
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, lockKey("workers:"+w.OutpostID))
		b.Queue(sqlstore.OutpostExistsSQL, w.OutpostID).QueryRow(func(row pgx.Row) error {
			var id string
			return row.Scan(&id)
		})
		b.Queue(sqlstore.PruneWorkersSQL, w.OutpostID, now)
		b.Queue(sqlstore.GetWorkerSQL, w.OutpostID, w.AcceptorID).QueryRow(func(row pgx.Row) error {
			p, err := sqlstore.ScanWorker(row)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			prev = &p
			return err
		})
		b.Queue(sqlstore.CountOutpostWorkersSQL, w.OutpostID).QueryRow(func(row pgx.Row) error {
			return row.Scan(&live)
		})
	}, func(tx pgx.Tx) error {
		var err error
		if out, err = sqlstore.PlanWorker(prev, live, w, max); err != nil {
			return err
		}
		args, err := sqlstore.WorkerArgs(out)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, sqlstore.UpsertWorkerSQL, args...)
		return err
	})
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23503" { // the outpost went
			err = pgx.ErrNoRows
		}
		return store.Worker{}, fmt.Errorf("postgres: put worker %s of %s: %w", w.AcceptorID, w.OutpostID, mapErr(err))
	}
	return out, nil
}

// DeleteWorker removes an acceptor's entry unless another instance holds it.
func (s *Store) DeleteWorker(ctx context.Context, outpostID, acceptorID, instance string) (bool, error) {
	tag, err := s.pool.Exec(ctx, sqlstore.DeleteWorkerSQL, outpostID, acceptorID, instance)
	if err != nil {
		return false, fmt.Errorf("postgres: delete worker %s of %s: %w", acceptorID, outpostID, err)
	}
	return tag.RowsAffected() > 0, nil
}

// ListWorkers returns the outpost's live entries by acceptor id.
func (s *Store) ListWorkers(ctx context.Context, outpostID string, now time.Time) ([]store.Worker, error) {
	out, err := collect(sqlstore.ScanWorker)(s.pool.Query(ctx, sqlstore.ListWorkersSQL, outpostID, sqlstore.MS(now)))
	if err != nil {
		return nil, fmt.Errorf("postgres: list workers of %s: %w", outpostID, err)
	}
	return out, nil
}

// CountWorkers counts the live entries by outpost and kind.
func (s *Store) CountWorkers(ctx context.Context, now time.Time) ([]store.WorkerCount, error) {
	out, err := collect(sqlstore.ScanWorkerCount)(s.pool.Query(ctx, sqlstore.CountWorkersSQL, sqlstore.MS(now)))
	if err != nil {
		return nil, fmt.Errorf("postgres: count workers: %w", err)
	}
	return out, nil
}
