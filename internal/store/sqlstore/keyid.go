package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/outpost-sh/outpost/internal/store/sealed"
)

// KeyIDSetting names the settings row that holds the id of the key the
// database's session secrets are sealed under.
const KeyIDSetting = "secret_key_id"

// Statements on the settings table both SQL dialects accept.
const (
	// ReadSettingSQL reads the value of setting $1.
	ReadSettingSQL = `SELECT value FROM settings WHERE name = $1`
	// InsertSettingSQL records setting $1 as $2 unless it is recorded.
	InsertSettingSQL = `INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`
	// ReplaceSettingSQL sets setting $2 to $1 where it still is $3.
	ReplaceSettingSQL = `UPDATE settings SET value = $1 WHERE name = $2 AND value = $3`
)

// ErrKeyMismatch is returned by CheckKeyID when the database records
// another key than the keyring's current one, and the keyring does not
// hold that key either; the error is a *KeyMismatchError, which matches
// sealed.ErrUnknownKey too: the database's secrets are sealed under a key
// the keyring lacks, or would be once another server seals any.
var ErrKeyMismatch = errors.New("the database's secret key is not this server's")

// KeyMismatchError names the key the database records and the one the
// server was given.
type KeyMismatchError struct {
	Recorded string // the key id the database records
	Current  string // the server's current key id
}

func (e *KeyMismatchError) Error() string {
	return fmt.Sprintf("the database records that its session secrets are sealed under key id %s, and this server's key has id %s", e.Recorded, e.Current)
}

// Is makes errors.Is(err, ErrKeyMismatch) and errors.Is(err,
// sealed.ErrUnknownKey) hold.
func (e *KeyMismatchError) Is(target error) bool {
	return target == ErrKeyMismatch || target == sealed.ErrUnknownKey
}

// Getter reads a setting; ok is false when there is none.
type Getter func(ctx context.Context, name string) (value string, ok bool, err error)

// Execer runs a statement and says how many rows it changed.
type Execer func(ctx context.Context, query string, args ...any) (int64, error)

// CheckKeyID refuses, with a *KeyMismatchError, a keyring that holds
// neither as its current key nor as an old one the key id the database
// records (KeyIDSetting). It runs before anything is sealed and writes
// nothing, so a server given another key than its database's changes
// nothing. A database that records no key id, or a nil keyring, passes.
func CheckKeyID(ctx context.Context, keys *sealed.Keyring, get Getter) error {
	if keys == nil {
		return nil
	}
	rec, ok, err := get(ctx, KeyIDSetting)
	if err != nil {
		return fmt.Errorf("read the recorded secret key id: %w", err)
	}
	if ok && !keys.Has(rec) {
		return &KeyMismatchError{Recorded: rec, Current: keys.ID()}
	}
	return nil
}

// RecordKeyID records keys' current key id as the database's, once every
// session's secrets are sealed under it: the first start records it, and a
// keyring holding the recorded key as an old one (a rotation) records its
// current key in its place. Servers starting together converge: each
// write is guarded by what it replaces and the value is read again after
// it; one that lost to a server of another key gets a *KeyMismatchError.
func RecordKeyID(ctx context.Context, keys *sealed.Keyring, get Getter, exec Execer) error {
	if keys == nil {
		return nil
	}
	cur := keys.ID()
	// A few rounds: each one lost to another server's write reads again.
	for range 5 {
		rec, ok, err := get(ctx, KeyIDSetting)
		if err != nil {
			return fmt.Errorf("read the recorded secret key id: %w", err)
		}
		switch {
		case ok && rec == cur:
			return nil
		case !ok:
			if _, err := exec(ctx, InsertSettingSQL, KeyIDSetting, cur); err != nil {
				return fmt.Errorf("record the secret key id: %w", err)
			}
		case keys.Has(rec):
			n, err := exec(ctx, ReplaceSettingSQL, cur, KeyIDSetting, rec)
			if err != nil {
				return fmt.Errorf("record the secret key id: %w", err)
			}
			if n == 1 {
				return nil
			}
		default:
			return &KeyMismatchError{Recorded: rec, Current: cur}
		}
	}
	return errors.New("record the secret key id: servers starting at the same time keep changing it; start this one again")
}
