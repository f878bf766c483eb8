package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
)

// Statements of the outpost_secrets table.
const (
	// UpdateOutpostSecretSQL replaces the value of secret $2 of outpost $1
	// with $3 sealed under key $4, set by $5 at $6.
	UpdateOutpostSecretSQL = `UPDATE outpost_secrets SET value = $3, value_key = $4, set_by = $5, updated_at = $6
		WHERE outpost_id = $1 AND name = $2`
	// InsertOutpostSecretSQL inserts secret $2 of outpost $1, or replaces
	// its value when a writer inserted it meanwhile.
	InsertOutpostSecretSQL = `INSERT INTO outpost_secrets (outpost_id, name, value, value_key, set_by, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6)
		ON CONFLICT (outpost_id, name) DO UPDATE SET value = excluded.value, value_key = excluded.value_key,
		set_by = excluded.set_by, updated_at = excluded.updated_at`
	// ListOutpostSecretsSQL lists outpost $1's secrets by name, without
	// their values.
	ListOutpostSecretsSQL = `SELECT outpost_id, name, set_by, created_at, updated_at FROM outpost_secrets
		WHERE outpost_id = $1 ORDER BY name`
	// OutpostSecretValuesSQL reads the names and sealed values of outpost
	// $1's secrets.
	OutpostSecretValuesSQL = `SELECT name, value FROM outpost_secrets WHERE outpost_id = $1`
	// DeleteOutpostSecretSQL deletes secret $2 of outpost $1.
	DeleteOutpostSecretSQL = `DELETE FROM outpost_secrets WHERE outpost_id = $1 AND name = $2`
	// FindResealOutpostSecretsSQL lists the outpost secrets not sealed
	// under key $1, through the index of value_key.
	FindResealOutpostSecretsSQL = `SELECT outpost_id, name, value FROM outpost_secrets WHERE value_key < $1 OR value_key > $1`
	// ResealOutpostSecretSQL writes value $1 under key $2 to secret $4 of
	// outpost $3 if its value is still $5.
	ResealOutpostSecretSQL = `UPDATE outpost_secrets SET value = $1, value_key = $2
		WHERE outpost_id = $3 AND name = $4 AND value = $5`
)

// PutOutpostSecret stores sec's value, sealed and bound to its outpost and
// name, and reports whether it created the secret; store.ErrNotFound when
// the outpost does not exist.
func (s *Store) PutOutpostSecret(ctx context.Context, sec store.OutpostSecret) (bool, error) {
	text, err := s.keys.SealOutpostSecret(sec.OutpostID, sec.Name, sec.Value)
	if err != nil {
		return false, s.errorf(err, "put secret %s of outpost %s", sec.Name, sec.OutpostID)
	}
	now := MS(sec.UpdatedAt)
	var created bool
	err = s.db.Write(ctx, func(b *Batch) {
		b.QueryRow(func(row Scanner) error {
			var id string
			return row.Scan(&id)
		}, OutpostExistsSQL, sec.OutpostID)
	}, func(tx Tx) error {
		n, err := tx.Exec(ctx, UpdateOutpostSecretSQL, sec.OutpostID, sec.Name, text, s.keys.ID(), sec.SetBy, now)
		if err != nil || n > 0 {
			created = false
			return err
		}
		created = true
		_, err = tx.Exec(ctx, InsertOutpostSecretSQL, sec.OutpostID, sec.Name, text, s.keys.ID(), sec.SetBy, now)
		if err != nil && s.d.IsForeignKeyViolation != nil && s.d.IsForeignKeyViolation(err) {
			err = sql.ErrNoRows // the outpost went
		}
		return err
	})
	if err != nil {
		return false, s.errorf(err, "put secret %s of outpost %s", sec.Name, sec.OutpostID)
	}
	return created, nil
}

// ListOutpostSecrets returns an outpost's secrets by name, without values.
func (s *Store) ListOutpostSecrets(ctx context.Context, outpostID string) ([]store.OutpostSecret, error) {
	out, err := QueryAll(ctx, s.db, scanOutpostSecret, ListOutpostSecretsSQL, outpostID)
	if err != nil {
		return nil, s.errorf(err, "list secrets of outpost %s", outpostID)
	}
	return out, nil
}

func scanOutpostSecret(sc Scanner) (store.OutpostSecret, error) {
	var o store.OutpostSecret
	var created, updated int64
	if err := sc.Scan(&o.OutpostID, &o.Name, &o.SetBy, &created, &updated); err != nil {
		return o, err
	}
	o.CreatedAt, o.UpdatedAt = FromMS(created), FromMS(updated)
	return o, nil
}

// OutpostSecretValues opens the values of those of names the outpost has.
// A value that does not open is an error naming the secret, never a
// missing one.
func (s *Store) OutpostSecretValues(ctx context.Context, outpostID string, names []string) (map[string]string, error) {
	out := map[string]string{}
	if len(names) == 0 {
		return out, nil
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	type row struct{ name, text string }
	rows, err := QueryAll(ctx, s.db, func(sc Scanner) (row, error) {
		var r row
		err := sc.Scan(&r.name, &r.text)
		return r, err
	}, OutpostSecretValuesSQL, outpostID)
	if err != nil {
		return nil, s.errorf(err, "read secrets of outpost %s", outpostID)
	}
	for _, r := range rows {
		if !want[r.name] {
			continue
		}
		v, err := s.keys.OpenOutpostSecret(outpostID, r.name, r.text)
		if err != nil {
			return nil, s.errorf(err, "open secret %s of outpost %s", r.name, outpostID)
		}
		out[r.name] = v
	}
	return out, nil
}

// DeleteOutpostSecret removes one; store.ErrNotFound when absent.
func (s *Store) DeleteOutpostSecret(ctx context.Context, outpostID, name string) error {
	if err := s.execOne(ctx, DeleteOutpostSecretSQL, outpostID, name); err != nil {
		return s.errorf(err, "delete secret %s of outpost %s", name, outpostID)
	}
	return nil
}

// ResealedOutpostSecrets is how many outpost secrets the store's Open
// sealed anew under the current key.
func (s *Store) ResealedOutpostSecrets() int { return s.resealedOutpost }

// outpostReseal is one stored outpost secret to seal anew.
type outpostReseal struct{ outpostID, name, old, new string }

// resealOutpostSecrets seals anew, under the current key, every outpost
// secret not sealed under it, as ResealSecrets does for sessions: every
// value is opened before any is written, and each write is guarded by the
// value it replaces.
func (s *Store) resealOutpostSecrets(ctx context.Context, keys *sealed.Keyring) (int, error) {
	if keys == nil {
		return 0, nil
	}
	todo, err := QueryAll(ctx, s.db, func(sc Scanner) (outpostReseal, error) {
		var r outpostReseal
		err := sc.Scan(&r.outpostID, &r.name, &r.old)
		return r, err
	}, FindResealOutpostSecretsSQL, keys.ID())
	if err != nil {
		return 0, fmt.Errorf("find outpost secrets to seal: %w", err)
	}
	for i := range todo {
		r := &todo[i]
		if r.new, err = keys.ResealOutpostSecret(r.outpostID, r.name, r.old); err != nil {
			return 0, fmt.Errorf("reseal secret %s of outpost %s: %w", r.name, r.outpostID, err)
		}
	}
	for start := 0; start < len(todo); start += ResealBatch {
		batch := todo[start:min(start+ResealBatch, len(todo))]
		err := s.db.Write(ctx, nil, func(tx Tx) error {
			b := &Batch{}
			for _, r := range batch {
				b.Exec(ResealOutpostSecretSQL, r.new, keys.ID(), r.outpostID, r.name, r.old)
			}
			return tx.Send(ctx, b)
		})
		if err != nil {
			return start, fmt.Errorf("seal outpost secrets: %w", err)
		}
	}
	return len(todo), nil
}
