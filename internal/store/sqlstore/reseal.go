package sqlstore

import (
	"context"
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
