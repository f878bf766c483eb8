package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
)

const sessionCols = `id, outpost_id, spec_json, secrets_json, status, status_detail, reason, last_seq,
	capabilities_json, created_at, updated_at, started_at, ended_at, usage_json, artifacts_pruned_at`

// scanSession reads sessionCols, opening the secrets with keys.
func scanSession(sc interface{ Scan(...any) error }, keys *sealed.Keyring) (store.Session, error) {
	var s store.Session
	var spec, secrets string
	var caps, usage sql.NullString
	var created, updated int64
	var started, ended, pruned sql.NullInt64
	if err := sc.Scan(&s.ID, &s.OutpostID, &spec, &secrets, &s.Status, &s.StatusDetail, &s.Reason, &s.LastSeq,
		&caps, &created, &updated, &started, &ended, &usage, &pruned); err != nil {
		return store.Session{}, err
	}
	if err := scanUsage(usage, &s); err != nil {
		return store.Session{}, err
	}
	if err := json.Unmarshal([]byte(spec), &s.Spec); err != nil {
		return store.Session{}, fmt.Errorf("session %s spec: %w", s.ID, err)
	}
	var err error
	if s.Secrets, err = keys.OpenSecrets(s.ID, secrets); err != nil {
		return store.Session{}, fmt.Errorf("session %s secrets: %w", s.ID, err)
	}
	if caps.Valid {
		s.Capabilities = new(api.Capabilities)
		if err := json.Unmarshal([]byte(caps.String), s.Capabilities); err != nil {
			return store.Session{}, fmt.Errorf("session %s capabilities: %w", s.ID, err)
		}
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
func scanState(sc interface{ Scan(...any) error }) (store.Session, error) {
	var s store.Session
	var caps, usage sql.NullString
	var created, updated int64
	var started, ended, pruned sql.NullInt64
	if err := sc.Scan(&s.ID, &s.OutpostID, &s.Status, &s.StatusDetail, &s.Reason, &s.LastSeq,
		&caps, &created, &updated, &started, &ended, &usage, &pruned); err != nil {
		return store.Session{}, err
	}
	if err := scanUsage(usage, &s); err != nil {
		return store.Session{}, err
	}
	if caps.Valid {
		s.Capabilities = new(api.Capabilities)
		if err := json.Unmarshal([]byte(caps.String), s.Capabilities); err != nil {
			return store.Session{}, fmt.Errorf("session %s capabilities: %w", s.ID, err)
		}
	}
	s.CreatedAt, s.UpdatedAt = fromMS(created), fromMS(updated)
	s.StartedAt, s.EndedAt = fromPtrMS(started), fromPtrMS(ended)
	s.ArtifactsPrunedAt = fromPtrMS(pruned)
	return s, nil
}

// scanUsage decodes the usage column (NULL before any model call).
func scanUsage(v sql.NullString, s *store.Session) error {
	if !v.Valid {
		return nil
	}
	if err := json.Unmarshal([]byte(v.String), &s.Usage); err != nil {
		return fmt.Errorf("session %s usage: %w", s.ID, err)
	}
	return nil
}

// usageValue encodes a usage for its column: NULL while there is none.
func usageValue(u api.Usage) (any, error) {
	if u == (api.Usage{}) {
		return nil, nil
	}
	b, err := marshal(u)
	return b, err
}

// updateState writes the columns of s that change after creation.
func updateState(ctx context.Context, tx *sql.Tx, s *store.Session) error {
	var caps any
	if s.Capabilities != nil {
		b, err := marshal(s.Capabilities)
		if err != nil {
			return fmt.Errorf("capabilities: %w", err)
		}
		caps = b
	}
	usage, err := usageValue(s.Usage)
	if err != nil {
		return fmt.Errorf("usage: %w", err)
	}
	return mustAffect(tx.ExecContext(ctx, `UPDATE sessions SET status = ?2, status_detail = ?3, reason = ?4, last_seq = ?5,
		capabilities_json = ?6, updated_at = ?7, started_at = ?8, ended_at = ?9, usage_json = ?10 WHERE id = ?1`,
		s.ID, s.Status, s.StatusDetail, s.Reason, s.LastSeq, caps, ms(s.UpdatedAt), ptrMS(s.StartedAt), ptrMS(s.EndedAt), usage))
}

// writeSession inserts s, or replaces the stored row when replace is set,
// sealing its secrets with keys.
func writeSession(ctx context.Context, tx *sql.Tx, s *store.Session, keys *sealed.Keyring, replace bool) error {
	spec, err := marshal(s.Spec)
	if err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	secrets, err := keys.SealSecrets(s.ID, s.Secrets)
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	var caps any
	if s.Capabilities != nil {
		if caps, err = marshal(s.Capabilities); err != nil {
			return fmt.Errorf("capabilities: %w", err)
		}
	}
	usage, err := usageValue(s.Usage)
	if err != nil {
		return fmt.Errorf("usage: %w", err)
	}
	args := []any{s.ID, s.OutpostID, strings.ToLower(s.Spec.Title), spec, secrets, s.Status, s.StatusDetail, s.Reason,
		s.LastSeq, caps, ms(s.CreatedAt), ms(s.UpdatedAt), ptrMS(s.StartedAt), ptrMS(s.EndedAt), usage, keys.ID()}
	if replace {
		return mustAffect(tx.ExecContext(ctx, `UPDATE sessions SET outpost_id = ?2, title_fold = ?3, spec_json = ?4,
			secrets_json = ?5, status = ?6, status_detail = ?7, reason = ?8, last_seq = ?9, capabilities_json = ?10,
			created_at = ?11, updated_at = ?12, started_at = ?13, ended_at = ?14, usage_json = ?15, secrets_key = ?16
			WHERE id = ?1`, args...))
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO sessions (id, outpost_id, title_fold, spec_json, secrets_json, status,
		status_detail, reason, last_seq, capabilities_json, created_at, updated_at, started_at, ended_at, usage_json,
		secrets_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, args...)
	return err
}

// CreateSession inserts a session, its queue entry (when e is not nil) and
// its first events in one transaction, writing the assigned Rev into e and
// Seq and SessionID into events.
func (s *Store) CreateSession(ctx context.Context, sess store.Session, e *store.QueueEntry, events []api.Event) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := writeSession(ctx, tx, &sess, s.keys, false); err != nil {
			return err
		}
		if e != nil {
			e.SessionID = sess.ID
			if err := upsertEntry(ctx, tx, e); err != nil {
				return err
			}
		}
		return appendEvents(ctx, tx, sess.ID, events)
	})
	if err != nil {
		return fmt.Errorf("sqlite: create session %s: %w", sess.ID, mapErr(err))
	}
	return nil
}

// GetSession returns one session.
func (s *Store) GetSession(ctx context.Context, id string) (store.Session, error) {
	sess, err := scanSession(s.r.QueryRowContext(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = ?`, id), s.keys)
	if err != nil {
		return store.Session{}, fmt.Errorf("sqlite: get session %s: %w", id, mapErr(err))
	}
	return sess, nil
}

// ListSessions returns a page of sessions, newest first, and the number of
// sessions matching f's OutpostID, Status and Title. A Limit of 0 means no cap.
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, int, error) {
	where := []string{"1 = 1"}
	var args []any
	if f.OutpostID != "" {
		where, args = append(where, "outpost_id = ?"), append(args, f.OutpostID)
	}
	if f.Status != "" {
		where, args = append(where, "status = ?"), append(args, f.Status)
	}
	if f.Title != "" {
		where, args = append(where, "instr(title_fold, ?) > 0"), append(args, strings.ToLower(f.Title))
	}
	filter := strings.Join(where, " AND ")
	page, pargs := filter, args
	if !f.BeforeCreated.IsZero() {
		c := f.BeforeCreated.UnixMilli()
		page += " AND (created_at < ? OR (created_at = ? AND id < ?))"
		pargs = append(append([]any(nil), args...), c, c, f.BeforeID)
	}
	q := `SELECT ` + sessionCols + ` FROM sessions WHERE ` + page + ` ORDER BY created_at DESC, id DESC`
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	var out []store.Session
	var total int
	err := s.read(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM sessions WHERE `+filter, args...).Scan(&total); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, q, pargs...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			sess, err := scanSession(rows, s.keys)
			if err != nil {
				return err
			}
			out = append(out, sess)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: list sessions: %w", err)
	}
	return out, total, nil
}

// UpdateSession runs fn on the current session and queue entry inside one
// write transaction, then writes the Mutation fn returns. A session without
// a queue entry is passed a zero entry with only SessionID set. An error
// from fn rolls back and is returned as is. The session, entry, calls and
// connect tokens of the mutation are bound to id.
//
// fn runs while the store's single writer connection is held: it must be
// quick and must not call the Store's write methods, which would deadlock.
func (s *Store) UpdateSession(ctx context.Context, id string, fn func(store.Session, store.QueueEntry) (store.Mutation, error)) (store.Mutation, error) {
	var m store.Mutation
	var fnErr error
	err := s.write(ctx, func(tx *sql.Tx) error {
		sess, err := scanState(tx.QueryRowContext(ctx, `SELECT `+stateCols+` FROM sessions WHERE id = ?`, id))
		if err != nil {
			return err
		}
		e, err := scanEntry(tx.QueryRowContext(ctx, `SELECT `+entryCols+` FROM queue WHERE session_id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			e, err = store.QueueEntry{SessionID: id}, nil
		}
		if err != nil {
			return err
		}
		if m, fnErr = fn(sess, e); fnErr != nil {
			return fnErr
		}
		return applyMutation(ctx, tx, id, &m)
	})
	if fnErr != nil {
		return store.Mutation{}, fnErr
	}
	if err != nil {
		return store.Mutation{}, fmt.Errorf("sqlite: update session %s: %w", id, mapErr(err))
	}
	return m, nil
}

// applyMutation writes m for session id, assigning revs and seqs into m.
func applyMutation(ctx context.Context, tx *sql.Tx, id string, m *store.Mutation) error {
	if m.Session != nil {
		m.Session.ID = id
		if err := updateState(ctx, tx, m.Session); err != nil {
			return err
		}
	}
	if m.Entry != nil {
		m.Entry.SessionID = id
		if err := upsertEntry(ctx, tx, m.Entry); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM connect_tokens WHERE session_id = ? AND epoch < ?`, id, m.Entry.Epoch); err != nil {
			return fmt.Errorf("prune connect tokens: %w", err)
		}
	}
	if err := appendEvents(ctx, tx, id, m.Events); err != nil {
		return err
	}
	for i := range m.Calls {
		c := &m.Calls[i]
		c.SessionID = id
		if _, err := tx.ExecContext(ctx, `INSERT INTO calls (session_id, seq, tool, args, done, ok, value, error, created_at, done_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (session_id, seq) DO UPDATE SET tool = excluded.tool, args = excluded.args, done = excluded.done,
				ok = excluded.ok, value = excluded.value, error = excluded.error, created_at = excluded.created_at,
				done_at = excluded.done_at`,
			id, c.Seq, c.Tool, bytesOrNil(c.Args), boolInt(c.Done), boolInt(c.OK), bytesOrNil(c.Value), c.Error,
			ms(c.CreatedAt), ptrMS(c.DoneAt)); err != nil {
			return fmt.Errorf("call %d: %w", c.Seq, err)
		}
	}
	for i := range m.ConnectTokens {
		ct := &m.ConnectTokens[i]
		ct.SessionID = id
		if _, err := tx.ExecContext(ctx, `INSERT INTO connect_tokens (hash, session_id, epoch, created_at) VALUES (?, ?, ?, ?)`,
			ct.Hash, id, ct.Epoch, ms(ct.CreatedAt)); err != nil {
			return fmt.Errorf("connect token: %w", err)
		}
	}
	return nil
}

// appendEvents appends events to a transcript, numbering them after the
// highest stored Seq and writing Seq and SessionID back.
func appendEvents(ctx context.Context, tx *sql.Tx, sessionID string, events []api.Event) error {
	if len(events) == 0 {
		return nil
	}
	var seq int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?`, sessionID).Scan(&seq); err != nil {
		return err
	}
	for i := range events {
		seq++
		events[i].Seq, events[i].SessionID = seq, sessionID
		body, err := marshal(events[i])
		if err != nil {
			return fmt.Errorf("event %d: %w", seq, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO events (session_id, seq, body_json) VALUES (?, ?, ?)`, sessionID, seq, body); err != nil {
			return err
		}
	}
	return nil
}

// AppendEvents appends events to a session's transcript in one transaction,
// writing the assigned Seq and SessionID back into events.
// store.ErrNotFound when the session is absent.
func (s *Store) AppendEvents(ctx context.Context, sessionID string, events []api.Event) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ?`, sessionID).Scan(&one); err != nil {
			return err
		}
		return appendEvents(ctx, tx, sessionID, events)
	})
	if err != nil {
		return fmt.Errorf("sqlite: append events %s: %w", sessionID, mapErr(err))
	}
	return nil
}

// ListEvents returns up to limit events with Seq > after, in order; a limit
// of 0 or less means no cap.
func (s *Store) ListEvents(ctx context.Context, sessionID string, after int64, limit int) ([]api.Event, error) {
	if limit <= 0 {
		limit = -1
	}
	return s.queryEvents(ctx, sessionID, `SELECT body_json FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?`,
		sessionID, after, limit)
}

// TailEvents returns the last limit events of a session, in order.
func (s *Store) TailEvents(ctx context.Context, sessionID string, limit int) ([]api.Event, error) {
	return s.queryEvents(ctx, sessionID, `SELECT body_json FROM (SELECT seq, body_json FROM events WHERE session_id = ?
		ORDER BY seq DESC LIMIT ?) ORDER BY seq`, sessionID, max(limit, 0))
}

// queryEvents runs a query of events' body_json.
func (s *Store) queryEvents(ctx context.Context, sessionID, query string, args ...any) ([]api.Event, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list events %s: %w", sessionID, err)
	}
	defer rows.Close()
	var out []api.Event
	for rows.Next() {
		var body []byte
		var ev api.Event
		if err := rows.Scan(&body); err != nil {
			return nil, fmt.Errorf("sqlite: list events %s: %w", sessionID, err)
		}
		if err := json.Unmarshal(body, &ev); err != nil {
			return nil, fmt.Errorf("sqlite: list events %s: %w", sessionID, err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list events %s: %w", sessionID, err)
	}
	return out, nil
}

// ListCalls returns every call of a session in Seq order.
func (s *Store) ListCalls(ctx context.Context, sessionID string) ([]store.Call, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT session_id, seq, tool, args, done, ok, value, error, created_at, done_at
		FROM calls WHERE session_id = ? ORDER BY seq`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list calls %s: %w", sessionID, err)
	}
	defer rows.Close()
	var out []store.Call
	for rows.Next() {
		var c store.Call
		var created int64
		var args, value []byte
		var doneAt sql.NullInt64
		if err := rows.Scan(&c.SessionID, &c.Seq, &c.Tool, &args, &c.Done, &c.OK, &value, &c.Error, &created, &doneAt); err != nil {
			return nil, fmt.Errorf("sqlite: list calls %s: %w", sessionID, err)
		}
		c.Args, c.Value = args, value
		c.CreatedAt, c.DoneAt = fromMS(created), fromPtrMS(doneAt)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list calls %s: %w", sessionID, err)
	}
	return out, nil
}
