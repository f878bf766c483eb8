package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/outpost-sh/outpost/internal/datadir"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// SecretKeyFileName is the key file in the data dir that seals session
// secrets when no key is given; the first start creates it.
const SecretKeyFileName = datadir.SecretKey

// openSealedStore loads the secret keys and opens the store with them,
// which seals anew every session's secrets not sealed under the current
// key. A database whose secrets no given key opens is refused, with what
// to do.
func (s *Server) openSealedStore(ctx context.Context) (store.Store, error) {
	keys, current, source, err := loadKeyring(s.opts, s.log)
	if err != nil {
		return nil, err
	}
	s.replicaKey = replicaAuthKey(current)
	st, err := openStore(ctx, s.opts, keys)
	var mismatch *sqlstore.KeyMismatchError
	if errors.As(err, &mismatch) {
		return nil, fmt.Errorf("server: open database: %w: every server on one database must have the same secret key. "+
			"Set OUTPOST_SECRET_KEY (or --secret-key-file) to the key with id %s, the one the other servers use; "+
			"to move to this key instead, also give that key in OUTPOST_SECRET_KEYS_OLD (see \"Rotating the key\" in docs/secrets.md)",
			err, mismatch.Recorded)
	}
	if errors.Is(err, sealed.ErrUnknownKey) {
		return nil, fmt.Errorf("server: open database: %w. Start the server with the key they were sealed under, "+
			"as OUTPOST_SECRET_KEY or listed in OUTPOST_SECRET_KEYS_OLD (see docs/secrets.md)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("server: open database: %w", err)
	}
	attrs := []any{"key_id", keys.ID(), "key", string(source)}
	if r, ok := st.(interface{ Resealed() int }); ok && r.Resealed() > 0 {
		attrs = append(attrs, "resealed_sessions", r.Resealed())
	}
	s.log.Info("session secrets sealed at rest", attrs...)
	return st, nil
}

// keySource says where the current key came from, for the start log.
type keySource string

// loadKeyring builds the keyring that seals session secrets at rest from
// opts: SecretKey, or else the key file (the default one created with a
// random key on first start), with OldSecretKeys to open what older keys
// sealed. When SecretKey is given and the key file exists too, the file's
// key joins the old keys, so moving from the file to an explicit key needs
// no further step. Keys are never logged; their ids are.
func loadKeyring(opts Options, log *slog.Logger) (keys *sealed.Keyring, current []byte, source keySource, err error) {
	path := opts.SecretKeyFile
	explicit := path != ""
	if !explicit {
		path = filepath.Join(opts.DataDir, SecretKeyFileName)
	}
	old := opts.OldSecretKeys
	current = opts.SecretKey
	source = keySource("option")
	if current != nil {
		if k, err := readKeyFile(path, log); err == nil {
			old = append(old, k)
		} else if explicit || !errors.Is(err, os.ErrNotExist) {
			return nil, nil, "", err
		}
	} else {
		k, err := readKeyFile(path, log)
		switch {
		case err == nil:
			source = keySource(path)
		case errors.Is(err, os.ErrNotExist) && !explicit:
			if k, err = createKeyFile(path); err != nil {
				return nil, nil, "", err
			}
			source = keySource(path + " (created)")
		default:
			return nil, nil, "", err
		}
		current = k
	}
	keys, err = sealed.NewKeyring(current, old...)
	if err != nil {
		return nil, nil, "", fmt.Errorf("server: secret keys: %w", err)
	}
	return keys, current, source, nil
}

// readKeyFile reads a key file: one key, base64 or hex.
func readKeyFile(path string, log *slog.Logger) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("server: secret key file %s does not exist: %w", path, err)
		}
		return nil, fmt.Errorf("server: read the secret key file: %w", err)
	}
	k, err := sealed.ParseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("server: secret key file %s: %w", path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the secret key file is readable by other users; chmod 600 it", "path", path, "mode", fi.Mode().Perm().String())
	}
	return k, nil
}

// createKeyFile writes a new random key to path (0600). The key is
// written to a temporary file that is then linked into place, so path
// never holds a partial key; when path appeared meanwhile (another server
// starting on the same data dir), that key is read instead.
func createKeyFile(path string) ([]byte, error) {
	k, err := sealed.GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("server: create the secret key file: %w", err)
	}
	defer os.Remove(f.Name())
	_, werr := f.WriteString(sealed.EncodeKey(k) + "\n")
	if err := errors.Join(werr, f.Chmod(0o600), f.Sync(), f.Close()); err != nil {
		return nil, fmt.Errorf("server: write the secret key file: %w", err)
	}
	if err := os.Link(f.Name(), path); errors.Is(err, os.ErrExist) {
		return readKeyFile(path, slog.New(slog.DiscardHandler))
	} else if err != nil {
		return nil, fmt.Errorf("server: create the secret key file: %w", err)
	}
	return k, nil
}
