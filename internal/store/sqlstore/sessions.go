package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// CreateSession inserts a session, its queue entry (when e is not nil) and
// its first events in one transaction, writing the assigned Rev into e and
// Seq and SessionID into events. The writes go in one batch.
func (s *Store) CreateSession(ctx context.Context, sess store.Session, e *store.QueueEntry, events []api.Event) error {
	var entry store.QueueEntry
	err := s.db.Write(ctx, nil, func(tx Tx) error {
		b := &Batch{}
		args, err := SessionArgs(&sess, s.keys)
		if err != nil {
			return err
		}
		b.Exec(InsertSessionSQL, args...)
		data, err := store.WebhookSessionData(sess, e)
		if err != nil {
			return fmt.Errorf("webhook data: %w", err)
		}
		queueWebhookEvents(b, []store.WebhookEvent{{ID: store.NewWebhookEventID(), Name: api.EventSessionCreated,
			OutpostID: sess.OutpostID, Data: data, CreatedAt: sess.CreatedAt, OrderKey: sess.ID}})
		// A new session has no events yet (were it not new, the insert
		// fails).
		if err := s.queueEvents(b, sess.ID, 0, events); err != nil {
			return err
		}
		if e != nil {
			entry = *e
			entry.SessionID = sess.ID
			s.db.QueueUpsertEntry(b, &entry)
			s.db.QueueNotify(b, sess.ID, sess.OutpostID, int64(len(events)), &entry)
		}
		return tx.SendLast(ctx, b)
	})
	if err != nil {
		return s.errorf(err, "create session %s", sess.ID)
	}
	if e != nil {
		*e = entry
	} else if len(events) > 0 {
		s.db.Appended(sess.ID, sess.OutpostID, int64(len(events)))
	}
	return nil
}

// GetSession returns one session.
func (s *Store) GetSession(ctx context.Context, id string) (store.Session, error) {
	sess, err := ScanSession(s.db.QueryRow(ctx, GetSessionSQL, id), s.keys)
	if err != nil {
		return store.Session{}, s.errorf(err, "get session %s", id)
	}
	return sess, nil
}

// ListSessions returns a page of sessions, newest first, and the number of
// sessions matching f's OutpostID, Status and Title. A Limit of 0 means no cap.
func (s *Store) ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, int, error) {
	q := s.d.ListSessions(f)
	var out []store.Session
	var total int
	err := s.db.Read(ctx, func(tx Tx) error {
		if err := tx.QueryRow(ctx, q.Count, q.CountArgs...).Scan(&total); err != nil {
			return err
		}
		var err error
		out, err = QueryAll(ctx, tx, func(sc Scanner) (store.Session, error) { return ScanSession(sc, s.keys) }, q.Page, q.PageArgs...)
		return err
	})
	if err != nil {
		return nil, 0, s.errorf(err, "list sessions")
	}
	return out, total, nil
}

// UpdateSession runs fn on the current session and queue entry inside one
// write transaction that holds the session's lock (its row's on
// PostgreSQL, the one writer on SQLite), then writes the Mutation fn
// returns. A session without a queue entry is passed a zero entry with
// only SessionID set. An error from fn rolls back and is returned as is.
// The session, entry, calls and connect tokens of the mutation are bound
// to id.
//
// fn must be quick and must not call the Store's write methods (on SQLite
// it runs on the one writer, which would deadlock), and must keep no
// effects of a try that did not commit: on a serialization failure or a
// deadlock PostgreSQL's transaction, fn included, is tried again (a
// bounded number of times).
func (s *Store) UpdateSession(ctx context.Context, id string, fn func(store.Session, store.QueueEntry) (store.Mutation, error)) (store.Mutation, error) {
	return s.update(ctx, nil, &id, time.Time{}, "", false, func(sess store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
		return fn(sess, e)
	})
}

// ClaimSession is UpdateSession whose fn also gets the load of the
// session's outpost at now. Claims of an outpost with a max_running limit
// are serialized (by the outpost row's lock on PostgreSQL, taken after the
// session's; by the one writer on SQLite), so each counts the claims the
// ones before it committed. Claims of an outpost without a limit take no
// lock of the outpost: they count nothing, and a limit set meanwhile
// orders them before it.
//
// The claim reads tokenID's row first, under the dialect's Lock.Token
// (tried shared; RevokeToken takes it exclusive), so a revocation and a
// claim with its token are ordered: the claim either commits first, and
// the revocation's release finds it, or reads the token revoked.
func (s *Store) ClaimSession(ctx context.Context, id string, now time.Time, tokenID string, fn func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error) {
	return s.update(ctx, nil, &id, now, tokenID, true, fn)
}

// ClaimNext is ClaimSession of the outpost's first claimable entry, picked
// in the same transaction so that concurrent calls never pick the same
// entry. On PostgreSQL the pick locks the entry's session row FOR UPDATE
// SKIP LOCKED, the lock every writer of a session takes first, so none
// waits for another's; an entry claimed by id meanwhile is still pending in
// the pick's snapshot, and fn sees it as it is once locked. On SQLite the
// one writer orders the pick after every other transaction.
func (s *Store) ClaimNext(ctx context.Context, outpostID string, now time.Time, tokenID string, f store.NextFilter, fn func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error) {
	q, args := s.d.ClaimNextSQL(outpostID, f, s.d.Lock.Pick)
	var id string
	pick := func(b *Batch) {
		id = ""
		q, args := q, args
		if len(b.Skip) > 0 {
			// Entries claimed earlier in a shared transaction still look
			// pending: their writes wait for its commit.
			f := f
			f.Exclude = append(slices.Clip(f.Exclude), b.Skip...)
			q, args = s.d.ClaimNextSQL(outpostID, f, s.d.Lock.Pick)
		}
		b.QueryRow(func(row Scanner) error { return row.Scan(&id) }, q, args...)
	}
	m, err := s.update(ctx, pick, &id, now, tokenID, true, fn)
	if err != nil && id == "" && errors.Is(err, store.ErrNotFound) {
		return store.Mutation{}, fmt.Errorf("%s: claim the next session of outpost %s: %w", s.name, outpostID, store.ErrNotFound)
	}
	return m, err
}

// NextSkippedLocked reports whether an entry ClaimNext with f could pick
// is claimable now, locked by another transaction or not; always false on
// a dialect whose picks lock nothing (SQLite), where they skip nothing.
func (s *Store) NextSkippedLocked(ctx context.Context, outpostID string, f store.NextFilter) (bool, error) {
	if s.d.Lock.Pick == "" {
		return false, nil
	}
	q, args := s.d.ClaimNextSQL(outpostID, f, "")
	var id string
	switch err := s.db.QueryRow(ctx, q, args...).Scan(&id); {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, s.errorf(err, "look for claimable entries of outpost %s", outpostID)
	}
	return true, nil
}

// update is UpdateSession and, with claim, ClaimSession of session *idp
// or, with pick, of the session whose id pick's statement (the first of
// the transaction) stores in *idp. A claim checks tokenID (ClaimSession).
func (s *Store) update(ctx context.Context, pick func(*Batch), idp *string, now time.Time, tokenID string, claim bool,
	fn func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error) {
	// What the transaction reads and fn returns, kept in one value: the
	// callbacks below share it, so it is one allocation, not one a
	// variable.
	var u struct {
		id      string
		m       store.Mutation
		load    store.OutpostLoad
		limited bool
		fnErr   error
		// tokenLocked: the claim holds its token's lock (or the dialect
		// orders claims and revocations without one).
		tokenLocked bool
		sess        store.Session
		e           store.QueueEntry
		seq         int64
		// seqRead: seq was read with the first batch (a claim's reads),
		// not to be read on demand.
		seqRead bool
		// noHooks: the claim's reads found no enabled webhook, so the
		// write emits no delivery.
		noHooks bool
		tokens  tokenEpochs
	}
	// The first batch begins the transaction and takes the session row's
	// lock, which orders it after every other writer of the session; the
	// statements after it, each with a snapshot taken once the lock is
	// held, see what those writers committed. What fn sees stays current
	// until commit.
	first := func(b *Batch) {
		u.id = *idp
		u.fnErr = nil
		if claim && tokenID != "" {
			// First, so that a refused token is the answer for any
			// session id, present or not, visible to the token or not.
			u.tokenLocked = s.d.Lock.Token == nil
			if !u.tokenLocked {
				q, args := s.d.Lock.Token(tokenID, TokenTryShared)
				b.QueryRow(func(row Scanner) error { return row.Scan(&u.tokenLocked) }, q, args...)
			}
			s.queueTokenRead(b, tokenID, now, func(bad error) {
				if u.tokenLocked {
					u.fnErr = bad
				}
			})
		}
		b.QueryRow(func(row Scanner) (err error) {
			u.sess, err = ScanState(row)
			return err
		}, s.sql.getStateLocked, u.id)
		u.seq, u.seqRead, u.noHooks, u.tokens = 0, false, false, tokenEpochs{}
		if claim {
			// A claim nearly always appends events: its entry comes with
			// its seq, the outpost's limit and desktop and what decides
			// its webhook and token writes, in one statement.
			u.load, u.limited = store.OutpostLoad{}, false
			b.QueryRow(func(row Scanner) error {
				var limit sql.NullInt64 // NULL: no outpost, no limit to hold
				var desktop sql.NullString
				var hooks int
				var oldest sql.NullInt64 // NULL: no connect tokens
				var err error
				u.e, err = ScanEntry(scanAlso{row, []any{&u.seq, &limit, &desktop, &hooks, &oldest}})
				if errors.Is(err, sql.ErrNoRows) {
					// No entry: the seq is read on demand, and the
					// hooks and tokens are written as if unknown.
					u.e = store.QueueEntry{SessionID: u.id}
					return nil
				}
				if err != nil {
					return err
				}
				u.seqRead, u.noHooks = true, hooks == 0
				u.tokens = tokenEpochs{known: true, any: oldest.Valid, oldest: oldest.Int64}
				u.load.MaxRunning = int(limit.Int64)
				u.limited = u.load.MaxRunning > 0
				d, err := ScanDesktop(desktop)
				if err != nil {
					return fmt.Errorf("outpost desktop: %w", err)
				}
				u.load.Desktop = d
				return nil
			}, ClaimEntrySQL, u.id)
			return
		}
		// Where the first reads go in one round trip, an update's seq
		// comes with its entry, in one statement; a session without an
		// entry row reads it on demand.
		entrySQL, withSeq := GetEntrySQL, !s.d.SeqOnDemand
		if withSeq {
			entrySQL = GetEntrySeqSQL
		}
		b.QueryRow(func(row Scanner) (err error) {
			if withSeq {
				row = scanAlso{row, []any{&u.seq}}
			}
			u.e, err = ScanEntry(row)
			if errors.Is(err, sql.ErrNoRows) {
				u.e, err = store.QueueEntry{SessionID: u.id}, nil
				return err
			}
			if withSeq {
				u.seqRead = err == nil
			}
			return err
		}, entrySQL, u.id)
	}
	begin, body := first, func(Tx) error { return nil }
	if pick != nil {
		// The pick comes first; the session's reads follow once its id is
		// known.
		begin, body = pick, func(tx Tx) error {
			b := &Batch{}
			first(b)
			return tx.Send(ctx, b)
		}
	}
	write := s.db.Write
	if gw, ok := s.db.(ClaimWriter); ok {
		// A claim (and, where the plugin groups them, any update of a
		// session) may share its transaction, and its commit, with the
		// ones waiting at the same moment (PostgreSQL's combiner); the
		// session it locks first is named when known before the pick.
		lockID := ""
		if pick == nil {
			lockID = *idp
		}
		write = func(ctx context.Context, first func(*Batch), fn func(Tx) error) error {
			return gw.WriteClaim(ctx, lockID, claim, first, fn)
		}
	}
	err := write(ctx, begin, func(tx Tx) error {
		if err := body(tx); err != nil {
			return err
		}
		if u.fnErr != nil {
			return u.fnErr // the claimer's token is no longer valid
		}
		if claim && tokenID != "" && !u.tokenLocked {
			// A revocation of the token holds or waits for its lock, so
			// the read above is not ordered with it: read it again under
			// the lock, which a claim in a shared transaction must not
			// wait for (the group holds other claims' locks meanwhile).
			if g, ok := tx.(Grouped); ok && g.Grouped() {
				return ErrRunAlone
			}
			b := &Batch{}
			q, args := s.d.Lock.Token(tokenID, TokenShared)
			b.Exec(q, args...)
			s.queueTokenRead(b, tokenID, now, func(bad error) { u.fnErr = bad })
			if err := tx.Send(ctx, b); err != nil {
				return err
			}
			if u.fnErr != nil {
				return u.fnErr
			}
		}
		if u.limited {
			if g, ok := tx.(Grouped); ok && g.Grouped() && g.Defers(u.e.OutpostID) {
				// A claim of the outpost earlier in the shared
				// transaction is not written yet, so the count below
				// would miss it.
				return ErrRunAlone
			}
			// The outpost has a limit: its row is locked (where the
			// dialect locks rows) and the limit read again under the
			// lock, then the claims committed before this one are all
			// counted. Only claims of limited outposts wait for each
			// other here.
			b := &Batch{Items: make([]BatchItem, 0, 2)}
			if s.d.Lock.Outpost != "" {
				b.QueryRow(func(row Scanner) error {
					err := row.Scan(&u.load.MaxRunning)
					if errors.Is(err, sql.ErrNoRows) {
						u.load.MaxRunning, err = 0, nil // the outpost is gone: no limit to hold
					}
					return err
				}, s.outpostLimitSQL(tx), u.e.OutpostID)
			}
			b.QueryRow(func(row Scanner) error {
				if err := row.Scan(&u.load.Held); err != nil {
					return fmt.Errorf("count held claims: %w", err)
				}
				return nil
			}, s.heldClaimsSQL(), u.e.OutpostID, api.PhaseClaimed, now.UnixMilli(), u.id)
			if err := tx.Send(ctx, b); err != nil {
				return err
			}
		}
		u.fnErr = nil
		if u.m, u.fnErr = fn(u.sess, u.e, u.load); u.fnErr != nil {
			return u.fnErr
		}
		if !u.seqRead && len(u.m.Events) > 0 {
			// Most updates append no event; the dialect reads the seq
			// only for those that do.
			if err := tx.QueryRow(ctx, MaxEventSeqSQL, u.id).Scan(&u.seq); err != nil {
				return fmt.Errorf("max event seq: %w", err)
			}
		}
		var hooks []store.WebhookEvent
		if !u.noHooks {
			// A webhook created meanwhile may miss this change, as one
			// created between the emit and the commit would: a
			// subscription sees the changes that commit after it did.
			var err error
			if hooks, err = sessionWebhookEvents(u.sess, u.e, &u.m, time.Now()); err != nil {
				return err
			}
		}
		return s.applyMutation(ctx, tx, u.id, u.seq, u.e.OutpostID, u.tokens, &u.m, hooks)
	})
	if u.fnErr != nil {
		return store.Mutation{}, u.fnErr
	}
	if err != nil {
		return store.Mutation{}, s.errorf(err, "update session %s", u.id)
	}
	if n := len(u.m.Events); n > 0 && u.m.Entry == nil {
		s.db.Appended(u.id, u.e.OutpostID, u.m.Events[n-1].Seq)
	}
	return u.m, nil
}

// queueTokenRead queues a claim's read of the token it was asked with;
// bad gets store.ErrTokenRevoked (wrapped) when the token is revoked,
// expired at now or gone, else nil.
func (s *Store) queueTokenRead(b *Batch, tokenID string, now time.Time, bad func(error)) {
	b.QueryRow(func(row Scanner) error {
		var revoked, expires sql.NullInt64
		err := row.Scan(&revoked, &expires)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			bad(fmt.Errorf("%w: token %s does not exist", store.ErrTokenRevoked, tokenID))
		case err != nil:
			return fmt.Errorf("read the claimer's token: %w", err)
		case revoked.Valid:
			bad(fmt.Errorf("%w: token %s was revoked", store.ErrTokenRevoked, tokenID))
		case expires.Valid && now.UnixMilli() >= expires.Int64:
			bad(fmt.Errorf("%w: token %s has expired", store.ErrTokenRevoked, tokenID))
		default:
			bad(nil)
		}
		return nil
	}, ClaimTokenSQL, tokenID)
}

// scanAlso scans a row's columns into the caller's destinations, then
// its last ones into also.
type scanAlso struct {
	Scanner
	also []any
}

func (s scanAlso) Scan(dest ...any) error { return s.Scanner.Scan(append(dest, s.also...)...) }

// outpostLimitSQL is the locking read of an outpost's limit in tx: in a
// transaction shared by several claims (Grouped), one that fails at once
// (NOWAIT) rather than waits for a lock another transaction holds, as the
// shared transaction may hold the rev counter's lock by then.
func (s *Store) outpostLimitSQL(tx Tx) string {
	if g, ok := tx.(Grouped); ok && g.Grouped() && s.d.Lock.Outpost != "" {
		return s.sql.outpostLimitLocked + " NOWAIT"
	}
	return s.sql.outpostLimitLocked
}

// heldClaimsSQL is the dialect's HeldClaimsSQL.
func (s *Store) heldClaimsSQL() string { return s.sql.heldClaims }

// applyMutation writes m for session id of outpost outpostID, whose
// highest event seq is seq (0 when the dialect reads it on demand and m
// appends no events) and whose stored connect tokens are as tokens says,
// in one batch, assigning revs and seqs into m. The queue entry is written
// last but for its notification: its rev locks the global counter.
//
// The deliveries of hooks, the webhook events of the write, go in the same
// batch: the outbox commits with the change it reports.
func (s *Store) applyMutation(ctx context.Context, tx Tx, id string, seq int64, outpostID string, tokens tokenEpochs, m *store.Mutation, hooks []store.WebhookEvent) error {
	// Sized for every statement m can take (state, events, calls, tokens,
	// the entry's four), so queueing never grows it.
	b := &Batch{Items: make([]BatchItem, 0, 5+len(m.Events)+len(m.Calls)+len(m.ConnectTokens))}
	if m.Session != nil {
		m.Session.ID = id
		args, err := StateArgs(m.Session)
		if err != nil {
			return err
		}
		// The transaction read the row (locked, on PostgreSQL) before fn:
		// it is there, and the update changes it. No Affected check, so
		// the batch can go with the commit.
		b.Exec(UpdateStateSQL, args...)
	}
	if err := s.queueEvents(b, id, seq, m.Events); err != nil {
		return err
	}
	for i := range m.Calls {
		c := &m.Calls[i]
		c.SessionID = id
		b.Exec(UpsertCallSQL, CallArgs(c)...)
	}
	for i := range m.ConnectTokens {
		ct := &m.ConnectTokens[i]
		ct.SessionID = id
		b.Exec(InsertConnectTokenSQL, ct.Hash, id, ct.Epoch, MS(ct.CreatedAt))
	}
	queueWebhookEvents(b, hooks)
	if m.Entry != nil {
		m.Entry.SessionID = id
		if tokens.olderThan(m.Entry.Epoch, m.ConnectTokens) {
			b.Exec(PruneConnectTokensSQL, id, m.Entry.Epoch)
		}
		s.db.QueueUpsertEntry(b, m.Entry)
	}
	if b.Len() == 0 {
		return nil
	}
	if m.Entry != nil {
		s.db.QueueNotify(b, id, outpostID, seq+int64(len(m.Events)), m.Entry)
	}
	// The last statements, with the commit where the plugin can: the rev
	// counter's lock is held for no round trip of its own.
	return tx.SendLast(ctx, b)
}

// tokenEpochs is what a transaction read of its session's connect
// tokens, under the session's lock (every writer of them holds it).
type tokenEpochs struct {
	known  bool  // read; when not, any token may be there
	any    bool  // the session has tokens
	oldest int64 // the lowest epoch of its tokens
}

// olderThan reports whether the session may hold connect tokens of an
// epoch before epoch once added are written: a write of its entry at
// epoch deletes them then, and otherwise has nothing to delete.
func (t tokenEpochs) olderThan(epoch int64, added []store.ConnectToken) bool {
	if !t.known || t.any && t.oldest < epoch {
		return true
	}
	for _, ct := range added {
		if ct.Epoch < epoch {
			return true
		}
	}
	return false
}

// queueEvents queues into b the append of events to a transcript whose
// highest stored Seq is seq, numbering them and writing Seq and SessionID
// back. The caller holds the session's lock (or is creating its row), so
// no other transaction numbers the same transcript meanwhile.
func (s *Store) queueEvents(b *Batch, sessionID string, seq int64, events []api.Event) error {
	if len(events) == 0 {
		return nil
	}
	seqs := make([]int64, len(events))
	bodies := make([]string, len(events))
	for i := range events {
		seq++
		events[i].Seq, events[i].SessionID = seq, sessionID
		body, err := Marshal(events[i])
		if err != nil {
			return fmt.Errorf("event %d: %w", seq, err)
		}
		seqs[i], bodies[i] = seq, body
	}
	s.db.QueueInsertEvents(b, sessionID, seqs, bodies)
	return nil
}

// AppendEvents appends events to a session's transcript in one transaction,
// writing the assigned Seq and SessionID back into events.
// store.ErrNotFound when the session is absent.
func (s *Store) AppendEvents(ctx context.Context, sessionID string, events []api.Event) error {
	if len(events) == 0 {
		// Nothing to write; still say whether the session exists.
		var one int
		if err := s.db.QueryRow(ctx, SessionExistsSQL, sessionID).Scan(&one); err != nil {
			return s.errorf(err, "append events %s", sessionID)
		}
		return nil
	}
	// What the first batch reads, in one value the callbacks share (one
	// allocation, not one a variable).
	var r struct {
		one int
		seq int64
	}
	first := func(b *Batch) {
		b.QueryRow(func(row Scanner) error { return row.Scan(&r.one) }, s.sql.sessionExistsLocked, sessionID)
		b.QueryRow(func(row Scanner) error { return row.Scan(&r.seq) }, MaxEventSeqSQL, sessionID)
	}
	err := s.db.Write(ctx, first, func(tx Tx) error {
		b := &Batch{Items: make([]BatchItem, 0, 1)}
		if err := s.queueEvents(b, sessionID, r.seq, events); err != nil {
			return err
		}
		return tx.SendLast(ctx, b)
	})
	if err != nil {
		return s.errorf(err, "append events %s", sessionID)
	}
	s.db.Appended(sessionID, "", events[len(events)-1].Seq)
	return nil
}

// ListEvents returns up to limit events with Seq > after, in order; a limit
// of 0 or less means no cap.
func (s *Store) ListEvents(ctx context.Context, sessionID string, after int64, limit int) ([]api.Event, error) {
	return s.queryEvents(ctx, sessionID, `SELECT body_json FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
		sessionID, after, s.limit(limit))
}

// TailEvents returns the last limit events of a session, in order.
func (s *Store) TailEvents(ctx context.Context, sessionID string, limit int) ([]api.Event, error) {
	return s.queryEvents(ctx, sessionID, `SELECT body_json FROM (SELECT seq, body_json FROM events WHERE session_id = $1
		ORDER BY seq DESC LIMIT $2) AS tail ORDER BY seq`, sessionID, int64(max(limit, 0)))
}

// limit is the LIMIT argument of n rows; a cap of 0 or less is none.
func (s *Store) limit(n int) any {
	if n <= 0 {
		return s.d.NoLimit
	}
	return int64(n)
}

// queryEvents runs a query of events' body_json.
func (s *Store) queryEvents(ctx context.Context, sessionID, query string, args ...any) ([]api.Event, error) {
	out, err := QueryAll(ctx, s.db, ScanEvent, query, args...)
	if err != nil {
		return nil, s.errorf(err, "list events %s", sessionID)
	}
	return out, nil
}

// ListCalls returns every call of a session in Seq order.
func (s *Store) ListCalls(ctx context.Context, sessionID string) ([]store.Call, error) {
	out, err := QueryAll(ctx, s.db, ScanCall, ListCallsSQL, sessionID)
	if err != nil {
		return nil, s.errorf(err, "list calls %s", sessionID)
	}
	return out, nil
}
