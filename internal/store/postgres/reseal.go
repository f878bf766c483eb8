package postgres

import (
	"context"

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
