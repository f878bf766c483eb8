package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// updateState writes the columns of s that change after creation.
func updateState(ctx context.Context, tx *sql.Tx, s *store.Session) error {
	args, err := sqlstore.StateArgs(s)
	if err != nil {
		return err
	}
	return mustAffect(tx.ExecContext(ctx, sqlstore.UpdateStateSQL, args...))
}

// insertSession inserts s, sealing its secrets with keys.
func insertSession(ctx context.Context, tx *sql.Tx, s *store.Session, keys *sealed.Keyring) error {
	args, err := sqlstore.SessionArgs(s, keys)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, sqlstore.InsertSessionSQL, args...)
	return err
}

// CreateSession inserts a session, its queue entry (when e is not nil) and
// its first events in one transaction, writing the assigned Rev into e and
// Seq and SessionID into events.
func (s *Store) CreateSession(ctx context.Context, sess store.Session, e *store.QueueEntry, events []api.Event) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := insertSession(ctx, tx, &sess, s.keys); err != nil {
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
	sess, err := sqlstore.ScanSession(s.r.QueryRowContext(ctx, sqlstore.GetSessionSQL, id), s.keys)
	if err != nil {
		return store.Session{}, fmt.Errorf("sqlite: get session %s: %w", id, mapErr(err))
	}
	return sess, nil
}

// ListSessions returns a page of sessions, newest first, and the number of
// sessions matching f's OutpostID, Status and Title. A Limit of 0 means no cap.
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, int, error) {
	q := dialect.ListSessions(f)
	var out []store.Session
	var total int
	err := s.read(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, q.Count, q.CountArgs...).Scan(&total); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, q.Page, q.PageArgs...)
		out, err = collect(rows, err, func(sc sqlstore.Scanner) (store.Session, error) { return sqlstore.ScanSession(sc, s.keys) })
		return err
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
	return s.update(ctx, id, nil, func(sess store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
		return fn(sess, e)
	})
}

// ClaimSession is UpdateSession whose fn also gets the load of the
// session's outpost at now. The store's one writer serializes it with
// every other claim.
func (s *Store) ClaimSession(ctx context.Context, id string, now time.Time, fn func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error) {
	return s.update(ctx, id, s.claimLoad(ctx, id, now), fn)
}

// ClaimNext is ClaimSession of the outpost's first
// claimable entry, picked in the same write transaction: the one writer
// orders it after every other transaction, so concurrent calls never pick
// the same entry.
func (s *Store) ClaimNext(ctx context.Context, outpostID string, now time.Time, f store.NextFilter, fn func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error) {
	q, args := dialect.ClaimNextSQL(outpostID, f, "")
	var m store.Mutation
	var fnErr error
	var id string
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, q, args...).Scan(&id); err != nil {
			return err
		}
		m, fnErr = updateTx(ctx, tx, id, s.claimLoad(ctx, id, now), fn)
		return fnErr
	})
	var fe fnError
	if errors.As(fnErr, &fe) {
		return store.Mutation{}, fe.err
	}
	if err != nil {
		return store.Mutation{}, fmt.Errorf("sqlite: claim the next session of outpost %s: %w", outpostID, mapErr(err))
	}
	return m, nil
}

// claimLoad reads, in a claim's transaction, the load of the outpost of
// session id's entry e at now.
func (s *Store) claimLoad(ctx context.Context, id string, now time.Time) func(tx *sql.Tx, e store.QueueEntry) (store.OutpostLoad, error) {
	return func(tx *sql.Tx, e store.QueueEntry) (store.OutpostLoad, error) {
		var l store.OutpostLoad
		if e.OutpostID == "" {
			return l, nil
		}
		err := tx.QueryRowContext(ctx, sqlstore.OutpostLimitsSQL, id).Scan(&l.MaxRunning)
		if errors.Is(err, sql.ErrNoRows) {
			return l, nil // the outpost is gone: no limit to hold
		}
		if err != nil {
			return l, fmt.Errorf("outpost limits: %w", err)
		}
		if l.MaxRunning <= 0 {
			return l, nil
		}
		if err := tx.QueryRowContext(ctx, heldClaimsSQL, e.OutpostID, api.PhaseClaimed, now.UnixMilli(), id).Scan(&l.Held); err != nil {
			return l, fmt.Errorf("count held claims: %w", err)
		}
		return l, nil
	}
}

var heldClaimsSQL = dialect.HeldClaimsSQL()

// update is UpdateSession and ClaimSession: load, when set, reads the
// outpost's load in the transaction before fn runs.
func (s *Store) update(ctx context.Context, id string, load func(*sql.Tx, store.QueueEntry) (store.OutpostLoad, error),
	fn func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error) {
	var m store.Mutation
	var fnErr error
	err := s.write(ctx, func(tx *sql.Tx) error {
		m, fnErr = updateTx(ctx, tx, id, load, fn)
		return fnErr
	})
	var fe fnError
	if errors.As(fnErr, &fe) {
		return store.Mutation{}, fe.err
	}
	if err != nil {
		return store.Mutation{}, fmt.Errorf("sqlite: update session %s: %w", id, mapErr(err))
	}
	return m, nil
}

// fnError carries an error of an update's fn out of its transaction, to be
// returned as is.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }

// updateTx is the body of update's transaction tx. An error of fn comes
// back as a fnError.
func updateTx(ctx context.Context, tx *sql.Tx, id string, load func(*sql.Tx, store.QueueEntry) (store.OutpostLoad, error),
	fn func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error) {
	sess, err := sqlstore.ScanState(tx.QueryRowContext(ctx, sqlstore.GetStateSQL, id))
	if err != nil {
		return store.Mutation{}, err
	}
	e, err := sqlstore.ScanEntry(tx.QueryRowContext(ctx, sqlstore.GetEntrySQL, id))
	if errors.Is(err, sql.ErrNoRows) {
		e, err = store.QueueEntry{SessionID: id}, nil
	}
	if err != nil {
		return store.Mutation{}, err
	}
	var l store.OutpostLoad
	if load != nil {
		if l, err = load(tx, e); err != nil {
			return store.Mutation{}, err
		}
	}
	m, err := fn(sess, e, l)
	if err != nil {
		return store.Mutation{}, fnError{err}
	}
	if err := applyMutation(ctx, tx, id, &m); err != nil {
		return store.Mutation{}, err
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
		if _, err := tx.ExecContext(ctx, sqlstore.PruneConnectTokensSQL, id, m.Entry.Epoch); err != nil {
			return fmt.Errorf("prune connect tokens: %w", err)
		}
	}
	if err := appendEvents(ctx, tx, id, m.Events); err != nil {
		return err
	}
	for i := range m.Calls {
		c := &m.Calls[i]
		c.SessionID = id
		if _, err := tx.ExecContext(ctx, sqlstore.UpsertCallSQL, sqlstore.CallArgs(c)...); err != nil {
			return fmt.Errorf("call %d: %w", c.Seq, err)
		}
	}
	for i := range m.ConnectTokens {
		ct := &m.ConnectTokens[i]
		ct.SessionID = id
		if _, err := tx.ExecContext(ctx, sqlstore.InsertConnectTokenSQL, ct.Hash, id, ct.Epoch, sqlstore.MS(ct.CreatedAt)); err != nil {
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
	if err := tx.QueryRowContext(ctx, sqlstore.MaxEventSeqSQL, sessionID).Scan(&seq); err != nil {
		return err
	}
	for i := range events {
		seq++
		events[i].Seq, events[i].SessionID = seq, sessionID
		body, err := sqlstore.Marshal(events[i])
		if err != nil {
			return fmt.Errorf("event %d: %w", seq, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO events (session_id, seq, body_json) VALUES ($1, $2, $3)`, sessionID, seq, body); err != nil {
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
		if err := tx.QueryRowContext(ctx, sqlstore.SessionExistsSQL, sessionID).Scan(&one); err != nil {
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
	return s.queryEvents(ctx, sessionID, `SELECT body_json FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
		sessionID, after, limit)
}

// TailEvents returns the last limit events of a session, in order.
func (s *Store) TailEvents(ctx context.Context, sessionID string, limit int) ([]api.Event, error) {
	return s.queryEvents(ctx, sessionID, `SELECT body_json FROM (SELECT seq, body_json FROM events WHERE session_id = $1
		ORDER BY seq DESC LIMIT $2) ORDER BY seq`, sessionID, max(limit, 0))
}

// queryEvents runs a query of events' body_json.
func (s *Store) queryEvents(ctx context.Context, sessionID, query string, args ...any) ([]api.Event, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	out, err := collect(rows, err, sqlstore.ScanEvent)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list events %s: %w", sessionID, err)
	}
	return out, nil
}

// ListCalls returns every call of a session in Seq order.
func (s *Store) ListCalls(ctx context.Context, sessionID string) ([]store.Call, error) {
	rows, err := s.r.QueryContext(ctx, sqlstore.ListCallsSQL, sessionID)
	out, err := collect(rows, err, sqlstore.ScanCall)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list calls %s: %w", sessionID, err)
	}
	return out, nil
}
