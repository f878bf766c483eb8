package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

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
