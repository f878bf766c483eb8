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
	_, err := s.pool.Exec(ctx, `UPDATE queue q SET live_until = GREATEST(COALESCE(q.live_until, 0), $1)
		FROM unnest($2::text[], $3::bigint[]) AS l(session_id, epoch)
		WHERE q.session_id = l.session_id AND q.epoch = l.epoch AND q.phase = $4 AND NOT q.deleted`,
		until.UnixMilli(), ids, epochs, api.PhaseClaimed)
	if err != nil {
		return fmt.Errorf("postgres: keep %d claims alive: %w", len(leases), err)
	}
	return nil
}
