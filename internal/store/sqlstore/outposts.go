package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// LookupConnectToken finds a connect token by hash.
func (s *Store) LookupConnectToken(ctx context.Context, hash string) (store.ConnectToken, error) {
	c, err := ScanConnectToken(s.db.QueryRow(ctx, LookupConnectTokenSQL, hash))
	if err != nil {
		return store.ConnectToken{}, s.errorf(err, "lookup connect token")
	}
	return c, nil
}

// CreateToken inserts an API token; store.ErrConflict when its id or hash is
// taken.
func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	args, err := TokenArgs(&t)
	if err != nil {
		return s.errorf(err, "create token %s", t.ID)
	}
	if _, err := s.db.Exec(ctx, InsertTokenSQL, args...); err != nil {
		return s.errorf(err, "create token %s", t.ID)
	}
	return nil
}

// TokenByHash finds a token by the hash of its secret.
func (s *Store) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	t, err := ScanToken(s.db.QueryRow(ctx, TokenByHashSQL, hash))
	if err != nil {
		return store.Token{}, s.errorf(err, "token by hash")
	}
	return t, nil
}

// ListTokens returns every token, newest first.
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	out, err := QueryAll(ctx, s.db, ScanToken, ListTokensSQL)
	if err != nil {
		return nil, s.errorf(err, "list tokens")
	}
	return out, nil
}

// RevokeToken marks a token revoked at now; store.ErrNotFound when absent.
// Revoking a revoked token keeps its first revocation time. It waits for
// the claims in flight with the token (Lock.Token) and orders the ones
// that come after it.
func (s *Store) RevokeToken(ctx context.Context, id string, now time.Time) error {
	err := s.db.Write(ctx, nil, func(tx Tx) error {
		if s.d.Lock.Token != nil {
			q, args := s.d.Lock.Token(id, TokenExclusive)
			if _, err := tx.Exec(ctx, q, args...); err != nil {
				return err
			}
		}
		return s.mustAffect(tx.Exec(ctx, RevokeTokenSQL, now.UnixMilli(), id))
	})
	if err != nil {
		return s.errorf(err, "revoke token %s", id)
	}
	return nil
}

// CountTokens counts tokens, revoked ones included.
func (s *Store) CountTokens(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRow(ctx, CountTokensSQL).Scan(&n); err != nil {
		return 0, s.errorf(err, "count tokens")
	}
	return n, nil
}

// execOne runs a statement in a write transaction that fails with
// sql.ErrNoRows, and so rolls back, when it changes no row: the audit
// entry ctx may carry (appended by the write path) is not kept for a
// change that did not happen.
func (s *Store) execOne(ctx context.Context, q string, args ...any) error {
	return s.db.Write(ctx, nil, func(tx Tx) error {
		return s.mustAffect(tx.Exec(ctx, q, args...))
	})
}

// mustAffect turns a statement that changed no row into sql.ErrNoRows.
func (s *Store) mustAffect(n int64, err error) error {
	if err == nil && n == 0 {
		return sql.ErrNoRows
	}
	return err
}

// SetOutpostLimits writes an outpost's limits; store.ErrNotFound when
// absent.
func (s *Store) SetOutpostLimits(ctx context.Context, id string, l store.OutpostLimits) error {
	policy, err := EncodePolicy(l.NetworkPolicy)
	if err != nil {
		return s.errorf(err, "set outpost limits %s", id)
	}
	if err := s.execOne(ctx, SetOutpostLimitsSQL, id, l.MaxRunning, l.MaxAttempts, l.MaxSnapshotBytes, policy, EncodeDesktop(l.Desktop)); err != nil {
		return s.errorf(err, "set outpost limits %s", id)
	}
	return nil
}

// OutpostStats counts the outpost's pending entries and its claims whose
// Expiry is after now; tombstones count toward neither, and the entries of
// ended sessions kept listed do not count as pending.
func (s *Store) OutpostStats(ctx context.Context, outpostID string, now time.Time) (queueDepth, activeClaims int, err error) {
	err = s.db.QueryRow(ctx, s.sql.outpostStats,
		outpostID, api.PhasePending, api.PhaseClaimed, now.UnixMilli(), api.QueueSessionTerminated).Scan(&queueDepth, &activeClaims)
	if err != nil {
		return 0, 0, s.errorf(err, "outpost stats %s", outpostID)
	}
	return queueDepth, activeClaims, nil
}

// OutpostCounts counts the outpost's pending entries (not those of ended
// sessions), claims held at now, and running and suspended sessions, in
// one snapshot.
func (s *Store) OutpostCounts(ctx context.Context, outpostID string, now time.Time) (store.OutpostCounts, error) {
	var c store.OutpostCounts
	var oldest *int64 // the MIN of no rows is NULL
	err := s.db.Read(ctx, func(tx Tx) error {
		err := tx.QueryRow(ctx, s.sql.outpostCounts,
			outpostID, api.PhasePending, api.PhaseClaimed, now.UnixMilli(), api.QueueSessionTerminated).Scan(&c.Pending, &c.Held, &oldest)
		if err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, SessionCountsSQL, outpostID, api.StatusRunning, api.StatusSuspended).
			Scan(&c.Running, &c.Suspended); err != nil {
			return err
		}
		return tx.QueryRow(ctx, SnapshotBytesSQL, outpostID).Scan(&c.SnapshotBytes)
	})
	if err != nil {
		return store.OutpostCounts{}, s.errorf(err, "outpost counts %s", outpostID)
	}
	if oldest != nil {
		c.OldestPending = time.UnixMilli(*oldest).UTC()
	}
	return c, nil
}

// GetOutpost finds an outpost by id or, failing that, by name.
func (s *Store) GetOutpost(ctx context.Context, idOrName string) (store.Outpost, error) {
	// An id match wins over a name match.
	o, err := s.d.ScanOutpost(s.db.QueryRow(ctx, `SELECT `+s.d.OutpostCols+` FROM outposts
		WHERE id = $1 OR name = $1 ORDER BY id = $1 DESC LIMIT 1`, idOrName))
	if err != nil {
		return store.Outpost{}, s.errorf(err, "get outpost %s", idOrName)
	}
	return o, nil
}

// ListOutposts returns every outpost, ordered by name.
func (s *Store) ListOutposts(ctx context.Context) ([]store.Outpost, error) {
	out, err := QueryAll(ctx, s.db, s.d.ScanOutpost, `SELECT `+s.d.OutpostCols+` FROM outposts ORDER BY name`)
	if err != nil {
		return nil, s.errorf(err, "list outposts")
	}
	return out, nil
}

// EncodeDesktop is the value of a desktop_json column: NULL for no setting.
func EncodeDesktop(d *api.OutpostDesktop) any {
	if d == nil {
		return nil
	}
	b, _ := json.Marshal(d) // ints and a bool always encode
	return string(b)
}

// ScanDesktop reads a desktop_json column: nil for NULL.
func ScanDesktop(v sql.NullString) (*api.OutpostDesktop, error) {
	if !v.Valid {
		return nil, nil
	}
	d := new(api.OutpostDesktop)
	if err := json.Unmarshal([]byte(v.String), d); err != nil {
		return nil, err
	}
	return d, nil
}

// SetOutpostApprovalRules replaces an outpost's approval rules;
// store.ErrNotFound when absent.
func (s *Store) SetOutpostApprovalRules(ctx context.Context, id string, rules []api.ApprovalRule) error {
	v, err := EncodeApprovalRules(rules)
	if err != nil {
		return s.errorf(err, "set outpost approval rules %s", id)
	}
	if err := s.execOne(ctx, `UPDATE outposts SET approval_rules_json = $2 WHERE id = $1`, id, v); err != nil {
		return s.errorf(err, "set outpost approval rules %s", id)
	}
	return nil
}

// EncodeApprovalRules is the value of an approval_rules_json column: NULL
// for none.
func EncodeApprovalRules(rules []api.ApprovalRule) (any, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	return Marshal(rules)
}

// ScanApprovalRules reads an approval_rules_json column: nil for NULL.
func ScanApprovalRules(v sql.NullString) ([]api.ApprovalRule, error) {
	if !v.Valid {
		return nil, nil
	}
	var rules []api.ApprovalRule
	if err := json.Unmarshal([]byte(v.String), &rules); err != nil {
		return nil, err
	}
	return rules, nil
}
