package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// resealBatch bounds the sessions one reseal transaction rewrites, so the
// writer is never held long.
const resealBatch = 500

// reseal seals anew, under the current key, the secrets of every session
// that are not sealed under it: plaintext written before secrets were
// sealed, or values of an older key. Every value is opened before any is
// written, so a value no key opens fails Open and changes nothing. Each
// write is guarded by the value it replaces.
func (s *Store) reseal(ctx context.Context) (int, error) {
	if s.keys == nil {
		return 0, nil
	}
	type row struct{ id, old, new string }
	var todo []row
	id := s.keys.ID()
	// Through the index of secrets_key: rows under any other key, or none.
	rows, err := s.r.QueryContext(ctx, `SELECT id, secrets_json FROM sessions WHERE secrets_key < ?1 OR secrets_key > ?1`, id)
	if err != nil {
		return 0, fmt.Errorf("find secrets to seal: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.old); err != nil {
			return 0, fmt.Errorf("find secrets to seal: %w", err)
		}
		if r.new, err = s.keys.Reseal(r.id, r.old); err != nil {
			return 0, fmt.Errorf("reseal the secrets of session %s: %w", r.id, err)
		}
		todo = append(todo, r)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("find secrets to seal: %w", err)
	}
	rows.Close()
	for start := 0; start < len(todo); start += resealBatch {
		batch := todo[start:min(start+resealBatch, len(todo))]
		err := s.write(ctx, func(tx *sql.Tx) error {
			for _, r := range batch {
				if _, err := tx.ExecContext(ctx, `UPDATE sessions SET secrets_json = ?, secrets_key = ? WHERE id = ? AND secrets_json = ?`, r.new, id, r.id, r.old); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return start, fmt.Errorf("seal session secrets: %w", err)
		}
	}
	return len(todo), nil
}

// Resealed is how many sessions' secrets Open sealed under the current key.
func (s *Store) Resealed() int { return s.resealed }
