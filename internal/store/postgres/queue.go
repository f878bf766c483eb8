package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

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
	// The rows are locked in session id order, the order in which a group
	// of claims (group.go) writes the entries it holds until its commit,
	// so that the two never wait for each other in a cycle.
	_, err := s.pool.Exec(ctx, `WITH k AS (SELECT q.session_id FROM queue q
			JOIN unnest($2::text[], $3::bigint[]) AS l(session_id, epoch) ON q.session_id = l.session_id AND q.epoch = l.epoch
			WHERE q.phase = $4 AND NOT q.deleted ORDER BY q.session_id FOR UPDATE OF q)
		UPDATE queue q SET live_until = GREATEST(COALESCE(q.live_until, 0), $1)
		FROM k WHERE q.session_id = k.session_id`,
		until.UnixMilli(), ids, epochs, api.PhaseClaimed)
	if err != nil {
		return fmt.Errorf("postgres: keep %d claims alive: %w", len(leases), err)
	}
	return nil
}
