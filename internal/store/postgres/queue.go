package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// upsertEntrySQL writes a queue entry (sqlstore.EntryArgs) under the next
// global rev, which it returns. Taking the rev locks the counter row until
// the transaction ends, so revs commit in order; callers queue it last.
var upsertEntrySQL = `WITH r AS (` + sqlstore.NextRevSQL + `)
	INSERT INTO queue (` + sqlstore.EntryCols + `)
	SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, r.value, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19 FROM r
	` + dialect.EntryConflictSQL() + `
	RETURNING rev`

// queueUpsertEntry queues the write of e into b; the assigned rev is
// stored in e.Rev when b runs.
func queueUpsertEntry(b *pgx.Batch, e *store.QueueEntry) {
	b.Queue(upsertEntrySQL, sqlstore.EntryArgs(e)...).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&e.Rev); err != nil {
			return fmt.Errorf("queue entry: %w", err)
		}
		return nil
	})
}

// GetQueueEntry returns one queue entry, tombstones included.
func (s *Store) GetQueueEntry(ctx context.Context, sessionID string) (store.QueueEntry, error) {
	e, err := sqlstore.ScanEntry(s.pool.QueryRow(ctx, sqlstore.GetEntrySQL, sessionID))
	if err != nil {
		return store.QueueEntry{}, fmt.Errorf("postgres: get queue entry %s: %w", sessionID, mapErr(err))
	}
	return e, nil
}

// ListQueue returns entries matching f in Rev order, and the number of live
// entries matching f's OutpostID, Phase and AcceptorID.
func (s *Store) ListQueue(ctx context.Context, f store.QueueFilter) ([]store.QueueEntry, int, error) {
	q := dialect.ListQueue(f)
	var out []store.QueueEntry
	var total int
	err := s.read(ctx, func(tx pgx.Tx) error {
		if !f.NoTotal {
			if err := tx.QueryRow(ctx, q.Count, q.CountArgs...).Scan(&total); err != nil {
				return err
			}
		}
		var err error
		out, err = collect(sqlstore.ScanEntry)(tx.Query(ctx, q.Page, q.PageArgs...))
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: list queue: %w", err)
	}
	return out, total, nil
}

// MaxRev is the highest Rev assigned so far (0 when none).
func (s *Store) MaxRev(ctx context.Context) (int64, error) {
	var rev int64
	if err := s.pool.QueryRow(ctx, sqlstore.MaxRevSQL).Scan(&rev); err != nil {
		return 0, fmt.Errorf("postgres: max rev: %w", err)
	}
	return rev, nil
}

// LapsedClaims returns ids of claimed, live entries whose Expiry is at or
// before now, earliest first.
func (s *Store) LapsedClaims(ctx context.Context, now time.Time) ([]string, error) {
	ids, err := collect(sqlstore.ScanString)(s.pool.Query(ctx, lapsedClaimsSQL, api.PhaseClaimed, now.UnixMilli()))
	if err != nil {
		return nil, fmt.Errorf("postgres: lapsed claims: %w", err)
	}
	return ids, nil
}

// KeepAlive raises live_until on the leases' entries still of their epoch,
// in one statement.
func (s *Store) KeepAlive(ctx context.Context, until time.Time, leases ...store.Lease) error {
	if len(leases) == 0 {
		return nil
	}
	ids := make([]string, len(leases))
	epochs := make([]int64, len(leases))
	for i, l := range leases {
		ids[i], epochs[i] = l.SessionID, l.Epoch
	}
	_, err := s.pool.Exec(ctx, `UPDATE queue q SET live_until = GREATEST(COALESCE(q.live_until, 0), $1)
		FROM unnest($2::text[], $3::bigint[]) AS l(session_id, epoch)
		WHERE q.session_id = l.session_id AND q.epoch = l.epoch AND q.phase = $4 AND NOT q.deleted`,
		until.UnixMilli(), ids, epochs, api.PhaseClaimed)
	if err != nil {
		return fmt.Errorf("postgres: keep %d claims alive: %w", len(leases), err)
	}
	return nil
}

// ActiveSessions returns ids of sessions whose status is not final (see
// api.IsFinal), oldest first.
func (s *Store) ActiveSessions(ctx context.Context) ([]string, error) {
	ids, err := collect(sqlstore.ScanString)(s.pool.Query(ctx, sqlstore.ActiveSessionsSQL))
	if err != nil {
		return nil, fmt.Errorf("postgres: active sessions: %w", err)
	}
	return ids, nil
}

// pruneQueueSQL is sqlstore.PruneQueueSQL in PostgreSQL's spelling.
var (
	pruneQueueSQL   = sqlstore.PruneQueueSQL("q.deleted")
	raiseHorizonSQL = dialect.RaiseQueueHorizonSQL()
)

// PruneQueue deletes up to limit tombstones of ended sessions written
// before before, and raises the horizon to the highest rev deleted. It
// notifies nothing: a tombstone past the horizon is no change a watch
// waits for.
func (s *Store) PruneQueue(ctx context.Context, before time.Time, limit int) (int, error) {
	var n int
	err := s.write(ctx, func(tx pgx.Tx) error {
		args := []any{before.UnixMilli(), api.StatusExit, api.StatusError}
		pruned, err := collect(sqlstore.ScanPruned)(tx.Query(ctx, pruneQueueSQL, append(args, limit)...))
		if err != nil {
			return err
		}
		n = len(pruned)
		if n == 0 {
			return nil
		}
		for outpostID, rev := range sqlstore.Horizons(pruned) {
			if _, err := tx.Exec(ctx, raiseHorizonSQL, outpostID, rev); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: prune queue: %w", err)
	}
	return n, nil
}

// QueueHorizon is the highest rev of a pruned tombstone of the outpost
// ("" for any; 0 when none).
func (s *Store) QueueHorizon(ctx context.Context, outpostID string) (int64, error) {
	var rev int64
	if err := s.pool.QueryRow(ctx, sqlstore.QueueHorizonSQL, outpostID).Scan(&rev); err != nil {
		return 0, fmt.Errorf("postgres: queue horizon: %w", err)
	}
	return rev, nil
}
