package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// ListArtifactsExpired returns ids of up to limit final sessions that ended
// before endedBefore and whose artifacts are not marked pruned, earliest
// ended first. A limit of 0 or less means no cap.
func (s *Store) ListArtifactsExpired(ctx context.Context, endedBefore time.Time, limit int) ([]string, error) {
	if limit <= 0 {
		limit = -1
	}
	ids, err := s.ids(ctx, `SELECT id FROM sessions
		WHERE artifacts_pruned_at IS NULL AND ended_at IS NOT NULL AND ended_at < $1 AND status IN ($2, $3)
		ORDER BY ended_at, id LIMIT $4`,
		endedBefore.UnixMilli(), api.StatusExit, api.StatusError, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list sessions with expired artifacts: %w", err)
	}
	return ids, nil
}

// MarkArtifactsPruned sets artifacts_pruned_at on those of ids that are
// final and not yet marked, in one transaction, and returns how many.
func (s *Store) MarkArtifactsPruned(ctx context.Context, ids []string, at time.Time) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	args := []any{sqlstore.MS(at), api.StatusExit, api.StatusError}
	for _, id := range ids {
		args = append(args, id)
	}
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET artifacts_pruned_at = ?
			WHERE artifacts_pruned_at IS NULL AND status IN (?, ?) AND id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)`, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: mark artifacts pruned: %w", err)
	}
	return int(n), nil
}
