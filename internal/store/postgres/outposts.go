package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// CreateOutpost inserts an outpost; store.ErrConflict when the id or name is
// taken.
func (s *Store) CreateOutpost(ctx context.Context, o store.Outpost) error {
	// The insert and its notification in one statement (notify.go).
	_, err := s.pool.Exec(ctx, `WITH o AS (INSERT INTO outposts (`+outpostCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id)
		SELECT pg_notify('`+changesChannel+`', $11) FROM o`, o.ID, o.Name, o.Platform, o.Description, o.AllowedOrgIDs, sqlstore.MS(o.CreatedAt), o.RemoteBinarySHA,
		o.MaxRunning, o.MaxAttempts, o.MaxSnapshotBytes, s.outpostPayload(o.ID))
	if err != nil {
		return fmt.Errorf("postgres: create outpost %s: %w", o.Name, mapErr(err))
	}
	return nil
}

const outpostCols = `id, name, platform, description, allowed_org_ids, created_at, remote_binary_sha,
	max_running, max_attempts, max_snapshot_bytes`

// scanOutpost reads outpostCols; a NULL allowed_org_ids scans as nil, an
// empty array as an empty list.
func scanOutpost(sc sqlstore.Scanner) (store.Outpost, error) {
	var o store.Outpost
	var created int64
	err := sc.Scan(&o.ID, &o.Name, &o.Platform, &o.Description, &o.AllowedOrgIDs, &created, &o.RemoteBinarySHA, &o.MaxRunning, &o.MaxAttempts, &o.MaxSnapshotBytes)
	o.CreatedAt = sqlstore.FromMS(created)
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
	// The delete and its notification in one statement (notify.go); the
	// SELECT's row count is the delete's.
	if err := mustAffect(s.pool.Exec(ctx, `WITH o AS (`+sqlstore.DeleteOutpostSQL+` RETURNING id)
		SELECT pg_notify('`+changesChannel+`', $2) FROM o`, id, s.outpostPayload(id))); err != nil {
		return fmt.Errorf("postgres: delete outpost %s: %w", id, mapErr(err))
	}
	return nil
}

// OutpostStats counts the outpost's pending entries and its claims whose
// Expiry is after now; tombstones count toward neither, and the entries of
// ended sessions kept listed do not count as pending.
func (s *Store) OutpostStats(ctx context.Context, outpostID string, now time.Time) (queueDepth, activeClaims int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT
			COUNT(*) FILTER (WHERE phase = $2 AND session_status <> $5),
			COUNT(*) FILTER (WHERE phase = $3 AND `+expirySQL+` > $4)
		FROM queue WHERE outpost_id = $1 AND NOT deleted`,
		outpostID, api.PhasePending, api.PhaseClaimed, now.UnixMilli(), api.QueueSessionTerminated).Scan(&queueDepth, &activeClaims)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: outpost stats %s: %w", outpostID, err)
	}
	return queueDepth, activeClaims, nil
}

// OutpostCounts counts the outpost's pending entries (not those of ended
// sessions), claims held at now, and running and suspended sessions, in
// one snapshot.
func (s *Store) OutpostCounts(ctx context.Context, outpostID string, now time.Time) (store.OutpostCounts, error) {
	var c store.OutpostCounts
	var oldest *int64 // the MIN of no rows is NULL
	err := s.read(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT
				COUNT(*) FILTER (WHERE phase = $2 AND session_status <> $5),
				COUNT(*) FILTER (WHERE phase = $3 AND `+expirySQL+` > $4),
				MIN(updated_at) FILTER (WHERE phase = $2 AND session_status <> $5)
			FROM queue WHERE outpost_id = $1 AND NOT deleted`,
			outpostID, api.PhasePending, api.PhaseClaimed, now.UnixMilli(), api.QueueSessionTerminated).Scan(&c.Pending, &c.Held, &oldest)
		if err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, sqlstore.SessionCountsSQL, outpostID, api.StatusRunning, api.StatusSuspended).
			Scan(&c.Running, &c.Suspended); err != nil {
			return err
		}
		return tx.QueryRow(ctx, sqlstore.SnapshotBytesSQL, outpostID).Scan(&c.SnapshotBytes)
	})
	if err != nil {
		return store.OutpostCounts{}, fmt.Errorf("postgres: outpost counts %s: %w", outpostID, err)
	}
	if oldest != nil {
		c.OldestPending = time.UnixMilli(*oldest).UTC()
	}
	return c, nil
}

// SetOutpostLimits writes an outpost's limits; store.ErrNotFound when
// absent.
func (s *Store) SetOutpostLimits(ctx context.Context, id string, l store.OutpostLimits) error {
	if err := mustAffect(s.pool.Exec(ctx, sqlstore.SetOutpostLimitsSQL, id, l.MaxRunning, l.MaxAttempts, l.MaxSnapshotBytes)); err != nil {
		return fmt.Errorf("postgres: set outpost limits %s: %w", id, mapErr(err))
	}
	return nil
}

// LookupConnectToken finds a connect token by hash.
func (s *Store) LookupConnectToken(ctx context.Context, hash string) (store.ConnectToken, error) {
	c, err := sqlstore.ScanConnectToken(s.pool.QueryRow(ctx, sqlstore.LookupConnectTokenSQL, hash))
	if err != nil {
		return store.ConnectToken{}, fmt.Errorf("postgres: lookup connect token: %w", mapErr(err))
	}
	return c, nil
}

// CreateToken inserts an API token; store.ErrConflict when its id or hash is
// taken.
func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	args, err := sqlstore.TokenArgs(&t)
	if err != nil {
		return fmt.Errorf("postgres: create token %s: %w", t.ID, err)
	}
	if _, err := s.pool.Exec(ctx, sqlstore.InsertTokenSQL, args...); err != nil {
		return fmt.Errorf("postgres: create token %s: %w", t.ID, mapErr(err))
	}
	return nil
}

// TokenByHash finds a token by the hash of its secret.
func (s *Store) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	t, err := sqlstore.ScanToken(s.pool.QueryRow(ctx, sqlstore.TokenByHashSQL, hash))
	if err != nil {
		return store.Token{}, fmt.Errorf("postgres: token by hash: %w", mapErr(err))
	}
	return t, nil
}

// ListTokens returns every token, newest first.
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	out, err := collect(sqlstore.ScanToken)(s.pool.Query(ctx, sqlstore.ListTokensSQL))
	if err != nil {
		return nil, fmt.Errorf("postgres: list tokens: %w", err)
	}
	return out, nil
}

// RevokeToken marks a token revoked at now; store.ErrNotFound when absent.
// Revoking a revoked token keeps its first revocation time.
func (s *Store) RevokeToken(ctx context.Context, id string, now time.Time) error {
	if err := mustAffect(s.pool.Exec(ctx, sqlstore.RevokeTokenSQL, now.UnixMilli(), id)); err != nil {
		return fmt.Errorf("postgres: revoke token %s: %w", id, mapErr(err))
	}
	return nil
}

// CountTokens counts tokens, revoked ones included.
func (s *Store) CountTokens(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, sqlstore.CountTokensSQL).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: count tokens: %w", err)
	}
	return n, nil
}
