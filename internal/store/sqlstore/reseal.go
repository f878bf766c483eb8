package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/outpost-sh/outpost/internal/store/sealed"
)

// ResealBatch bounds the sessions one reseal transaction rewrites, so no
// writer is held long.
const ResealBatch = 500

// Reseal is one session's secrets to seal anew: the stored value and the
// one to write in its place.
type Reseal struct {
	ID, Old, New string
}

// ResealSecrets seals anew, under keys' current key, the secrets of every
// session that are not sealed under it: plaintext written before secrets
// were sealed, or values of an older key. find returns those sessions (ID
// and Old, through FindResealSQL); write stores a batch of at most
// ResealBatch of them in one transaction, each guarded by the value it
// replaces (ResealSQL). Every value is opened before any is written, so a
// value no key opens fails and changes nothing. It returns how many
// sessions it wrote; nil keys write none.
func ResealSecrets(ctx context.Context, keys *sealed.Keyring, find func(context.Context) ([]Reseal, error),
	write func(context.Context, []Reseal) error) (int, error) {
	if keys == nil {
		return 0, nil
	}
	todo, err := find(ctx)
	if err != nil {
		return 0, fmt.Errorf("find secrets to seal: %w", err)
	}
	for i := range todo {
		r := &todo[i]
		if r.New, err = keys.Reseal(r.ID, r.Old); err != nil {
			return 0, fmt.Errorf("reseal the secrets of session %s: %w", r.ID, err)
		}
	}
	for start := 0; start < len(todo); start += ResealBatch {
		if err := write(ctx, todo[start:min(start+ResealBatch, len(todo))]); err != nil {
			return start, fmt.Errorf("seal session secrets: %w", err)
		}
	}
	return len(todo), nil
}

// ScanReseal reads the id and secrets_json of FindResealSQL.
func ScanReseal(sc Scanner) (Reseal, error) {
	var r Reseal
	err := sc.Scan(&r.ID, &r.Old)
	return r, err
}

// OpenKeys is what a store's Open does with its keyring: it checks the
// recorded secret key id against the keyring before anything is sealed
// (CheckKeyID), seals anew under the current key the secrets of every
// session not sealed under it (ResealSecrets; each write guarded by the
// value it replaces, so servers starting together do not undo each
// other), and the stored secrets of every outpost likewise, then records
// the current key id (RecordKeyID). It returns how many sessions it sealed
// anew (ResealedOutpostSecrets says how many outpost secrets).
func OpenKeys(ctx context.Context, s *Store) (int, error) {
	get := func(ctx context.Context, name string) (string, bool, error) {
		var v string
		err := s.db.QueryRow(ctx, ReadSettingSQL, name).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return "", false, nil
		}
		return v, err == nil, err
	}
	if err := CheckKeyID(ctx, s.keys, get); err != nil {
		return 0, err
	}
	find := func(ctx context.Context) ([]Reseal, error) {
		return QueryAll(ctx, s.db, ScanReseal, FindResealSQL, s.keys.ID())
	}
	write := func(ctx context.Context, batch []Reseal) error {
		return s.db.Write(ctx, nil, func(tx Tx) error {
			b := &Batch{}
			for _, r := range batch {
				b.Exec(ResealSQL, r.New, s.keys.ID(), r.ID, r.Old)
			}
			return tx.Send(ctx, b)
		})
	}
	n, err := ResealSecrets(ctx, s.keys, find, write)
	if err != nil {
		return n, err
	}
	// Outpost secrets are under the same key: the key id is recorded only
	// once they are sealed under it too.
	if s.resealedOutpost, err = s.resealOutpostSecrets(ctx, s.keys); err != nil {
		return n, err
	}
	return n, RecordKeyID(ctx, s.keys, get, s.db.Exec)
}
