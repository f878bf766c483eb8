package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/internal/store/sealed"
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

// resealBatch bounds the sessions one reseal transaction rewrites.
const resealBatch = 500

// reseal seals anew, under the current key, the secrets of every session
// that are not sealed under it: plaintext written before secrets were
// sealed, or values of an older key. Every value is opened before any is
// written, so a value no key opens fails Open and changes nothing. Each
// write is guarded by the value it replaces, so servers starting together
// do not undo each other.
func (s *Store) reseal(ctx context.Context) (int, error) {
	if s.keys == nil {
		return 0, nil
	}
	type row struct{ id, old, new string }
	id := s.keys.ID()
	// Through the index of secrets_key: rows under any other key, or none.
	rows, err := s.pool.Query(ctx, `SELECT id, secrets_json FROM sessions WHERE secrets_key < $1 OR secrets_key > $1`, id)
	todo, err := collect(func(sc scanner) (row, error) {
		var r row
		err := sc.Scan(&r.id, &r.old)
		return r, err
	})(rows, err)
	if err != nil {
		return 0, fmt.Errorf("find secrets to seal: %w", err)
	}
	for i := range todo {
		r := &todo[i]
		if r.new, err = s.keys.Reseal(r.id, r.old); err != nil {
			return 0, fmt.Errorf("reseal the secrets of session %s: %w", r.id, err)
		}
	}
	for start := 0; start < len(todo); start += resealBatch {
		batch := todo[start:min(start+resealBatch, len(todo))]
		err := s.write(ctx, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			for _, r := range batch {
				b.Queue(`UPDATE sessions SET secrets_json = $1, secrets_key = $2 WHERE id = $3 AND secrets_json = $4`, r.new, id, r.id, r.old)
			}
			return tx.SendBatch(ctx, b).Close()
		})
		if err != nil {
			return start, fmt.Errorf("seal session secrets: %w", err)
		}
	}
	return len(todo), nil
}

// Resealed is how many sessions' secrets Open sealed under the current key.
func (s *Store) Resealed() int { return s.resealed }
