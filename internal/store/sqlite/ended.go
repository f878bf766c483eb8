package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

var (
	endedEntriesSQL   = dialect.EndedEntriesSQL("")
	tombstoneEndedSQL = dialect.TombstoneEndedSQL("1")
)

// TombstoneEnded turns up to limit entries of ended sessions written before
// before into tombstones, oldest first, each under its own rev, in one
// write transaction. The pick and the writes share the store's one
// writer, so no other write comes between them.
func (s *Store) TombstoneEnded(ctx context.Context, before, now time.Time, limit int) ([]store.QueueEntry, error) {
	var out []store.QueueEntry
	err := s.write(ctx, func(tx *sql.Tx) error {
		out = nil
		rows, err := tx.QueryContext(ctx, endedEntriesSQL, before.UnixMilli(), limit)
		ids, err := collect(rows, err, sqlstore.ScanString)
		if err != nil {
			return err
		}
		for _, id := range ids {
			var rev int64
			if err := tx.QueryRowContext(ctx, sqlstore.NextRevSQL).Scan(&rev); err != nil {
				return fmt.Errorf("next rev: %w", err)
			}
			e, err := sqlstore.ScanEntry(tx.QueryRowContext(ctx, tombstoneEndedSQL, id, now.UnixMilli(), rev, before.UnixMilli()))
			if err != nil {
				return fmt.Errorf("tombstone %s: %w", id, err)
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: tombstone ended entries: %w", err)
	}
	return out, nil
}
