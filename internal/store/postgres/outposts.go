package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// CreateOutpost inserts an outpost; store.ErrConflict when the id or name is
// taken.
func (s *Store) CreateOutpost(ctx context.Context, o store.Outpost) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO outposts (`+outpostCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, o.ID, o.Name, o.Platform, o.Description, o.AllowedOrgIDs, ms(o.CreatedAt), o.RemoteBinarySHA)
	if err != nil {
		return fmt.Errorf("postgres: create outpost %s: %w", o.Name, mapErr(err))
	}
	return nil
}

const outpostCols = `id, name, platform, description, allowed_org_ids, created_at, remote_binary_sha`

// scanOutpost reads outpostCols; a NULL allowed_org_ids scans as nil, an
// empty array as an empty list.
func scanOutpost(sc scanner) (store.Outpost, error) {
	var o store.Outpost
	var created int64
	err := sc.Scan(&o.ID, &o.Name, &o.Platform, &o.Description, &o.AllowedOrgIDs, &created, &o.RemoteBinarySHA)
	o.CreatedAt = fromMS(created)
	return o, err
}

// GetOutpost finds an outpost by id or, failing that, by name.
func (s *Store) GetOutpost(ctx context.Context, idOrName string) (store.Outpost, error) {
	// An id match wins over a name match.
	o, err := scanOutpost(s.pool.QueryRow(ctx, `SELECT `+outpostCols+` FROM outposts
		WHERE id = $1 OR name = $1 ORDER BY id = $1 DESC LIMIT 1`, idOrName))
	if err != nil {
		return store.Outpost{}, fmt.Errorf("postgres: get outpost %s: %w", idOrName, mapErr(err))
	}
	return o, nil
}

// ListOutposts returns every outpost, ordered by name.
func (s *Store) ListOutposts(ctx context.Context) ([]store.Outpost, error) {
	out, err := collect(scanOutpost)(s.pool.Query(ctx, `SELECT `+outpostCols+` FROM outposts ORDER BY name`))
	if err != nil {
		return nil, fmt.Errorf("postgres: list outposts: %w", err)
	}
	return out, nil
}

// DeleteOutpost removes an outpost; store.ErrNotFound when absent. Its
// sessions and queue entries are left to the caller.
func (s *Store) DeleteOutpost(ctx context.Context, id string) error {
	if err := mustAffect(s.pool.Exec(ctx, `DELETE FROM outposts WHERE id = $1`, id)); err != nil {
		return fmt.Errorf("postgres: delete outpost %s: %w", id, mapErr(err))
	}
	return nil
}

// OutpostStats counts the outpost's pending entries and its claims whose
// Expiry is after now; tombstones count toward neither.
func (s *Store) OutpostStats(ctx context.Context, outpostID string, now time.Time) (queueDepth, activeClaims int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT
			COUNT(*) FILTER (WHERE phase = $2),
			COUNT(*) FILTER (WHERE phase = $3 AND `+expirySQL+` > $4)
		FROM queue WHERE outpost_id = $1 AND NOT deleted`,
		outpostID, api.PhasePending, api.PhaseClaimed, now.UnixMilli()).Scan(&queueDepth, &activeClaims)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: outpost stats %s: %w", outpostID, err)
	}
	return queueDepth, activeClaims, nil
}

// collect reads every row of a query with scan:
// collect(scanX)(pool.Query(…)).
func collect[T any](scan func(scanner) (T, error)) func(rows pgx.Rows, err error) ([]T, error) {
	return func(rows pgx.Rows, err error) ([]T, error) {
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []T
		for rows.Next() {
			v, err := scan(rows)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, rows.Err()
	}
}

// scanString reads a row of one text column.
func scanString(sc scanner) (string, error) {
	var v string
	err := sc.Scan(&v)
	return v, err
}

// LookupConnectToken finds a connect token by hash.
func (s *Store) LookupConnectToken(ctx context.Context, hash string) (store.ConnectToken, error) {
	var c store.ConnectToken
	var created int64
	err := s.pool.QueryRow(ctx, `SELECT hash, session_id, epoch, created_at FROM connect_tokens WHERE hash = $1`, hash).
		Scan(&c.Hash, &c.SessionID, &c.Epoch, &created)
	if err != nil {
		return store.ConnectToken{}, fmt.Errorf("postgres: lookup connect token: %w", mapErr(err))
	}
	c.CreatedAt = fromMS(created)
	return c, nil
}

// CreateToken inserts an API token; store.ErrConflict when its id or hash is
// taken.
func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	scopes, err := marshal(t.Scopes)
	if err != nil {
		return fmt.Errorf("postgres: create token %s: %w", t.ID, err)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO tokens (id, name, hash, scopes_json, outpost_id, created_at, expires_at, revoked_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		t.ID, t.Name, t.Hash, scopes, t.OutpostID, ms(t.CreatedAt), ptrMS(t.ExpiresAt), ptrMS(t.RevokedAt))
	if err != nil {
		return fmt.Errorf("postgres: create token %s: %w", t.ID, mapErr(err))
	}
	return nil
}

const tokenCols = `id, name, hash, scopes_json, outpost_id, created_at, expires_at, revoked_at`

func scanToken(sc scanner) (store.Token, error) {
	var t store.Token
	var scopes string
	var created int64
	var expires, revoked *int64
	if err := sc.Scan(&t.ID, &t.Name, &t.Hash, &scopes, &t.OutpostID, &created, &expires, &revoked); err != nil {
		return store.Token{}, err
	}
	if err := json.Unmarshal([]byte(scopes), &t.Scopes); err != nil {
		return store.Token{}, fmt.Errorf("token %s scopes: %w", t.ID, err)
	}
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = fromMS(created), fromPtrMS(expires), fromPtrMS(revoked)
	return t, nil
}

// TokenByHash finds a token by the hash of its secret.
func (s *Store) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	t, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenCols+` FROM tokens WHERE hash = $1`, hash))
	if err != nil {
		return store.Token{}, fmt.Errorf("postgres: token by hash: %w", mapErr(err))
	}
	return t, nil
}

// ListTokens returns every token, newest first.
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	out, err := collect(scanToken)(s.pool.Query(ctx, `SELECT `+tokenCols+` FROM tokens ORDER BY created_at DESC, id DESC`))
	if err != nil {
		return nil, fmt.Errorf("postgres: list tokens: %w", err)
	}
	return out, nil
}

// RevokeToken marks a token revoked at now; store.ErrNotFound when absent.
// Revoking a revoked token keeps its first revocation time.
func (s *Store) RevokeToken(ctx context.Context, id string, now time.Time) error {
	err := mustAffect(s.pool.Exec(ctx, `UPDATE tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2`,
		now.UnixMilli(), id))
	if err != nil {
		return fmt.Errorf("postgres: revoke token %s: %w", id, mapErr(err))
	}
	return nil
}

// CountTokens counts tokens, revoked ones included.
func (s *Store) CountTokens(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT COUNT(*) FROM tokens`).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: count tokens: %w", err)
	}
	return n, nil
}
