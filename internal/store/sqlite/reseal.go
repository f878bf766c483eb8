package sqlite

import (
	"context"
	"database/sql"

	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// reseal seals anew, under the current key, the secrets of every session
// that are not sealed under it (see sqlstore.ResealSecrets).
func (s *Store) reseal(ctx context.Context) (int, error) {
	find := func(ctx context.Context) ([]sqlstore.Reseal, error) {
		rows, err := s.r.QueryContext(ctx, sqlstore.FindResealSQL, s.keys.ID())
		return collect(rows, err, sqlstore.ScanReseal)
	}
	write := func(ctx context.Context, batch []sqlstore.Reseal) error {
		return s.write(ctx, func(tx *sql.Tx) error {
			for _, r := range batch {
				if _, err := tx.ExecContext(ctx, sqlstore.ResealSQL, r.New, s.keys.ID(), r.ID, r.Old); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return sqlstore.ResealSecrets(ctx, s.keys, find, write)
}

// Resealed is how many sessions' secrets Open sealed under the current key.
func (s *Store) Resealed() int { return s.resealed }
