package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// upsertEntrySQL writes a queue entry: sqlstore.EntryArgs, then the rev as
// $20.
var upsertEntrySQL = `INSERT INTO queue (` + sqlstore.EntryCols + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $20, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
	` + dialect.EntryConflictSQL()

// upsertEntry writes e under the next global rev, which it stores in e.Rev.
func upsertEntry(ctx context.Context, tx *sql.Tx, e *store.QueueEntry) error {
	var rev int64
	if err := tx.QueryRowContext(ctx, sqlstore.NextRevSQL).Scan(&rev); err != nil {
		return fmt.Errorf("next rev: %w", err)
	}
	if _, err := tx.ExecContext(ctx, upsertEntrySQL, append(sqlstore.EntryArgs(e), rev)...); err != nil {
		return fmt.Errorf("queue entry: %w", err)
	}
	e.Rev = rev
	return nil
}

// GetQueueEntry returns one queue entry, tombstones included.
func (s *Store) GetQueueEntry(ctx context.Context, sessionID string) (store.QueueEntry, error) {
	e, err := sqlstore.ScanEntry(s.r.QueryRowContext(ctx, sqlstore.GetEntrySQL, sessionID))
	if err != nil {
		return store.QueueEntry{}, fmt.Errorf("sqlite: get queue entry %s: %w", sessionID, mapErr(err))
	}
	return e, nil
}

// ListQueue returns entries matching f in Rev order, and the number of live
// entries matching f's OutpostID, Phase and AcceptorID.
func (s *Store) ListQueue(ctx context.Context, f store.QueueFilter) ([]store.QueueEntry, int, error) {
	q := dialect.ListQueue(f)
	var out []store.QueueEntry
	var total int
	err := s.read(ctx, func(tx *sql.Tx) error {
		if !f.NoTotal {
			if err := tx.QueryRowContext(ctx, q.Count, q.CountArgs...).Scan(&total); err != nil {
				return err
			}
		}
		rows, err := tx.QueryContext(ctx, q.Page, q.PageArgs...)
		out, err = collect(rows, err, sqlstore.ScanEntry)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: list queue: %w", err)
	}
	return out, total, nil
}

// MaxRev is the highest Rev assigned so far (0 when none).
func (s *Store) MaxRev(ctx context.Context) (int64, error) {
	var rev int64
	if err := s.r.QueryRowContext(ctx, sqlstore.MaxRevSQL).Scan(&rev); err != nil {
		return 0, fmt.Errorf("sqlite: max rev: %w", err)
	}
	return rev, nil
}

// LapsedClaims returns ids of claimed, live entries whose Expiry is at or
// before now, earliest first.
func (s *Store) LapsedClaims(ctx context.Context, now time.Time) ([]string, error) {
	ids, err := s.ids(ctx, lapsedClaimsSQL, api.PhaseClaimed, now.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("sqlite: lapsed claims: %w", err)
	}
	return ids, nil
}

// KeepAlive raises live_until on the leases' entries still of their epoch.
func (s *Store) KeepAlive(ctx context.Context, until time.Time, leases ...store.Lease) error {
	if len(leases) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `UPDATE queue SET live_until = MAX(COALESCE(live_until, 0), $1)
			WHERE session_id = $2 AND epoch = $3 AND phase = $4 AND deleted = 0`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, l := range leases {
			if _, err := stmt.ExecContext(ctx, until.UnixMilli(), l.SessionID, l.Epoch, api.PhaseClaimed); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: keep %d claims alive: %w", len(leases), err)
	}
	return nil
}

// ActiveSessions returns ids of sessions whose status is not final (see
// api.IsFinal), oldest first.
func (s *Store) ActiveSessions(ctx context.Context) ([]string, error) {
	ids, err := s.ids(ctx, sqlstore.ActiveSessionsSQL)
	if err != nil {
		return nil, fmt.Errorf("sqlite: active sessions: %w", err)
	}
	return ids, nil
}

// ids runs a query of one string column.
func (s *Store) ids(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	return collect(rows, err, sqlstore.ScanString)
}

// pruneQueueSQL is sqlstore.PruneQueueSQL in SQLite's spelling.
var (
	pruneQueueSQL   = sqlstore.PruneQueueSQL("q.deleted = 1")
	raiseHorizonSQL = dialect.RaiseQueueHorizonSQL()
)

// PruneQueue deletes up to limit tombstones of ended sessions written
// before before, and raises the horizon to the highest rev deleted.
func (s *Store) PruneQueue(ctx context.Context, before time.Time, limit int) (int, error) {
	var n int
	err := s.write(ctx, func(tx *sql.Tx) error {
		args := []any{before.UnixMilli(), api.StatusExit, api.StatusError}
		rows, err := tx.QueryContext(ctx, pruneQueueSQL, append(args, limit)...)
		pruned, err := collect(rows, err, sqlstore.ScanPruned)
		if err != nil {
			return err
		}
		n = len(pruned)
		if n == 0 {
			return nil
		}
		for outpostID, rev := range sqlstore.Horizons(pruned) {
			if _, err := tx.ExecContext(ctx, raiseHorizonSQL, outpostID, rev); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: prune queue: %w", err)
	}
	return n, nil
}

// QueueHorizon is the highest rev of a pruned tombstone of the outpost
// ("" for any; 0 when none).
func (s *Store) QueueHorizon(ctx context.Context, outpostID string) (int64, error) {
	var rev int64
	if err := s.r.QueryRowContext(ctx, sqlstore.QueueHorizonSQL, outpostID).Scan(&rev); err != nil {
		return 0, fmt.Errorf("sqlite: queue horizon: %w", err)
	}
	return rev, nil
}
