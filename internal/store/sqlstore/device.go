package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
)

// DeviceGrantCols are the columns of a device grant, which ScanDeviceGrant
// reads.
const DeviceGrantCols = `device_hash, user_code, client_id, client_name, scopes_json, outpost, source_ip, ` +
	`created_at, expires_at, interval_s, last_poll_at, state, approved_by, decided_at, token_json, token_id`

// Statements of the device authorization grant.
const (
	// InsertDeviceGrantSQL inserts DeviceGrantCols.
	InsertDeviceGrantSQL = `INSERT INTO device_grants (` + DeviceGrantCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`
	// UpdateDeviceGrantSQL writes the changing columns of grant $1.
	UpdateDeviceGrantSQL = `UPDATE device_grants SET interval_s = $2, last_poll_at = $3, state = $4, approved_by = $5, decided_at = $6, token_json = $7, token_id = $8 WHERE device_hash = $1`
	// PruneDeviceGrantsSQL deletes the grants that expired before $1.
	PruneDeviceGrantsSQL = `DELETE FROM device_grants WHERE expires_at < $1`
	// CountPendingDeviceGrantsSQL counts the grants pending and unexpired
	// at $1.
	CountPendingDeviceGrantsSQL = `SELECT COUNT(*) FROM device_grants WHERE state = 'pending' AND expires_at > $1`
	// DeviceGrantByUserCodeSQL reads the grant of user code $1.
	DeviceGrantByUserCodeSQL = `SELECT ` + DeviceGrantCols + ` FROM device_grants WHERE user_code = $1`
	// DeviceGrantByHashSQL reads the grant of device hash $1.
	DeviceGrantByHashSQL = `SELECT ` + DeviceGrantCols + ` FROM device_grants WHERE device_hash = $1`
	// AddDeviceMissSQL counts a miss of approver $1 at $2: a window that
	// began before $3 (it has ended) starts again at $2.
	AddDeviceMissSQL = `INSERT INTO device_misses (approver, window_start, misses) VALUES ($1, $2, 1)
ON CONFLICT (approver) DO UPDATE SET
	misses = CASE WHEN device_misses.window_start < $3 THEN 1 ELSE device_misses.misses + 1 END,
	window_start = CASE WHEN device_misses.window_start < $3 THEN $2 ELSE device_misses.window_start END
RETURNING misses`
	// DeviceMissesSQL reads the misses of approver $1 in a window that
	// began at or after $2.
	DeviceMissesSQL = `SELECT misses FROM device_misses WHERE approver = $1 AND window_start >= $2`
)

// deviceToken is the stored form of DeviceGrant.Token.
type deviceToken struct {
	Name      string   `json:"name,omitempty"`
	Scopes    []string `json:"scopes,omitempty"`
	OutpostID string   `json:"outpost_id,omitempty"`
	ExpiresAt *int64   `json:"expires_at,omitempty"`
	// UserID is the person the token belongs to (its approver, signed in).
	UserID string `json:"user_id,omitempty"`
}

// ScanDeviceGrant reads DeviceGrantCols.
func ScanDeviceGrant(sc Scanner) (store.DeviceGrant, error) {
	var g store.DeviceGrant
	var scopes, tok string
	var created, expires, interval int64
	var lastPoll, decided nullInt64
	if err := sc.Scan(&g.DeviceHash, &g.UserCode, &g.ClientID, &g.ClientName, &scopes, &g.Outpost, &g.SourceIP,
		&created, &expires, &interval, &lastPoll, &g.State, &g.ApprovedBy, &decided, &tok, &g.TokenID); err != nil {
		return store.DeviceGrant{}, err
	}
	if err := json.Unmarshal([]byte(scopes), &g.Scopes); err != nil {
		return store.DeviceGrant{}, fmt.Errorf("device grant %s scopes: %w", g.UserCode, err)
	}
	var dt deviceToken
	if err := json.Unmarshal([]byte(tok), &dt); err != nil {
		return store.DeviceGrant{}, fmt.Errorf("device grant %s token: %w", g.UserCode, err)
	}
	g.Token = store.Token{Name: dt.Name, Scopes: dt.Scopes, OutpostID: dt.OutpostID, UserID: dt.UserID}
	if dt.ExpiresAt != nil {
		t := FromMS(*dt.ExpiresAt)
		g.Token.ExpiresAt = &t
	}
	g.CreatedAt, g.ExpiresAt = FromMS(created), FromMS(expires)
	g.Interval = time.Duration(interval) * time.Second
	g.LastPollAt, g.DecidedAt = lastPoll.timePtr(), decided.timePtr()
	return g, nil
}

// deviceTokenJSON is the token_json column of g.
func deviceTokenJSON(g *store.DeviceGrant) (string, error) {
	dt := deviceToken{Name: g.Token.Name, Scopes: g.Token.Scopes, OutpostID: g.Token.OutpostID, UserID: g.Token.UserID}
	if g.Token.ExpiresAt != nil {
		ms := MS(*g.Token.ExpiresAt)
		dt.ExpiresAt = &ms
	}
	return Marshal(dt)
}

// CreateDeviceGrant inserts g after pruning the grants expired before
// prune, unless maxPending grants are pending already: the count and the
// insert are one transaction (one writer on SQLite; on PostgreSQL two
// racing inserts may both pass the count, exceeding the cap by the number
// of replicas at most, which is what the cap can bear).
func (s *Store) CreateDeviceGrant(ctx context.Context, g store.DeviceGrant, prune time.Time, maxPending int) error {
	scopes, err := Marshal(g.Scopes)
	if err != nil {
		return s.errorf(err, "create device grant")
	}
	tok, err := deviceTokenJSON(&g)
	if err != nil {
		return s.errorf(err, "create device grant")
	}
	err = s.db.Write(ctx, nil, func(tx Tx) error {
		if _, err := tx.Exec(ctx, PruneDeviceGrantsSQL, MS(prune)); err != nil {
			return err
		}
		if maxPending > 0 {
			var n int
			if err := tx.QueryRow(ctx, CountPendingDeviceGrantsSQL, MS(g.CreatedAt)).Scan(&n); err != nil {
				return err
			}
			if n >= maxPending {
				return store.ErrTooManyDeviceGrants
			}
		}
		_, err := tx.Exec(ctx, InsertDeviceGrantSQL, g.DeviceHash, g.UserCode, g.ClientID, g.ClientName, scopes, g.Outpost, g.SourceIP,
			MS(g.CreatedAt), MS(g.ExpiresAt), int64(g.Interval/time.Second), PtrMS(g.LastPollAt), g.State, g.ApprovedBy, PtrMS(g.DecidedAt), tok, g.TokenID)
		return err
	})
	if err != nil {
		return s.errorf(err, "create device grant")
	}
	return nil
}

// DeviceGrantByUserCode finds a grant by its user code.
func (s *Store) DeviceGrantByUserCode(ctx context.Context, userCode string) (store.DeviceGrant, error) {
	g, err := ScanDeviceGrant(s.db.QueryRow(ctx, DeviceGrantByUserCodeSQL, userCode))
	if err != nil {
		return store.DeviceGrant{}, s.errorf(err, "device grant by user code")
	}
	return g, nil
}

// UpdateDeviceGrant reads the grant of hash with a row lock and writes
// what fn returns, with the token it mints, in one transaction.
func (s *Store) UpdateDeviceGrant(ctx context.Context, hash string, fn func(store.DeviceGrant) (store.DeviceUpdate, error)) error {
	var fnErr error
	err := s.db.Write(ctx, nil, func(tx Tx) error {
		fnErr = nil
		g, err := ScanDeviceGrant(tx.QueryRow(ctx, DeviceGrantByHashSQL+s.d.Lock.Row, hash))
		if err != nil {
			return err
		}
		u, err := fn(g)
		if err != nil {
			fnErr = err
			return err
		}
		n := u.Grant
		tok, err := deviceTokenJSON(&n)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, UpdateDeviceGrantSQL, hash, int64(n.Interval/time.Second), PtrMS(n.LastPollAt), n.State, n.ApprovedBy,
			PtrMS(n.DecidedAt), tok, n.TokenID); err != nil {
			return err
		}
		if u.Token != nil {
			args, err := TokenArgs(u.Token)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, InsertTokenSQL, args...); err != nil {
				return err
			}
		}
		return nil
	})
	if fnErr != nil && errors.Is(err, fnErr) {
		return fnErr
	}
	if err != nil {
		return s.errorf(err, "update device grant")
	}
	return nil
}

// AddDeviceMiss counts one wrong user code of approver.
func (s *Store) AddDeviceMiss(ctx context.Context, approver string, now time.Time, window time.Duration) (int, error) {
	var n int
	err := s.db.Write(ctx, nil, func(tx Tx) error {
		return tx.QueryRow(ctx, AddDeviceMissSQL, approver, MS(now), MS(now.Add(-window))).Scan(&n)
	})
	if err != nil {
		return 0, s.errorf(err, "add device miss")
	}
	return n, nil
}

// DeviceMisses returns the misses of approver in its current window.
func (s *Store) DeviceMisses(ctx context.Context, approver string, now time.Time, window time.Duration) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, DeviceMissesSQL, approver, MS(now.Add(-window))).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, s.errorf(err, "device misses")
	}
	return n, nil
}
