package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// PutWorker records a heartbeat in one write transaction; the single
// writer orders the heartbeats.
func (s *Store) PutWorker(ctx context.Context, w store.Worker, max int) (store.Worker, error) {
	now := sqlstore.MS(w.LastSeenAt)
	var out store.Worker
	err := s.write(ctx, func(tx *sql.Tx) error {
		var id string
		if err := tx.QueryRowContext(ctx, sqlstore.OutpostExistsSQL, w.OutpostID).Scan(&id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlstore.PruneWorkersSQL, w.OutpostID, now); err != nil {
			return err
		}
		var prev *store.Worker
		p, err := sqlstore.ScanWorker(tx.QueryRowContext(ctx, sqlstore.GetWorkerSQL, w.OutpostID, w.AcceptorID))
		switch {
		case err == nil:
			prev = &p
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		var live int
		if err := tx.QueryRowContext(ctx, sqlstore.CountOutpostWorkersSQL, w.OutpostID).Scan(&live); err != nil {
			return err
		}
		if out, err = sqlstore.PlanWorker(prev, live, w, max); err != nil {
			return err
		}
		args, err := sqlstore.WorkerArgs(out)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, sqlstore.UpsertWorkerSQL, args...)
		return err
	})
	if err != nil {
		return store.Worker{}, fmt.Errorf("sqlite: put worker %s of %s: %w", w.AcceptorID, w.OutpostID, mapErr(err))
	}
	return out, nil
}

// DeleteWorker removes an acceptor's entry unless another instance holds it.
func (s *Store) DeleteWorker(ctx context.Context, outpostID, acceptorID, instance string) (bool, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, sqlstore.DeleteWorkerSQL, outpostID, acceptorID, instance)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sqlite: delete worker %s of %s: %w", acceptorID, outpostID, err)
	}
	return n > 0, nil
}

// ListWorkers returns the outpost's live entries by acceptor id.
func (s *Store) ListWorkers(ctx context.Context, outpostID string, now time.Time) ([]store.Worker, error) {
	rows, err := s.r.QueryContext(ctx, sqlstore.ListWorkersSQL, outpostID, sqlstore.MS(now))
	out, err := collect(rows, err, sqlstore.ScanWorker)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list workers of %s: %w", outpostID, err)
	}
	return out, nil
}

// CountWorkers counts the live entries by outpost and kind.
func (s *Store) CountWorkers(ctx context.Context, now time.Time) ([]store.WorkerCount, error) {
	rows, err := s.r.QueryContext(ctx, sqlstore.CountWorkersSQL, sqlstore.MS(now))
	out, err := collect(rows, err, sqlstore.ScanWorkerCount)
	if err != nil {
		return nil, fmt.Errorf("sqlite: count workers: %w", err)
	}
	return out, nil
}
