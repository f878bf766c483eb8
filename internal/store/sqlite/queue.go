package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

const entryCols = `session_id, outpost_id, kind, platform, phase, acceptor_id, claim_deadline, epoch,
	session_status, rev, deleted, created_at, updated_at, live_until, remote_binary_sha`

// expirySQL is an entry's Expiry as SQL; the index queue_phase_expiry is on
// it, so it must be spelled exactly so.
const expirySQL = `MAX(claim_deadline, COALESCE(live_until, 0))`

func scanEntry(sc interface{ Scan(...any) error }) (store.QueueEntry, error) {
	var e store.QueueEntry
	var deadline, live sql.NullInt64
	var created, updated int64
	if err := sc.Scan(&e.SessionID, &e.OutpostID, &e.Kind, &e.Platform, &e.Phase, &e.AcceptorID, &deadline, &e.Epoch,
		&e.SessionStatus, &e.Rev, &e.Deleted, &created, &updated, &live, &e.RemoteBinarySHA); err != nil {
		return store.QueueEntry{}, err
	}
	e.ClaimDeadline, e.CreatedAt, e.UpdatedAt = fromNullMS(deadline), fromMS(created), fromMS(updated)
	e.LiveUntil = fromNullMS(live)
	return e, nil
}

// upsertEntry writes e under the next global rev, which it stores in e.Rev.
func upsertEntry(ctx context.Context, tx *sql.Tx, e *store.QueueEntry) error {
	var rev int64
	if err := tx.QueryRowContext(ctx, `UPDATE counters SET value = value + 1 WHERE name = 'rev' RETURNING value`).Scan(&rev); err != nil {
		return fmt.Errorf("next rev: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO queue (`+entryCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (session_id) DO UPDATE SET outpost_id = excluded.outpost_id, kind = excluded.kind,
			platform = excluded.platform, phase = excluded.phase, acceptor_id = excluded.acceptor_id,
			claim_deadline = excluded.claim_deadline, epoch = excluded.epoch, session_status = excluded.session_status,
			rev = excluded.rev, deleted = excluded.deleted, created_at = excluded.created_at,
			updated_at = excluded.updated_at,
			live_until = CASE WHEN excluded.epoch = queue.epoch
				THEN NULLIF(MAX(COALESCE(excluded.live_until, 0), COALESCE(queue.live_until, 0)), 0)
				ELSE excluded.live_until END`, // remote_binary_sha keeps what the insert wrote
		e.SessionID, e.OutpostID, e.Kind, e.Platform, e.Phase, e.AcceptorID, nullMS(e.ClaimDeadline), e.Epoch,
		e.SessionStatus, rev, boolInt(e.Deleted), ms(e.CreatedAt), ms(e.UpdatedAt), nullMS(e.LiveUntil), e.RemoteBinarySHA); err != nil {
		return fmt.Errorf("queue entry: %w", err)
	}
	e.Rev = rev
	return nil
}

// GetQueueEntry returns one queue entry, tombstones included.
func (s *Store) GetQueueEntry(ctx context.Context, sessionID string) (store.QueueEntry, error) {
	e, err := scanEntry(s.r.QueryRowContext(ctx, `SELECT `+entryCols+` FROM queue WHERE session_id = ?`, sessionID))
	if err != nil {
		return store.QueueEntry{}, fmt.Errorf("sqlite: get queue entry %s: %w", sessionID, mapErr(err))
	}
	return e, nil
}

// ListQueue returns entries matching f in Rev order, and the number of live
// entries matching f's OutpostID, Phase and AcceptorID.
func (s *Store) ListQueue(ctx context.Context, f store.QueueFilter) ([]store.QueueEntry, int, error) {
	where := []string{"1 = 1"}
	var args []any
	if f.OutpostID != "" {
		where, args = append(where, "outpost_id = ?"), append(args, f.OutpostID)
	}
	if f.Phase != "" {
		where, args = append(where, "phase = ?"), append(args, f.Phase)
	}
	if f.AcceptorID != "" {
		where, args = append(where, "acceptor_id = ?"), append(args, f.AcceptorID)
	}
	filter := strings.Join(where, " AND ")
	page := filter + " AND rev > ?"
	if !f.IncludeDeleted {
		page += " AND deleted = 0"
	}
	q := `SELECT ` + entryCols + ` FROM queue WHERE ` + page + ` ORDER BY rev`
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	pargs := append(append([]any(nil), args...), f.AfterRev)

	var out []store.QueueEntry
	var total int
	err := s.read(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM queue WHERE `+filter+` AND deleted = 0`, args...).Scan(&total); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, q, pargs...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e, err := scanEntry(rows)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: list queue: %w", err)
	}
	return out, total, nil
}

// MaxRev is the highest Rev assigned so far (0 when none).
func (s *Store) MaxRev(ctx context.Context) (int64, error) {
	var rev int64
	if err := s.r.QueryRowContext(ctx, `SELECT value FROM counters WHERE name = 'rev'`).Scan(&rev); err != nil {
		return 0, fmt.Errorf("sqlite: max rev: %w", err)
	}
	return rev, nil
}

// LapsedClaims returns ids of claimed, live entries whose Expiry is at or
// before now, earliest first.
func (s *Store) LapsedClaims(ctx context.Context, now time.Time) ([]string, error) {
	ids, err := s.ids(ctx, `SELECT session_id FROM queue WHERE phase = ? AND `+expirySQL+` <= ? AND deleted = 0
		ORDER BY `+expirySQL+`, session_id`, api.PhaseClaimed, now.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("sqlite: lapsed claims: %w", err)
	}
	return ids, nil
}

// KeepAlive raises live_until on the leases' entries still of their epoch.
func (s *Store) KeepAlive(ctx context.Context, until time.Time, leases ...store.Lease) error {
	if len(leases) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `UPDATE queue SET live_until = MAX(COALESCE(live_until, 0), ?1)
			WHERE session_id = ?2 AND epoch = ?3 AND phase = ?4 AND deleted = 0`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, l := range leases {
			if _, err := stmt.ExecContext(ctx, until.UnixMilli(), l.SessionID, l.Epoch, api.PhaseClaimed); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: keep %d claims alive: %w", len(leases), err)
	}
	return nil
}

// ActiveSessions returns ids of sessions whose status is not final (see
// api.IsFinal), oldest first.
func (s *Store) ActiveSessions(ctx context.Context) ([]string, error) {
	ids, err := s.ids(ctx, `SELECT id FROM sessions WHERE status NOT IN (?, ?) ORDER BY created_at, id`,
		api.StatusExit, api.StatusError)
	if err != nil {
		return nil, fmt.Errorf("sqlite: active sessions: %w", err)
	}
	return ids, nil
}

// ids runs a query of one string column.
func (s *Store) ids(ctx context.Context, q string, args ...any) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}
