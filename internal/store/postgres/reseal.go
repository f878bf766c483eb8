package postgres

import (
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

// Resealed is how many sessions' secrets Open sealed under the current key.
func (s *Store) Resealed() int { return s.resealed }
