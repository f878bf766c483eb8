package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// Option configures Open.
type Option func(*Store)

// WithKeyring seals session secrets at rest with keys. Open then reseals,
// under the keyring's current key, the secrets of every session that are
// plaintext (written without a keyring) or sealed under an older key, and
// fails when some are sealed under a key the keyring lacks. Without it,
// secrets are written as plaintext JSON and sealed ones do not open.
//
// Every server on one database must be able to open what the others seal:
// give them the same keys.
func WithKeyring(keys *sealed.Keyring) Option { return func(s *Store) { s.keys = keys } }

// reseal seals anew, under the current key, the secrets of every session
// that are not sealed under it (see sqlstore.ResealSecrets). Each write is
// guarded by the value it replaces, so servers starting together do not
// undo each other.
func (s *Store) reseal(ctx context.Context) (int, error) {
	find := func(ctx context.Context) ([]sqlstore.Reseal, error) {
		return collect(sqlstore.ScanReseal)(s.pool.Query(ctx, sqlstore.FindResealSQL, s.keys.ID()))
	}
	write := func(ctx context.Context, batch []sqlstore.Reseal) error {
		return s.write(ctx, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			for _, r := range batch {
				b.Queue(sqlstore.ResealSQL, r.New, s.keys.ID(), r.ID, r.Old)
			}
			return tx.SendBatch(ctx, b).Close()
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
		err := s.pool.QueryRow(ctx, sqlstore.ReadSettingSQL, name).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", false, nil
		}
		return v, err == nil, err
	}
	exec := func(ctx context.Context, query string, args ...any) (int64, error) {
		tag, err := s.pool.Exec(ctx, query, args...)
		return tag.RowsAffected(), err
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
