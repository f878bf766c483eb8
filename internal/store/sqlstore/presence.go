package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/store"
)

// PutWorker records a heartbeat in one write transaction whose reads are
// sent with its BEGIN. The heartbeats of one outpost are ordered (by the
// dialect's Lock.Workers on PostgreSQL, an advisory lock that leaves the
// outpost row, which claims lock, alone; by the one writer on SQLite), so
// the live count and the instance check hold across servers. An outpost
// deleted meanwhile fails the insert's foreign key: store.ErrNotFound.
//
// A heartbeat of a live entry (nearly all of them: each worker beats every
// api.WorkerHeartbeatInterval) reads and writes by key alone, so its cost
// does not grow with the outpost's workers. Only a heartbeat that connects
// an acceptor counts the outpost's entries against max.
func (s *Store) PutWorker(ctx context.Context, w store.Worker, max int) (store.Worker, error) {
	now := MS(w.LastSeenAt)
	var out store.Worker
	var prev *store.Worker
	err := s.db.Write(ctx, func(b *Batch) {
		prev = nil
		if s.d.Lock.Workers != nil {
			q, args := s.d.Lock.Workers(w.OutpostID)
			b.Exec(q, args...)
		}
		b.QueryRow(func(row Scanner) error {
			var id string
			return row.Scan(&id)
		}, OutpostExistsSQL, w.OutpostID)
		b.Exec(s.d.PruneWorkersSQL(), w.OutpostID, MS(w.LastSeenAt.Add(-store.WorkerOfflineKeep)))
		b.QueryRow(func(row Scanner) error {
			p, err := ScanWorker(row)
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			prev = &p
			return err
		}, GetWorkerSQL, w.OutpostID, w.AcceptorID, now)
	}, func(tx Tx) error {
		live := 0
		if prev == nil && max > 0 {
			var err error
			if live, err = s.liveWorkers(ctx, tx, w.OutpostID, now, max); err != nil {
				return err
			}
		}
		var err error
		if out, err = PlanWorker(prev, live, w, max); err != nil {
			return err
		}
		// A heartbeat is in the audit log when it connects the worker
		// (its first, or the first after its entry lapsed), not at each
		// beat.
		if e, _ := audit.Pending(ctx); e != nil {
			e.Skip = !out.ConnectedAt.Equal(out.LastSeenAt)
		}
		args, err := WorkerArgs(out)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, UpsertWorkerSQL, args...)
		if err != nil && s.d.IsForeignKeyViolation != nil && s.d.IsForeignKeyViolation(err) {
			err = sql.ErrNoRows // the outpost went
		}
		return err
	})
	if err != nil {
		return store.Worker{}, s.errorf(err, "put worker %s of %s", w.AcceptorID, w.OutpostID)
	}
	return out, nil
}

// liveWorkers counts outpostID's entries live at now as far as PlanWorker
// needs against max: the count of all its entries, live or kept offline,
// when that is under max (the primary key's index answers it without
// reading the rows), else the exact count of the live ones.
func (s *Store) liveWorkers(ctx context.Context, tx Tx, outpostID string, now int64, max int) (int, error) {
	var n int
	if err := tx.QueryRow(ctx, CountOutpostEntriesSQL, outpostID).Scan(&n); err != nil {
		return 0, err
	}
	if n < max {
		return n, nil
	}
	err := tx.QueryRow(ctx, CountOutpostWorkersSQL, outpostID, now).Scan(&n)
	return n, err
}

// DeleteWorker ends an acceptor's life at now unless another instance
// holds it; the entry stays, offline, for store.WorkerOfflineKeep.
func (s *Store) DeleteWorker(ctx context.Context, outpostID, acceptorID, instance string, now time.Time) (bool, error) {
	n, err := s.db.Exec(ctx, OfflineWorkerSQL, outpostID, acceptorID, instance, MS(now))
	if err != nil {
		return false, s.errorf(err, "delete worker %s of %s", acceptorID, outpostID)
	}
	return n > 0, nil
}

// ListWorkers returns the outpost's live entries by acceptor id.
func (s *Store) ListWorkers(ctx context.Context, outpostID string, now time.Time) ([]store.Worker, error) {
	out, err := QueryAll(ctx, s.db, ScanWorker, ListWorkersSQL, outpostID, MS(now))
	if err != nil {
		return nil, s.errorf(err, "list workers of %s", outpostID)
	}
	return out, nil
}

// RecentWorkers returns the entries live after since, of one outpost or
// of every outpost.
func (s *Store) RecentWorkers(ctx context.Context, outpostID string, since time.Time) ([]store.Worker, error) {
	out, err := QueryAll(ctx, s.db, ScanWorker, RecentWorkersSQL, outpostID, MS(since))
	if err != nil {
		return nil, s.errorf(err, "list recent workers")
	}
	return out, nil
}

// GetWorker returns an outpost's acceptor's entry, live or offline.
func (s *Store) GetWorker(ctx context.Context, outpostID, acceptorID string) (store.Worker, error) {
	out, err := ScanWorker(s.db.QueryRow(ctx, GetAnyWorkerSQL, outpostID, acceptorID))
	if err != nil {
		return store.Worker{}, s.errorf(err, "get worker %s of %s", acceptorID, outpostID)
	}
	return out, nil
}

// CountWorkers counts the live entries by outpost and kind.
func (s *Store) CountWorkers(ctx context.Context, now time.Time) ([]store.WorkerCount, error) {
	out, err := QueryAll(ctx, s.db, ScanWorkerCount, CountWorkersSQL, MS(now))
	if err != nil {
		return nil, s.errorf(err, "count workers")
	}
	return out, nil
}
