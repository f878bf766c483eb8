package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

const entryCols = `session_id, outpost_id, kind, platform, phase, acceptor_id, claim_deadline, epoch,
	session_status, rev, deleted, created_at, updated_at, live_until, remote_binary_sha`

// expirySQL is an entry's Expiry as SQL; the index queue_phase_expiry is on
// it, so it must be spelled exactly so.
const expirySQL = `GREATEST(claim_deadline, COALESCE(live_until, 0))`

func scanEntry(sc scanner) (store.QueueEntry, error) {
	var e store.QueueEntry
	var deadline, live *int64
	var created, updated int64
	if err := sc.Scan(&e.SessionID, &e.OutpostID, &e.Kind, &e.Platform, &e.Phase, &e.AcceptorID, &deadline, &e.Epoch,
		&e.SessionStatus, &e.Rev, &e.Deleted, &created, &updated, &live, &e.RemoteBinarySHA); err != nil {
		return store.QueueEntry{}, err
	}
	e.ClaimDeadline, e.CreatedAt, e.UpdatedAt = fromNullMS(deadline), fromMS(created), fromMS(updated)
	e.LiveUntil = fromNullMS(live)
	return e, nil
}

// upsertEntrySQL writes a queue entry under the next global rev, which it
// returns. Taking the rev locks the counter row until the transaction ends,
// so revs commit in order; callers queue it last.
const upsertEntrySQL = `WITH r AS (UPDATE counters SET value = value + 1 WHERE name = 'rev' RETURNING value)
	INSERT INTO queue (` + entryCols + `)
	SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, r.value, $10, $11, $12, $13, $14 FROM r
	ON CONFLICT (session_id) DO UPDATE SET outpost_id = excluded.outpost_id, kind = excluded.kind,
		platform = excluded.platform, phase = excluded.phase, acceptor_id = excluded.acceptor_id,
		claim_deadline = excluded.claim_deadline, epoch = excluded.epoch, session_status = excluded.session_status,
		rev = excluded.rev, deleted = excluded.deleted, created_at = excluded.created_at,
		updated_at = excluded.updated_at,
		live_until = CASE WHEN excluded.epoch = queue.epoch
			THEN NULLIF(GREATEST(COALESCE(excluded.live_until, 0), COALESCE(queue.live_until, 0)), 0)
			ELSE excluded.live_until END
	RETURNING rev` // remote_binary_sha keeps what the insert wrote

// queueUpsertEntry queues the write of e into b; the assigned rev is
// stored in e.Rev when b runs.
func queueUpsertEntry(b *pgx.Batch, e *store.QueueEntry) {
	b.Queue(upsertEntrySQL, e.SessionID, e.OutpostID, e.Kind, e.Platform, e.Phase, e.AcceptorID, nullMS(e.ClaimDeadline),
		e.Epoch, e.SessionStatus, e.Deleted, ms(e.CreatedAt), ms(e.UpdatedAt), nullMS(e.LiveUntil), e.RemoteBinarySHA).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&e.Rev); err != nil {
			return fmt.Errorf("queue entry: %w", err)
		}
		return nil
	})
}

// GetQueueEntry returns one queue entry, tombstones included.
func (s *Store) GetQueueEntry(ctx context.Context, sessionID string) (store.QueueEntry, error) {
	e, err := scanEntry(s.pool.QueryRow(ctx, `SELECT `+entryCols+` FROM queue WHERE session_id = $1`, sessionID))
	if err != nil {
		return store.QueueEntry{}, fmt.Errorf("postgres: get queue entry %s: %w", sessionID, mapErr(err))
	}
	return e, nil
}

// ListQueue returns entries matching f in Rev order, and the number of live
// entries matching f's OutpostID, Phase and AcceptorID.
func (s *Store) ListQueue(ctx context.Context, f store.QueueFilter) ([]store.QueueEntry, int, error) {
	where := []string{"TRUE"}
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.OutpostID != "" {
		add("outpost_id = $%d", f.OutpostID)
	}
	if f.Phase != "" {
		add("phase = $%d", f.Phase)
	}
	if f.AcceptorID != "" {
		add("acceptor_id = $%d", f.AcceptorID)
	}
	filter := strings.Join(where, " AND ")
	pargs := append(append([]any(nil), args...), f.AfterRev)
	page := filter + fmt.Sprintf(" AND rev > $%d", len(pargs))
	if !f.IncludeDeleted {
		page += " AND NOT deleted"
	}
	q := `SELECT ` + entryCols + ` FROM queue WHERE ` + page + ` ORDER BY rev`
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}

	var out []store.QueueEntry
	var total int
	err := s.read(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM queue WHERE `+filter+` AND NOT deleted`, args...).Scan(&total); err != nil {
			return err
		}
		var err error
		out, err = collect(scanEntry)(tx.Query(ctx, q, pargs...))
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: list queue: %w", err)
	}
	return out, total, nil
}

// MaxRev is the highest Rev assigned so far (0 when none).
func (s *Store) MaxRev(ctx context.Context) (int64, error) {
	var rev int64
	if err := s.pool.QueryRow(ctx, `SELECT value FROM counters WHERE name = 'rev'`).Scan(&rev); err != nil {
		return 0, fmt.Errorf("postgres: max rev: %w", err)
	}
	return rev, nil
}

// LapsedClaims returns ids of claimed, live entries whose Expiry is at or
// before now, earliest first.
func (s *Store) LapsedClaims(ctx context.Context, now time.Time) ([]string, error) {
	ids, err := collect(scanString)(s.pool.Query(ctx, `SELECT session_id FROM queue WHERE phase = $1 AND `+expirySQL+` <= $2 AND NOT deleted
		ORDER BY `+expirySQL+`, session_id`, api.PhaseClaimed, now.UnixMilli()))
	if err != nil {
		return nil, fmt.Errorf("postgres: lapsed claims: %w", err)
	}
	return ids, nil
}

// KeepAlive raises live_until on the leases' entries still of their epoch,
// in one statement.
func (s *Store) KeepAlive(ctx context.Context, until time.Time, leases ...store.Lease) error {
	if len(leases) == 0 {
		return nil
	}
	ids := make([]string, len(leases))
	epochs := make([]int64, len(leases))
	for i, l := range leases {
		ids[i], epochs[i] = l.SessionID, l.Epoch
	}
	_, err := s.pool.Exec(ctx, `UPDATE queue q SET live_until = GREATEST(COALESCE(q.live_until, 0), $1)
		FROM unnest($2::text[], $3::bigint[]) AS l(session_id, epoch)
		WHERE q.session_id = l.session_id AND q.epoch = l.epoch AND q.phase = $4 AND NOT q.deleted`,
		until.UnixMilli(), ids, epochs, api.PhaseClaimed)
	if err != nil {
		return fmt.Errorf("postgres: keep %d claims alive: %w", len(leases), err)
	}
	return nil
}

// ActiveSessions returns ids of sessions whose status is not final (see
// api.IsFinal), oldest first.
func (s *Store) ActiveSessions(ctx context.Context) ([]string, error) {
	ids, err := collect(scanString)(s.pool.Query(ctx, `SELECT id FROM sessions WHERE status NOT IN ($1, $2) ORDER BY created_at, id`,
		api.StatusExit, api.StatusError))
	if err != nil {
		return nil, fmt.Errorf("postgres: active sessions: %w", err)
	}
	return ids, nil
}
