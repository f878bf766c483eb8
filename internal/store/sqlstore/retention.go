package sqlstore

import (
	"context"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// ListArtifactsExpired returns ids of up to limit final sessions that ended
// before endedBefore and whose artifacts are not marked pruned, earliest
// ended first. A limit of 0 or less means no cap.
func (s *Store) ListArtifactsExpired(ctx context.Context, endedBefore time.Time, limit int) ([]string, error) {
	ids, err := QueryAll(ctx, s.db, ScanString, `SELECT id FROM sessions
		WHERE artifacts_pruned_at IS NULL AND ended_at IS NOT NULL AND ended_at < $1 AND status IN ($2, $3)
		ORDER BY ended_at, id LIMIT $4`,
		endedBefore.UnixMilli(), api.StatusExit, api.StatusError, s.limit(limit))
	if err != nil {
		return nil, s.errorf(err, "list sessions with expired artifacts")
	}
	return ids, nil
}

// MarkArtifactsPruned sets artifacts_pruned_at on those of ids that are
// final and not yet marked, in one statement, and returns how many.
func (s *Store) MarkArtifactsPruned(ctx context.Context, ids []string, at time.Time) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var w Where
	w.And("artifacts_pruned_at IS NULL")
	setAt := w.Arg(MS(at))
	w.And("status IN (" + w.Arg(api.StatusExit) + ", " + w.Arg(api.StatusError) + ")")
	w.And(s.d.In(&w, "id", ids))
	cond, args := w.SQL()
	var n int64
	// In a write transaction, so a deadlock with another sweep is tried
	// again.
	err := s.db.Write(ctx, nil, func(tx Tx) (err error) {
		n, err = tx.Exec(ctx, `UPDATE sessions SET artifacts_pruned_at = `+setAt+` WHERE `+cond, args...)
		return err
	})
	if err != nil {
		return 0, s.errorf(err, "mark artifacts pruned")
	}
	return int(n), nil
}
