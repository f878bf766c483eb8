package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// queueUpdateState queues into b the write of the columns of s that change
// after creation.
func queueUpdateState(b *pgx.Batch, s *store.Session) error {
	args, err := sqlstore.StateArgs(s)
	if err != nil {
		return err
	}
	b.Queue(sqlstore.UpdateStateSQL, args...).Exec(func(tag pgconn.CommandTag) error { return mustAffect(tag, nil) })
	return nil
}

// queueInsertSession queues into b the insert of s, its secrets sealed
// with keys.
func queueInsertSession(b *pgx.Batch, s *store.Session, keys *sealed.Keyring) error {
	args, err := sqlstore.SessionArgs(s, keys)
	if err != nil {
		return err
	}
	b.Queue(sqlstore.InsertSessionSQL, args...)
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
			queueUpsertEntry(b, &entry) // it locks the rev counter
			s.queueNotify(b, sess.ID, sess.OutpostID, int64(len(events)), &entry)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("postgres: create session %s: %w", sess.ID, mapErr(err))
	}
	if e != nil {
		*e = entry
	} else if len(events) > 0 {
		s.late.add(sess.ID, sess.OutpostID, int64(len(events)))
	}
	return nil
}

// GetSession returns one session.
func (s *Store) GetSession(ctx context.Context, id string) (store.Session, error) {
	sess, err := sqlstore.ScanSession(s.pool.QueryRow(ctx, sqlstore.GetSessionSQL, id), s.keys)
	if err != nil {
		return store.Session{}, fmt.Errorf("postgres: get session %s: %w", id, mapErr(err))
	}
	return sess, nil
}

// ListSessions returns a page of sessions, newest first, and the number of
// sessions matching f's OutpostID, Status and Title. A Limit of 0 means no cap.
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, int, error) {
	q := dialect.ListSessions(f)
	var out []store.Session
	var total int
	err := s.read(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, q.Count, q.CountArgs...).Scan(&total); err != nil {
			return err
		}
		var err error
		out, err = collect(func(sc sqlstore.Scanner) (store.Session, error) { return sqlstore.ScanSession(sc, s.keys) })(tx.Query(ctx, q.Page, q.PageArgs...))
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
	return s.update(ctx, id, time.Time{}, false, func(sess store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
		return fn(sess, e)
	})
}

// ClaimSession is UpdateSession whose fn also gets the load of the
// session's outpost at now. After the session's row it locks its outpost's
// row, so claims of one outpost are serialized and each counts the claims
// the ones before it committed.
func (s *Store) ClaimSession(ctx context.Context, id string, now time.Time, fn func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error) {
	return s.update(ctx, id, now, true, fn)
}

var heldClaimsSQL = dialect.HeldClaimsSQL()

// ClaimNext is ClaimSession of the outpost's first
// claimable entry. The pick locks the entry's session row FOR UPDATE SKIP
// LOCKED, the lock every writer of a session takes first, so concurrent
// calls pick different entries and none waits for another's; an entry
// claimed by id meanwhile is still pending in the pick's snapshot, and fn
// sees it as it is once locked.
func (s *Store) ClaimNext(ctx context.Context, outpostID string, now time.Time, f store.NextFilter, fn func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error) {
	q, args := dialect.ClaimNextSQL(outpostID, f, "FOR UPDATE OF s SKIP LOCKED")
	var id string
	pick := func(b *pgx.Batch) {
		id = ""
		b.Queue(q, args...).QueryRow(func(row pgx.Row) error { return row.Scan(&id) })
	}
	m, err := s.updatePicked(ctx, pick, &id, now, true, fn)
	if err != nil && id == "" && errors.Is(err, store.ErrNotFound) {
		return store.Mutation{}, fmt.Errorf("postgres: claim the next session of outpost %s: %w", outpostID, store.ErrNotFound)
	}
	return m, err
}

// update is UpdateSession and, with claim, ClaimSession.
func (s *Store) update(ctx context.Context, id string, now time.Time, claim bool,
	fn func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error) {
	return s.updatePicked(ctx, nil, &id, now, claim, fn)
}

// updatePicked is update of session *id or, with pick, of the session
// whose id pick's statement (the first of the transaction) stores in *id.
func (s *Store) updatePicked(ctx context.Context, pick func(b *pgx.Batch), idp *string, now time.Time, claim bool,
	fn func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error) {
	var id string
	var m store.Mutation
	var load store.OutpostLoad
	var limited bool
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
		id = *idp
		b.Queue(sqlstore.GetStateSQL+` FOR UPDATE`, id).QueryRow(func(row pgx.Row) (err error) {
			sess, err = sqlstore.ScanState(row)
			return err
		})
		b.Queue(sqlstore.GetEntrySQL, id).QueryRow(func(row pgx.Row) (err error) {
			e, err = sqlstore.ScanEntry(row)
			if errors.Is(err, pgx.ErrNoRows) {
				e, err = store.QueueEntry{SessionID: id}, nil
			}
			return err
		})
		b.Queue(sqlstore.MaxEventSeqSQL, id).QueryRow(func(row pgx.Row) error {
			return row.Scan(&seq)
		})
		if claim {
			load, limited = store.OutpostLoad{}, false
			b.Queue(sqlstore.OutpostLimitsSQL+` FOR UPDATE OF o`, id).QueryRow(func(row pgx.Row) error {
				err := row.Scan(&load.MaxRunning)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil // no entry or no outpost: no limit to hold
				}
				limited = err == nil && load.MaxRunning > 0
				return err
			})
		}
	}
	begin, body := first, func(tx pgx.Tx) error { return nil }
	if pick != nil {
		// The pick's round trip comes first; the session's reads follow
		// once its id is known.
		begin, body = pick, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			first(b)
			return tx.SendBatch(ctx, b).Close()
		}
	}
	err := s.writeBatch(ctx, begin, func(tx pgx.Tx) error {
		if err := body(tx); err != nil {
			return err
		}
		if limited {
			// The outpost's row is locked: the claims committed before
			// this one are all counted.
			if err := tx.QueryRow(ctx, heldClaimsSQL, e.OutpostID, api.PhaseClaimed, now.UnixMilli(), id).Scan(&load.Held); err != nil {
				return fmt.Errorf("count held claims: %w", err)
			}
		}
		fnErr = nil
		if m, fnErr = fn(sess, e, load); fnErr != nil {
			return fnErr
		}
		return s.applyMutation(ctx, tx, id, seq, e.OutpostID, &m)
	})
	if fnErr != nil {
		return store.Mutation{}, fnErr
	}
	if err != nil {
		return store.Mutation{}, fmt.Errorf("postgres: update session %s: %w", id, mapErr(err))
	}
	if n := len(m.Events); n > 0 && m.Entry == nil {
		s.late.add(id, e.OutpostID, m.Events[n-1].Seq)
	}
	return m, nil
}

// applyMutation writes m for session id of outpost outpostID, whose
// highest event seq is seq, in one round trip, assigning revs and seqs into
// m. The queue entry is written last but for its notification: its rev
// locks the global counter.
func (s *Store) applyMutation(ctx context.Context, tx pgx.Tx, id string, seq int64, outpostID string, m *store.Mutation) error {
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
		b.Queue(sqlstore.UpsertCallSQL, sqlstore.CallArgs(c)...)
	}
	for i := range m.ConnectTokens {
		ct := &m.ConnectTokens[i]
		ct.SessionID = id
		b.Queue(sqlstore.InsertConnectTokenSQL, ct.Hash, id, ct.Epoch, sqlstore.MS(ct.CreatedAt))
	}
	if m.Entry != nil {
		m.Entry.SessionID = id
		b.Queue(sqlstore.PruneConnectTokensSQL, id, m.Entry.Epoch)
		queueUpsertEntry(b, m.Entry)
	}
	if b.Len() == 0 {
		return nil
	}
	if m.Entry != nil {
		s.queueNotify(b, id, outpostID, seq+int64(len(m.Events)), m.Entry)
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
		body, err := sqlstore.Marshal(events[i])
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
		err := s.pool.QueryRow(ctx, sqlstore.SessionExistsSQL, sessionID).Scan(&one)
		if err != nil {
			return fmt.Errorf("postgres: append events %s: %w", sessionID, mapErr(err))
		}
		return nil
	}
	var seq int64
	first := func(b *pgx.Batch) {
		b.Queue(sqlstore.SessionExistsSQL+` FOR UPDATE`, sessionID).QueryRow(func(row pgx.Row) error {
			var one int
			return row.Scan(&one)
		})
		b.Queue(sqlstore.MaxEventSeqSQL, sessionID).QueryRow(func(row pgx.Row) error {
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
	s.late.add(sessionID, "", events[len(events)-1].Seq)
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
	out, err := collect(sqlstore.ScanEvent)(s.pool.Query(ctx, query, args...))
	if err != nil {
		return nil, fmt.Errorf("postgres: list events %s: %w", sessionID, err)
	}
	return out, nil
}

// ListCalls returns every call of a session in Seq order.
func (s *Store) ListCalls(ctx context.Context, sessionID string) ([]store.Call, error) {
	out, err := collect(sqlstore.ScanCall)(s.pool.Query(ctx, sqlstore.ListCallsSQL, sessionID))
	if err != nil {
		return nil, fmt.Errorf("postgres: list calls %s: %w", sessionID, err)
	}
	return out, nil
}
