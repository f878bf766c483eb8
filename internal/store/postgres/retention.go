package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// ListArtifactsExpired returns ids of up to limit final sessions that ended
// before endedBefore and whose artifacts are not marked pruned, earliest
// ended first. A limit of 0 or less means no cap.
func (s *Store) ListArtifactsExpired(ctx context.Context, endedBefore time.Time, limit int) ([]string, error) {
	var lim any // NULL: no limit
	if limit > 0 {
		lim = int64(limit)
	}
	ids, err := collect(sqlstore.ScanString)(s.pool.Query(ctx, `SELECT id FROM sessions
		WHERE artifacts_pruned_at IS NULL AND ended_at IS NOT NULL AND ended_at < $1 AND status IN ($2, $3)
		ORDER BY ended_at, id LIMIT $4::bigint`,
		endedBefore.UnixMilli(), api.StatusExit, api.StatusError, lim))
	if err != nil {
		return nil, fmt.Errorf("postgres: list sessions with expired artifacts: %w", err)
	}
	return ids, nil
}

// MarkArtifactsPruned sets artifacts_pruned_at on those of ids that are
// final and not yet marked, in one statement, and returns how many.
func (s *Store) MarkArtifactsPruned(ctx context.Context, ids []string, at time.Time) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var n int64
	// In write, so a deadlock with another sweep is tried again.
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE sessions SET artifacts_pruned_at = $1
			WHERE artifacts_pruned_at IS NULL AND status IN ($2, $3) AND id = ANY($4::text[])`,
			sqlstore.MS(at), api.StatusExit, api.StatusError, ids)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: mark artifacts pruned: %w", err)
	}
	return int(n), nil
}
