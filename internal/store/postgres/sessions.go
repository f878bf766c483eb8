package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
)

const sessionCols = `id, outpost_id, spec_json, secrets_json, status, status_detail, reason, last_seq,
	capabilities_json, created_at, updated_at, started_at, ended_at, usage_json, artifacts_pruned_at`

// scanSession reads sessionCols, opening the secrets with keys.
func scanSession(sc scanner, keys *sealed.Keyring) (store.Session, error) {
	var s store.Session
	var spec, secrets string
	var caps, usage *string
	var created, updated int64
	var started, ended, pruned *int64
	if err := sc.Scan(&s.ID, &s.OutpostID, &spec, &secrets, &s.Status, &s.StatusDetail, &s.Reason, &s.LastSeq,
		&caps, &created, &updated, &started, &ended, &usage, &pruned); err != nil {
		return store.Session{}, err
	}
	if err := json.Unmarshal([]byte(spec), &s.Spec); err != nil {
		return store.Session{}, fmt.Errorf("session %s spec: %w", s.ID, err)
	}
	var err error
	if s.Secrets, err = keys.OpenSecrets(s.ID, secrets); err != nil {
		return store.Session{}, fmt.Errorf("session %s secrets: %w", s.ID, err)
	}
	if err := decodeState(&s, caps, usage); err != nil {
		return store.Session{}, err
	}
	s.CreatedAt, s.UpdatedAt = fromMS(created), fromMS(updated)
	s.StartedAt, s.EndedAt = fromPtrMS(started), fromPtrMS(ended)
	s.ArtifactsPrunedAt = fromPtrMS(pruned)
	return s, nil
}

// stateCols are the columns of a session that change after creation.
const stateCols = `id, outpost_id, status, status_detail, reason, last_seq, capabilities_json, created_at, updated_at,
	started_at, ended_at, usage_json, artifacts_pruned_at`

// scanState reads stateCols: a session without its immutable spec and
// secrets, which write transactions neither need nor rewrite.
func scanState(sc scanner) (store.Session, error) {
	var s store.Session
	var caps, usage *string
	var created, updated int64
	var started, ended, pruned *int64
	if err := sc.Scan(&s.ID, &s.OutpostID, &s.Status, &s.StatusDetail, &s.Reason, &s.LastSeq,
		&caps, &created, &updated, &started, &ended, &usage, &pruned); err != nil {
		return store.Session{}, err
	}
	if err := decodeState(&s, caps, usage); err != nil {
		return store.Session{}, err
	}
	s.CreatedAt, s.UpdatedAt = fromMS(created), fromMS(updated)
	s.StartedAt, s.EndedAt = fromPtrMS(started), fromPtrMS(ended)
	s.ArtifactsPrunedAt = fromPtrMS(pruned)
	return s, nil
}

// decodeState decodes the capabilities and usage columns (NULL when absent).
func decodeState(s *store.Session, caps, usage *string) error {
	if caps != nil {
		s.Capabilities = new(api.Capabilities)
		if err := json.Unmarshal([]byte(*caps), s.Capabilities); err != nil {
			return fmt.Errorf("session %s capabilities: %w", s.ID, err)
		}
	}
	if usage != nil {
		if err := json.Unmarshal([]byte(*usage), &s.Usage); err != nil {
			return fmt.Errorf("session %s usage: %w", s.ID, err)
		}
	}
	return nil
}

// stateValues encodes the capabilities and usage of s for their columns:
// NULL while there are none.
func stateValues(s *store.Session) (caps, usage any, err error) {
	if s.Capabilities != nil {
		if caps, err = marshal(s.Capabilities); err != nil {
			return nil, nil, fmt.Errorf("capabilities: %w", err)
		}
	}
	if s.Usage != (api.Usage{}) {
		if usage, err = marshal(s.Usage); err != nil {
			return nil, nil, fmt.Errorf("usage: %w", err)
		}
	}
	return caps, usage, nil
}

// queueUpdateState queues into b the write of the columns of s that change
// after creation (but not artifacts_pruned_at, which only
// MarkArtifactsPruned writes).
func queueUpdateState(b *pgx.Batch, s *store.Session) error {
	caps, usage, err := stateValues(s)
	if err != nil {
		return err
	}
	b.Queue(`UPDATE sessions SET status = $2, status_detail = $3, reason = $4, last_seq = $5,
		capabilities_json = $6, updated_at = $7, started_at = $8, ended_at = $9, usage_json = $10 WHERE id = $1`,
		s.ID, s.Status, s.StatusDetail, s.Reason, s.LastSeq, caps, ms(s.UpdatedAt), ptrMS(s.StartedAt), ptrMS(s.EndedAt), usage).
		Exec(func(tag pgconn.CommandTag) error { return mustAffect(tag, nil) })
	return nil
}

// queueInsertSession queues into b the insert of s, its secrets sealed
// with keys.
func queueInsertSession(b *pgx.Batch, s *store.Session, keys *sealed.Keyring) error {
	spec, err := marshal(s.Spec)
	if err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	secrets, err := keys.SealSecrets(s.ID, s.Secrets)
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	caps, usage, err := stateValues(s)
	if err != nil {
		return err
	}
	b.Queue(`INSERT INTO sessions (id, outpost_id, title_fold, spec_json, secrets_json, status,
		status_detail, reason, last_seq, capabilities_json, created_at, updated_at, started_at, ended_at, usage_json,
		secrets_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
		s.ID, s.OutpostID, strings.ToLower(s.Spec.Title), spec, secrets, s.Status, s.StatusDetail, s.Reason,
		s.LastSeq, caps, ms(s.CreatedAt), ms(s.UpdatedAt), ptrMS(s.StartedAt), ptrMS(s.EndedAt), usage, keys.ID())
	return nil
}

// CreateSession inserts a session, its queue entry (when e is not nil) and
// its first events in one transaction, writing the assigned Rev into e and
// Seq and SessionID into events. The writes go in one round trip.
func (s *Store) CreateSession(ctx context.Context, sess store.Session, e *store.QueueEntry, events []api.Event) error {
	var entry store.QueueEntry
	err := s.write(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		if err := queueInsertSession(b, &sess, s.keys); err != nil {
			return err
		}
		// A new session has no events yet (were it not new, the insert
		// fails).
		if err := queueEvents(b, sess.ID, 0, events); err != nil {
			return err
		}
		if e != nil {
			entry = *e
			entry.SessionID = sess.ID
			queueUpsertEntry(b, &entry) // last: it locks the rev counter
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("postgres: create session %s: %w", sess.ID, mapErr(err))
	}
	if e != nil {
		*e = entry
	}
	return nil
}

// GetSession returns one session.
func (s *Store) GetSession(ctx context.Context, id string) (store.Session, error) {
	sess, err := scanSession(s.pool.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = $1`, id), s.keys)
	if err != nil {
		return store.Session{}, fmt.Errorf("postgres: get session %s: %w", id, mapErr(err))
	}
	return sess, nil
}

// ListSessions returns a page of sessions, newest first, and the number of
// sessions matching f's OutpostID, Status and Title. A Limit of 0 means no cap.
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, int, error) {
	where := []string{"TRUE"}
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.OutpostID != "" {
		add("outpost_id = $%d", f.OutpostID)
	}
	if f.Status != "" {
		add("status = $%d", f.Status)
	}
	if f.Title != "" {
		add("strpos(title_fold, $%d) > 0", strings.ToLower(f.Title))
	}
	filter := strings.Join(where, " AND ")
	page, pargs := filter, args
	if !f.BeforeCreated.IsZero() {
		pargs = append(append([]any(nil), args...), f.BeforeCreated.UnixMilli(), f.BeforeID)
		page += fmt.Sprintf(" AND (created_at, id) < ($%d, $%d)", len(pargs)-1, len(pargs))
	}
	q := `SELECT ` + sessionCols + ` FROM sessions WHERE ` + page + ` ORDER BY created_at DESC, id DESC`
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	var out []store.Session
	var total int
	err := s.read(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM sessions WHERE `+filter, args...).Scan(&total); err != nil {
			return err
		}
		var err error
		out, err = collect(func(sc scanner) (store.Session, error) { return scanSession(sc, s.keys) })(tx.Query(ctx, q, pargs...))
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: list sessions: %w", err)
	}
	return out, total, nil
}

// UpdateSession runs fn on the current session and queue entry inside one
// transaction that holds the session row's lock, then writes the Mutation fn
// returns. A session without a queue entry is passed a zero entry with only
// SessionID set. An error from fn rolls back and is returned as is. The
// session, entry, calls and connect tokens of the mutation are bound to id.
//
// When PostgreSQL reports a serialization failure or a deadlock the whole
// transaction, fn included, is tried again (a bounded number of times), so
// fn must not keep effects of a try that did not commit.
func (s *Store) UpdateSession(ctx context.Context, id string, fn func(store.Session, store.QueueEntry) (store.Mutation, error)) (store.Mutation, error) {
	var m store.Mutation
	var fnErr error
	var sess store.Session
	var e store.QueueEntry
	var seq int64
	// The first round trip begins the transaction and takes the session
	// row's lock, which orders it after every other writer of the session;
	// the next two statements, each with a snapshot taken once the lock is
	// held, see what those writers committed. What fn sees stays current
	// until commit.
	first := func(b *pgx.Batch) {
		b.Queue(`SELECT `+stateCols+` FROM sessions WHERE id = $1 FOR UPDATE`, id).QueryRow(func(row pgx.Row) (err error) {
			sess, err = scanState(row)
			return err
		})
		b.Queue(`SELECT `+entryCols+` FROM queue WHERE session_id = $1`, id).QueryRow(func(row pgx.Row) (err error) {
			e, err = scanEntry(row)
			if errors.Is(err, pgx.ErrNoRows) {
				e, err = store.QueueEntry{SessionID: id}, nil
			}
			return err
		})
		b.Queue(`SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = $1`, id).QueryRow(func(row pgx.Row) error {
			return row.Scan(&seq)
		})
	}
	err := s.writeBatch(ctx, first, func(tx pgx.Tx) error {
		fnErr = nil
		if m, fnErr = fn(sess, e); fnErr != nil {
			return fnErr
		}
		return applyMutation(ctx, tx, id, seq, &m)
	})
	if fnErr != nil {
		return store.Mutation{}, fnErr
	}
	if err != nil {
		return store.Mutation{}, fmt.Errorf("postgres: update session %s: %w", id, mapErr(err))
	}
	return m, nil
}

// applyMutation writes m for session id, whose highest event seq is seq,
// in one round trip, assigning revs and seqs into m. The queue entry is
// written last: its rev locks the global counter.
func applyMutation(ctx context.Context, tx pgx.Tx, id string, seq int64, m *store.Mutation) error {
	b := &pgx.Batch{}
	if m.Session != nil {
		m.Session.ID = id
		if err := queueUpdateState(b, m.Session); err != nil {
			return err
		}
	}
	if err := queueEvents(b, id, seq, m.Events); err != nil {
		return err
	}
	for i := range m.Calls {
		c := &m.Calls[i]
		c.SessionID = id
		b.Queue(`INSERT INTO calls (session_id, seq, tool, args, done, ok, value, error, created_at, done_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (session_id, seq) DO UPDATE SET tool = excluded.tool, args = excluded.args, done = excluded.done,
				ok = excluded.ok, value = excluded.value, error = excluded.error, created_at = excluded.created_at,
				done_at = excluded.done_at`,
			id, c.Seq, c.Tool, bytesOrNil(c.Args), c.Done, c.OK, bytesOrNil(c.Value), c.Error,
			ms(c.CreatedAt), ptrMS(c.DoneAt))
	}
	for i := range m.ConnectTokens {
		ct := &m.ConnectTokens[i]
		ct.SessionID = id
		b.Queue(`INSERT INTO connect_tokens (hash, session_id, epoch, created_at) VALUES ($1, $2, $3, $4)`,
			ct.Hash, id, ct.Epoch, ms(ct.CreatedAt))
	}
	if m.Entry != nil {
		m.Entry.SessionID = id
		b.Queue(`DELETE FROM connect_tokens WHERE session_id = $1 AND epoch < $2`, id, m.Entry.Epoch)
		queueUpsertEntry(b, m.Entry)
	}
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

// queueEvents queues into b the append of events to a transcript whose
// highest stored Seq is seq, numbering them and writing Seq and SessionID
// back. The caller holds the session row's lock (or is creating the row),
// so no other transaction numbers the same transcript meanwhile.
func queueEvents(b *pgx.Batch, sessionID string, seq int64, events []api.Event) error {
	if len(events) == 0 {
		return nil
	}
	ids := make([]string, len(events))
	seqs := make([]int64, len(events))
	bodies := make([]string, len(events))
	for i := range events {
		seq++
		events[i].Seq, events[i].SessionID = seq, sessionID
		body, err := marshal(events[i])
		if err != nil {
			return fmt.Errorf("event %d: %w", seq, err)
		}
		ids[i], seqs[i], bodies[i] = sessionID, seq, body
	}
	b.Queue(`INSERT INTO events (session_id, seq, body_json)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])`, ids, seqs, bodies)
	return nil
}

// AppendEvents appends events to a session's transcript in one transaction,
// writing the assigned Seq and SessionID back into events.
// store.ErrNotFound when the session is absent.
func (s *Store) AppendEvents(ctx context.Context, sessionID string, events []api.Event) error {
	if len(events) == 0 {
		// Nothing to write; still say whether the session exists.
		var one int
		err := s.pool.QueryRow(ctx, `SELECT 1 FROM sessions WHERE id = $1`, sessionID).Scan(&one)
		if err != nil {
			return fmt.Errorf("postgres: append events %s: %w", sessionID, mapErr(err))
		}
		return nil
	}
	var seq int64
	first := func(b *pgx.Batch) {
		b.Queue(`SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE`, sessionID).QueryRow(func(row pgx.Row) error {
			var one int
			return row.Scan(&one)
		})
		b.Queue(`SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = $1`, sessionID).QueryRow(func(row pgx.Row) error {
			return row.Scan(&seq)
		})
	}
	err := s.writeBatch(ctx, first, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		if err := queueEvents(b, sessionID, seq, events); err != nil {
			return err
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("postgres: append events %s: %w", sessionID, mapErr(err))
	}
	return nil
}

// ListEvents returns up to limit events with Seq > after, in order; a limit
// of 0 or less means no cap.
func (s *Store) ListEvents(ctx context.Context, sessionID string, after int64, limit int) ([]api.Event, error) {
	var lim any // NULL: no limit
	if limit > 0 {
		lim = int64(limit)
	}
	return s.queryEvents(ctx, sessionID, `SELECT body_json FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3::bigint`,
		sessionID, after, lim)
}

// TailEvents returns the last limit events of a session, in order.
func (s *Store) TailEvents(ctx context.Context, sessionID string, limit int) ([]api.Event, error) {
	return s.queryEvents(ctx, sessionID, `SELECT body_json FROM (SELECT seq, body_json FROM events WHERE session_id = $1
		ORDER BY seq DESC LIMIT $2::bigint) AS tail ORDER BY seq`, sessionID, int64(max(limit, 0)))
}

// queryEvents runs a query of events' body_json.
func (s *Store) queryEvents(ctx context.Context, sessionID, query string, args ...any) ([]api.Event, error) {
	out, err := collect(func(sc scanner) (api.Event, error) {
		var body string
		var ev api.Event
		if err := sc.Scan(&body); err != nil {
			return ev, err
		}
		err := json.Unmarshal([]byte(body), &ev)
		return ev, err
	})(s.pool.Query(ctx, query, args...))
	if err != nil {
		return nil, fmt.Errorf("postgres: list events %s: %w", sessionID, err)
	}
	return out, nil
}

// ListCalls returns every call of a session in Seq order.
func (s *Store) ListCalls(ctx context.Context, sessionID string) ([]store.Call, error) {
	out, err := collect(func(sc scanner) (store.Call, error) {
		var c store.Call
		var created int64
		var args, value []byte
		var doneAt *int64
		if err := sc.Scan(&c.SessionID, &c.Seq, &c.Tool, &args, &c.Done, &c.OK, &value, &c.Error, &created, &doneAt); err != nil {
			return c, err
		}
		if args != nil {
			c.Args = args
		}
		if value != nil {
			c.Value = value
		}
		c.CreatedAt, c.DoneAt = fromMS(created), fromPtrMS(doneAt)
		return c, nil
	})(s.pool.Query(ctx, `SELECT session_id, seq, tool, args, done, ok, value, error, created_at, done_at
		FROM calls WHERE session_id = $1 ORDER BY seq`, sessionID))
	if err != nil {
		return nil, fmt.Errorf("postgres: list calls %s: %w", sessionID, err)
	}
	return out, nil
}
