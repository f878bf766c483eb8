package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// CreateOutpost inserts an outpost; store.ErrConflict when the id or name is
// taken.
func (s *Store) CreateOutpost(ctx context.Context, o store.Outpost) error {
	var orgs any // NULL when unset
	if o.AllowedOrgIDs != nil {
		j, err := sqlstore.Marshal(o.AllowedOrgIDs)
		if err != nil {
			return fmt.Errorf("sqlite: create outpost %s: %w", o.Name, err)
		}
		orgs = j
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO outposts (`+outpostCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, o.ID, o.Name, o.Platform, o.Description, orgs, sqlstore.MS(o.CreatedAt), o.RemoteBinarySHA,
			o.MaxRunning, o.MaxAttempts, o.MaxSnapshotBytes)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: create outpost %s: %w", o.Name, mapErr(err))
	}
	return nil
}

const outpostCols = `id, name, platform, description, allowed_org_ids_json, created_at, remote_binary_sha,
	max_running, max_attempts, max_snapshot_bytes`

// scanOutpost reads outpostCols.
func scanOutpost(sc sqlstore.Scanner) (store.Outpost, error) {
	var o store.Outpost
	var orgs sql.NullString
	var created int64
	if err := sc.Scan(&o.ID, &o.Name, &o.Platform, &o.Description, &orgs, &created, &o.RemoteBinarySHA, &o.MaxRunning, &o.MaxAttempts, &o.MaxSnapshotBytes); err != nil {
		return store.Outpost{}, err
	}
	o.CreatedAt = sqlstore.FromMS(created)
	if orgs.Valid {
		o.AllowedOrgIDs = []string{}
		if err := json.Unmarshal([]byte(orgs.String), &o.AllowedOrgIDs); err != nil {
			return store.Outpost{}, fmt.Errorf("outpost %s allowed org ids: %w", o.ID, err)
		}
	}
	return o, nil
}

// GetOutpost finds an outpost by id or, failing that, by name.
func (s *Store) GetOutpost(ctx context.Context, idOrName string) (store.Outpost, error) {
	// An id match wins over a name match.
	row := s.r.QueryRowContext(ctx, `SELECT `+outpostCols+` FROM outposts
		WHERE id = $1 OR name = $1 ORDER BY id = $1 DESC LIMIT 1`, idOrName)
	o, err := scanOutpost(row)
	if err != nil {
		return store.Outpost{}, fmt.Errorf("sqlite: get outpost %s: %w", idOrName, mapErr(err))
	}
	return o, nil
}

// ListOutposts returns every outpost, ordered by name.
func (s *Store) ListOutposts(ctx context.Context) ([]store.Outpost, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+outpostCols+` FROM outposts ORDER BY name`)
	out, err := collect(rows, err, scanOutpost)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list outposts: %w", err)
	}
	return out, nil
}

// DeleteOutpost removes an outpost; store.ErrNotFound when absent. Its
// sessions and queue entries are left to the caller.
func (s *Store) DeleteOutpost(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		return mustAffect(tx.ExecContext(ctx, sqlstore.DeleteOutpostSQL, id))
	})
	if err != nil {
		return fmt.Errorf("sqlite: delete outpost %s: %w", id, mapErr(err))
	}
	return nil
}

// OutpostStats counts the outpost's pending entries and its claims whose
// Expiry is after now; tombstones count toward neither, and the entries of
// ended sessions kept listed do not count as pending.
func (s *Store) OutpostStats(ctx context.Context, outpostID string, now time.Time) (queueDepth, activeClaims int, err error) {
	err = s.r.QueryRowContext(ctx, `SELECT
			COALESCE(SUM(phase = $2 AND session_status <> $5), 0),
			COALESCE(SUM(phase = $3 AND `+expirySQL+` > $4), 0)
		FROM queue WHERE outpost_id = $1 AND deleted = 0`,
		outpostID, api.PhasePending, api.PhaseClaimed, now.UnixMilli(), api.QueueSessionTerminated).Scan(&queueDepth, &activeClaims)
	if err != nil {
		return 0, 0, fmt.Errorf("sqlite: outpost stats %s: %w", outpostID, err)
	}
	return queueDepth, activeClaims, nil
}

// OutpostCounts counts the outpost's pending entries (not those of ended
// sessions), claims held at now, and running and suspended sessions, in
// one snapshot.
func (s *Store) OutpostCounts(ctx context.Context, outpostID string, now time.Time) (store.OutpostCounts, error) {
	var c store.OutpostCounts
	var oldest *int64 // the MIN of no rows is NULL
	err := s.read(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT
				COALESCE(SUM(phase = $2 AND session_status <> $5), 0),
				COALESCE(SUM(phase = $3 AND `+expirySQL+` > $4), 0),
				MIN(CASE WHEN phase = $2 AND session_status <> $5 THEN updated_at END)
			FROM queue WHERE outpost_id = $1 AND deleted = 0`,
			outpostID, api.PhasePending, api.PhaseClaimed, now.UnixMilli(), api.QueueSessionTerminated).Scan(&c.Pending, &c.Held, &oldest)
		if err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, sqlstore.SessionCountsSQL, outpostID, api.StatusRunning, api.StatusSuspended).
			Scan(&c.Running, &c.Suspended); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, sqlstore.SnapshotBytesSQL, outpostID).Scan(&c.SnapshotBytes)
	})
	if err != nil {
		return store.OutpostCounts{}, fmt.Errorf("sqlite: outpost counts %s: %w", outpostID, err)
	}
	if oldest != nil {
		c.OldestPending = time.UnixMilli(*oldest).UTC()
	}
	return c, nil
}

// SetOutpostLimits writes an outpost's limits; store.ErrNotFound when
// absent.
func (s *Store) SetOutpostLimits(ctx context.Context, id string, l store.OutpostLimits) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		return mustAffect(tx.ExecContext(ctx, sqlstore.SetOutpostLimitsSQL, id, l.MaxRunning, l.MaxAttempts, l.MaxSnapshotBytes))
	})
	if err != nil {
		return fmt.Errorf("sqlite: set outpost limits %s: %w", id, mapErr(err))
	}
	return nil
}

// LookupConnectToken finds a connect token by hash.
func (s *Store) LookupConnectToken(ctx context.Context, hash string) (store.ConnectToken, error) {
	c, err := sqlstore.ScanConnectToken(s.r.QueryRowContext(ctx, sqlstore.LookupConnectTokenSQL, hash))
	if err != nil {
		return store.ConnectToken{}, fmt.Errorf("sqlite: lookup connect token: %w", mapErr(err))
	}
	return c, nil
}

// CreateToken inserts an API token; store.ErrConflict when its id or hash is
// taken.
func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	args, err := sqlstore.TokenArgs(&t)
	if err != nil {
		return fmt.Errorf("sqlite: create token %s: %w", t.ID, err)
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, sqlstore.InsertTokenSQL, args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: create token %s: %w", t.ID, mapErr(err))
	}
	return nil
}

// TokenByHash finds a token by the hash of its secret.
func (s *Store) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	t, err := sqlstore.ScanToken(s.r.QueryRowContext(ctx, sqlstore.TokenByHashSQL, hash))
	if err != nil {
		return store.Token{}, fmt.Errorf("sqlite: token by hash: %w", mapErr(err))
	}
	return t, nil
}

// ListTokens returns every token, newest first.
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	rows, err := s.r.QueryContext(ctx, sqlstore.ListTokensSQL)
	out, err := collect(rows, err, sqlstore.ScanToken)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list tokens: %w", err)
	}
	return out, nil
}

// RevokeToken marks a token revoked at now; store.ErrNotFound when absent.
// Revoking a revoked token keeps its first revocation time.
func (s *Store) RevokeToken(ctx context.Context, id string, now time.Time) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		return mustAffect(tx.ExecContext(ctx, sqlstore.RevokeTokenSQL, now.UnixMilli(), id))
	})
	if err != nil {
		return fmt.Errorf("sqlite: revoke token %s: %w", id, mapErr(err))
	}
	return nil
}

// CountTokens counts tokens, revoked ones included.
func (s *Store) CountTokens(ctx context.Context) (int, error) {
	var n int
	if err := s.r.QueryRowContext(ctx, sqlstore.CountTokensSQL).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count tokens: %w", err)
	}
	return n, nil
}
