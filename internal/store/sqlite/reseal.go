package sqlite

import (
	"context"
	"database/sql"
	"errors"

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

// keyID checks the recorded secret key id against the keyring before
// anything is sealed (sqlstore.CheckKeyID), then reseals, then records the
// current key id (sqlstore.RecordKeyID). It returns how many sessions it
// sealed anew.
func (s *Store) keyID(ctx context.Context) (int, error) {
	get := func(ctx context.Context, name string) (string, bool, error) {
		var v string
		err := s.w.QueryRowContext(ctx, sqlstore.ReadSettingSQL, name).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return "", false, nil
		}
		return v, err == nil, err
	}
	exec := func(ctx context.Context, query string, args ...any) (int64, error) {
		var n int64
		err := s.write(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, query, args...)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		return n, err
	}
	if err := sqlstore.CheckKeyID(ctx, s.keys, get); err != nil {
		return 0, err
	}
	n, err := s.reseal(ctx)
	if err != nil {
		return n, err
	}
	return n, sqlstore.RecordKeyID(ctx, s.keys, get, exec)
}
