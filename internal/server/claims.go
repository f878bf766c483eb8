package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/loop"
	"github.com/outpost-sh/outpost/internal/store"
)

// The session state machine. Every transition is one store transaction
// (UpdateSession) whose function decides from the current rows; nothing is
// read and then written without that guard.

// errGone is returned from transitions on a missing or deleted entry.
var errGone = errors.New("queue entry is gone")

// claimResult is what a successful claim hands back.
type claimResult struct {
	entry   store.QueueEntry
	token   string
	renewed bool
}

// claim is the compare-and-swap on acceptor_id: it takes a free or lapsed
// entry, or renews the caller's own claim, and issues a fresh connect token.
func (s *Server) claim(ctx context.Context, sessionID, acceptor string) (claimResult, error) {
	c := s.newClaimTx(acceptor)
	m, err := s.store.ClaimSession(ctx, sessionID, c.now, c.fn)
	return s.claimed(ctx, c, m, err)
}

// claimTx is one claim's transaction function and what it found.
type claimTx struct {
	acceptor  string
	now       time.Time
	ttl       time.Duration // Options.ClaimTTL
	token     string
	res       claimResult
	queued    time.Time // when a session taken from the queue entered it
	exhausted bool      // a lapsed claim was the session's last attempt
	// check, when set, runs first on the entry fn sees; its error aborts.
	check func(e store.QueueEntry) error
	// keepEnded is Server.keepEnded: a lapse that ends the session keeps
	// its entry listed.
	keepEnded bool
}

func (s *Server) newClaimTx(acceptor string) *claimTx {
	return &claimTx{acceptor: acceptor, now: s.now(), ttl: s.opts.ClaimTTL, token: newSecret("opc_"), keepEnded: s.keepEnded()}
}

// fn is the claim's decision, run in the store's transaction (ClaimSession
// or ClaimNext).
func (c *claimTx) fn(sess store.Session, e store.QueueEntry, load store.OutpostLoad) (store.Mutation, error) {
	c.exhausted, c.res = false, claimResult{}
	sessionID, acceptor, now := e.SessionID, c.acceptor, c.now
	if c.check != nil {
		if err := c.check(e); err != nil {
			return store.Mutation{}, err
		}
	}
	if e.OutpostID == "" || e.Deleted {
		return store.Mutation{}, errGone
	}
	var m store.Mutation
	held := e.Held(now)
	switch e.SessionStatus {
	case api.QueueSessionSuspended, api.QueueSessionTerminated:
		// Never handed out; but its holder may keep renewing until
		// its remote has exited and it releases.
		if held && e.AcceptorID == acceptor {
			break
		}
		if e.SessionStatus == api.QueueSessionTerminated {
			return store.Mutation{}, errConflict("Session %s has ended and cannot be claimed; its entry stays listed, session_status terminated, until the ended-entry sweep removes it.", sessionID)
		}
		return store.Mutation{}, errConflict("Session %s is %s and cannot be claimed.", sessionID, e.SessionStatus)
	}
	if held && e.AcceptorID != acceptor {
		return store.Mutation{}, errConflict("Session %s is claimed by another acceptor.", sessionID)
	}
	c.queued = e.UpdatedAt // a pending entry's last change put it in the queue
	if e.Phase == api.PhaseClaimed && !held {
		// The previous holder's claim lapsed and the sweeper has not
		// seen it yet: requeue first, in this same transaction.
		c.queued = e.Expiry()
		if lapse(&sess, &e, now, &m, c.keepEnded) {
			c.exhausted = true
			m.Session, m.Entry = &sess, &e
			return m, nil
		}
	}
	c.res.renewed = held
	if !held && load.MaxRunning > 0 && load.Held >= load.MaxRunning {
		// The lapse above, if any, is rolled back with the claim: the
		// sweeper requeues it.
		return store.Mutation{}, errAtCapacity(sessionID, load)
	}
	if !held {
		e.Epoch++
		e.Phase = api.PhaseClaimed
		e.AcceptorID = acceptor
		e.LiveUntil = time.Time{} // no remote of this claim yet
		m.Events = append(m.Events, api.Event{Type: api.EventClaim, AcceptorID: acceptor, Time: now.UnixMilli(),
			Reason: fmt.Sprintf("Claimed by %s.", acceptor)})
		if sess.Status == api.StatusNew {
			sess.Status, sess.StatusDetail, sess.Reason = api.StatusClaimed, "", fmt.Sprintf("Claimed by %s; waiting for its remote to connect.", acceptor)
			m.Events = append(m.Events, statusEvent(sess, now))
		}
	}
	e.ClaimDeadline = now.Add(c.ttl)
	e.UpdatedAt = now
	sess.UpdatedAt = now
	m.Session, m.Entry = &sess, &e
	m.ConnectTokens = append(m.ConnectTokens, store.ConnectToken{Hash: hashSecret(c.token), SessionID: sessionID, Epoch: e.Epoch, CreatedAt: now})
	return m, nil
}

// claimed publishes a claim's transaction (m, err) and counts its outcome.
func (s *Server) claimed(ctx context.Context, c *claimTx, m store.Mutation, err error) (claimResult, error) {
	res := c.res
	if err != nil {
		outcome := "error"
		var he *httpError
		if errors.As(err, &he) && he.status == 409 {
			outcome = "conflict"
			if he.code == api.CodeOutpostAtCapacity {
				outcome = "at_capacity"
			}
		}
		s.metrics.claims.WithLabelValues(outcome).Inc()
		return res, err
	}
	sessionID := m.Entry.SessionID
	if c.exhausted {
		s.metrics.claims.WithLabelValues("lapsed").Inc()
		s.attemptsExhausted(ctx, sessionID, m)
		s.metrics.claims.WithLabelValues("conflict").Inc()
		return res, errConflict("Session %s ended: %s", sessionID, m.Session.Reason)
	}
	res.entry, res.token = *m.Entry, c.token
	if res.renewed {
		s.metrics.claims.WithLabelValues("renewed").Inc()
	} else {
		s.metrics.claims.WithLabelValues("claimed").Inc()
		s.observeQueueWait(ctx, res.entry.OutpostID, res.entry.Kind, c.now.Sub(c.queued))
	}
	s.committed(sessionID, m)
	return res, nil
}

// release gives a claim back. A finished session's entry stays listed as
// ended until the ended-entry sweep (endedentries.go); any other goes back
// to the queue at once.
// A non-empty reason says why, on the status and the transcript; with
// shutdown the claimer is stopping, and the release is no failed attempt.
func (s *Server) release(ctx context.Context, sessionID, acceptor, reason string, shutdown bool) (store.QueueEntry, error) {
	now := s.now()
	var ended bool // the release was the session's last attempt
	m, err := s.store.UpdateSession(ctx, sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		ended = false
		if e.OutpostID == "" || e.Deleted {
			return store.Mutation{}, errGone
		}
		// The holder may release after its deadline: until the sweeper
		// has requeued a lapsed claim, it is still the holder's to give.
		if e.Phase != api.PhaseClaimed || e.AcceptorID != acceptor {
			return store.Mutation{}, errConflict("Session %s is not claimed by %q (the claim may have lapsed or moved).", sessionID, acceptor)
		}
		var m store.Mutation
		why := fmt.Sprintf("Released by %s.", acceptor)
		if reason != "" {
			why = fmt.Sprintf("Released by %s: %s", acceptor, sentence(reason))
		}
		// A release with a reason of a session that is not over is a
		// failed attempt (its machine died or could not be provisioned);
		// one without, or from a claimer shutting down, is not.
		ended = requeue(&sess, &e, now, &m, why, reason != "" && !shutdown, s.keepEnded())
		m.Session, m.Entry = &sess, &e
		return m, nil
	})
	if err != nil {
		return store.QueueEntry{}, err
	}
	s.metrics.claims.WithLabelValues("released").Inc()
	if ended {
		s.attemptsExhausted(ctx, sessionID, m)
	} else {
		s.committed(sessionID, m)
		s.countAttempt(ctx, m, "released")
	}
	return *m.Entry, nil
}

// errAtCapacity is the 409 of a claim beyond its outpost's max_running.
func errAtCapacity(sessionID string, load store.OutpostLoad) error {
	return &httpError{http.StatusConflict, api.CodeOutpostAtCapacity, fmt.Sprintf(
		"Session %s waits in the queue: its outpost already has %d claimed sessions and its max_running is %d; claim again when one of them ends.",
		sessionID, load.Held, load.MaxRunning)}
}

// lapse requeues an entry whose claim ran out, a failed attempt. It reports
// whether that was the session's last attempt: it has ended in error. With
// keep an ended session's entry stays listed (endEntry).
func lapse(sess *store.Session, e *store.QueueEntry, now time.Time, m *store.Mutation, keep bool) (ended bool) {
	why := fmt.Sprintf("The claim of %s lapsed: no remote connected before its deadline and it was not renewed.", e.AcceptorID)
	if !e.LiveUntil.IsZero() {
		why = fmt.Sprintf("The claim of %s lapsed: its remote's connection was gone longer than the reconnect grace and the claim was not renewed.", e.AcceptorID)
	}
	return requeue(sess, e, now, m, why, true, keep)
}

// requeue ends the current claim. The old connect tokens die with the epoch.
// A finished session's entry is left ended (endEntry, with keep); a session
// that had started returns as kind resume; one that never started returns
// as new. A failed attempt (failed) of a session that is not over counts
// against its max_attempts: at the last one the session ends in error
// instead, listing each attempt's reason, and requeue reports it (ended).
func requeue(sess *store.Session, e *store.QueueEntry, now time.Time, m *store.Mutation, why string, failed, keep bool) (ended bool) {
	acceptor := e.AcceptorID
	e.Epoch++
	e.Phase = api.PhasePending
	e.AcceptorID = ""
	e.ClaimDeadline, e.LiveUntil = time.Time{}, time.Time{}
	e.UpdatedAt = now
	sess.UpdatedAt = now
	m.Events = append(m.Events, api.Event{Type: api.EventRelease, AcceptorID: acceptor, Time: now.UnixMilli(), Reason: why})
	if api.IsFinal(sess.Status) {
		endEntry(e, now, keep)
		return false
	}
	if sess.Status == api.StatusSuspended {
		// It waits for its resume (suspend.go), not for a machine: its
		// machine going away is what suspending meant, no failed attempt.
		e.Kind, e.SessionStatus = api.KindResume, api.QueueSessionSuspended
		return false
	}
	if failed {
		e.Attempts++
		e.AttemptReasons = append(e.AttemptReasons, why)
		if limit := maxAttempts(*e); e.Attempts >= limit {
			reason := attemptsReason(e.AttemptReasons, limit)
			sess.Status, sess.StatusDetail, sess.Reason = api.StatusError, api.DetailError, reason
			sess.EndedAt = &now
			endEntry(e, now, keep) // pending: nobody to release it
			m.Events = append(m.Events, statusEvent(*sess, now),
				api.Event{Type: api.EventEnd, Time: now.UnixMilli(), Status: sess.Status, StatusDetail: sess.StatusDetail, Reason: reason})
			return true
		}
	}
	if sess.StartedAt != nil {
		e.Kind = api.KindResume
		sess.Status, sess.StatusDetail = api.StatusResuming, api.DetailWaitingForMachine
		sess.Reason = why + " Waiting for another machine to resume the session."
	} else {
		sess.Status, sess.StatusDetail, sess.Reason = api.StatusNew, "", why+" Waiting in the queue."
	}
	e.SessionStatus = queueSessionStatus(sess.Status)
	m.Events = append(m.Events, statusEvent(*sess, now))
	return false
}

// maxAttempts is how many attempts the entry's session gets.
func maxAttempts(e store.QueueEntry) int {
	if e.MaxAttempts > 0 {
		return e.MaxAttempts
	}
	return api.DefaultMaxAttempts
}

// attemptsReason is the final reason of a session whose attempts ran out:
// every attempt's reason, in order.
func attemptsReason(reasons []string, limit int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The session ended after %d failed attempts (max_attempts %d): its machine died or could not be provisioned each time.", len(reasons), limit)
	for i, r := range reasons {
		fmt.Fprintf(&b, " Attempt %d: %s", i+1, sentence(r))
	}
	return b.String()
}

// attemptsExhausted publishes a transaction in which a session's last
// attempt failed and it ended: like commitEnd's aftermath, and the metrics.
func (s *Server) attemptsExhausted(ctx context.Context, sessionID string, m store.Mutation) {
	s.committed(sessionID, m)
	s.countAttempt(ctx, m, "exhausted")
	s.metrics.sessionsEnded.WithLabelValues(api.StatusError, api.DetailError).Inc()
	s.log.Info("session ended: its attempts ran out", "session", sessionID, "attempts", m.Entry.Attempts, "reason", m.Session.Reason)
	s.stopRunner(sessionID)
	s.hub.end(sessionID, m.Session.Reason)
}

// statusEvent records a session's current status on the transcript.
func statusEvent(sess store.Session, now time.Time) api.Event {
	return api.Event{Type: api.EventStatus, Time: now.UnixMilli(), Status: sess.Status, StatusDetail: sess.StatusDetail, Reason: sess.Reason}
}

// endSession moves a session to a final status. It is a no-op on a session
// that already ended. The remote is told to end; its claimer releases.
func (s *Server) endSession(ctx context.Context, sessionID, status, detail, reason string) error {
	after, err := s.commitEnd(ctx, sessionID, status, detail, reason)
	after()
	return err
}

// commitEnd is endSession's transaction. It returns what must follow it —
// stopping the runner and telling the remote to end, which may take seconds —
// so that a caller holding a lock over the transition can release it first.
// The returned func is never nil.
func (s *Server) commitEnd(ctx context.Context, sessionID, status, detail, reason string) (func(), error) {
	now := s.now()
	m, err := s.store.UpdateSession(ctx, sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if api.IsFinal(sess.Status) {
			return store.Mutation{}, nil
		}
		var m store.Mutation
		endRows(&sess, e, &m, now, status, detail, reason, s.keepEnded())
		return m, nil
	})
	if err != nil {
		return func() {}, fmt.Errorf("end session %s: %w", sessionID, err)
	}
	if m.Session == nil {
		return func() {}, nil
	}
	s.committed(sessionID, m)
	return s.ended(sessionID, status, detail, reason), nil
}

// endRows is the end of a session in a transaction that read sess and e:
// it adds to m the session's final status, its status and end events and,
// for a live entry, the entry marked terminated (a pending one, which
// nobody holds to release, left ended: endEntry with keep). commitEnd
// commits it alone; a session runner folds it into the transaction of the
// session's last result (one commit less per session).
func endRows(sess *store.Session, e store.QueueEntry, m *store.Mutation, now time.Time, status, detail, reason string, keep bool) {
	sess.Status, sess.StatusDetail, sess.Reason = status, detail, reason
	sess.UpdatedAt, sess.EndedAt = now, &now
	m.Session = sess
	m.Events = append(m.Events, statusEvent(*sess, now), api.Event{Type: api.EventEnd, Time: now.UnixMilli(), Status: status, StatusDetail: detail, Reason: reason})
	if e.OutpostID != "" && !e.Deleted {
		e.SessionStatus = api.QueueSessionTerminated
		e.UpdatedAt = now
		if e.Phase == api.PhasePending {
			endEntry(&e, now, keep) // nobody holds it: nothing to release
		}
		m.Entry = &e
	}
}

// endEntry leaves the pending entry of an ended session as clients of the
// fleet API expect to see it: listed, unclaimed, session_status
// terminated, so that a watcher learns the session ended (and cleans up
// what it keeps for it) before the entry goes. The ended-entry sweep
// deletes it after the retention; without keep it is deleted at once.
func endEntry(e *store.QueueEntry, now time.Time, keep bool) {
	e.SessionStatus = api.QueueSessionTerminated
	e.UpdatedAt = now
	e.Deleted = !keep
}

// ended follows a committed (and published) end of a session: it counts
// and logs it, and returns what must follow — stopping the runner and
// telling the remote to end.
func (s *Server) ended(sessionID, status, detail, reason string) func() {
	s.metrics.sessionsEnded.WithLabelValues(status, detail).Inc()
	s.log.Info("session ended", "session", sessionID, "status", status, "detail", detail, "reason", reason)
	return func() {
		s.stopRunner(sessionID) // first, so no call follows the end frame
		s.hub.end(sessionID, reason)
	}
}

// dropEntry deletes a session's queue entry whatever its claim.
func (s *Server) dropEntry(ctx context.Context, sessionID string) error {
	now := s.now()
	m, err := s.store.UpdateSession(ctx, sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if e.OutpostID == "" || e.Deleted {
			return store.Mutation{}, nil
		}
		e.Deleted, e.UpdatedAt = true, now
		e.Epoch++
		return store.Mutation{Entry: &e}, nil
	})
	if err != nil {
		return fmt.Errorf("drop queue entry %s: %w", sessionID, err)
	}
	s.committed(sessionID, m)
	return nil
}

// committed publishes what a transaction wrote: queue watchers wake, event
// followers get the events, and remotes of dead epochs are cut off.
func (s *Server) committed(sessionID string, m store.Mutation) {
	if m.Entry != nil {
		s.queueFeed.notify(m.Entry.OutpostID)
		s.hub.fence(sessionID, m.Entry.Epoch)
	}
	if len(m.Events) > 0 {
		s.topics.publish(sessionID, m.Events...)
	}
}

// sweep requeues lapsed claims, and every fifth round ends sessions past
// their limits, until ctx ends.
func (s *Server) sweep(ctx context.Context) {
	interval := max(min(s.opts.SweepInterval, s.opts.ClaimTTL/4), time.Millisecond)
	var lastLimits time.Time
	loop.Every(ctx, interval, func(ctx context.Context) {
		if now := s.now(); now.Sub(lastLimits) >= 5*s.opts.SweepInterval {
			lastLimits = now
			s.enforceLimits(ctx)
		}
		ids, err := s.store.LapsedClaims(ctx, s.now())
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("sweep lapsed claims", "err", err)
			}
			return
		}
		for _, id := range ids {
			if err := s.lapseClaim(ctx, id); err != nil && ctx.Err() == nil {
				s.log.Warn("requeue lapsed claim", "session", id, "err", err)
			}
		}
	})
}

// lapseClaim requeues one entry if its claim is still lapsed. A claim
// whose remote is connected to this server is kept instead: its keep-alive
// came late (a stalled disk, a busy machine), the remote is not gone.
func (s *Server) lapseClaim(ctx context.Context, sessionID string) error {
	if c := s.hub.get(sessionID); c != nil {
		lease := store.Lease{SessionID: sessionID, Epoch: c.epoch}
		if err := s.store.KeepAlive(ctx, s.now().Add(s.opts.ReconnectGrace), lease); err != nil {
			return fmt.Errorf("keep a connected remote's claim alive: %w", err)
		}
		s.log.Warn("a connected remote's claim was about to lapse (its keep-alive came late); kept", "session", sessionID)
	}
	now := s.now()
	var ended bool // the lapse was the session's last attempt
	m, err := s.store.UpdateSession(ctx, sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		ended = false
		if e.OutpostID == "" || e.Deleted || e.Phase != api.PhaseClaimed || e.Held(now) {
			return store.Mutation{}, nil
		}
		var m store.Mutation
		ended = lapse(&sess, &e, now, &m, s.keepEnded())
		m.Session, m.Entry = &sess, &e
		return m, nil
	})
	if err != nil {
		return err
	}
	switch {
	case m.Entry == nil:
	case ended:
		s.metrics.claims.WithLabelValues("lapsed").Inc()
		s.attemptsExhausted(ctx, sessionID, m)
	default:
		s.metrics.claims.WithLabelValues("lapsed").Inc()
		s.log.Info("claim lapsed; session requeued", "session", sessionID, "kind", m.Entry.Kind, "attempts", m.Entry.Attempts)
		s.committed(sessionID, m)
		s.countAttempt(ctx, m, "lapsed")
	}
	return nil
}

// enforceLimits ends sessions past limits.max_duration_s that no runner is
// watching (their remote is gone, or the server restarted meanwhile).
func (s *Server) enforceLimits(ctx context.Context) {
	ids, err := s.store.ActiveSessions(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("list active sessions", "err", err)
		}
		return
	}
	now := s.now()
	for _, id := range ids {
		sess, err := s.store.GetSession(ctx, id)
		if err != nil || sess.StartedAt == nil || sess.Spec.Limits.MaxDurationS <= 0 {
			continue
		}
		if now.Before(sess.StartedAt.Add(time.Duration(sess.Spec.Limits.MaxDurationS) * time.Second)) {
			continue
		}
		reason := fmt.Sprintf("The session reached its limit of %d s (limits.max_duration_s).", sess.Spec.Limits.MaxDurationS)
		if err := s.endSession(ctx, id, api.StatusExit, api.DetailUsageLimitExceeded, reason); err != nil && ctx.Err() == nil {
			s.log.Warn("end session past its limit", "session", id, "err", err)
		}
	}
}

// sentence trims s and ends it with a full stop, so reasons join cleanly.
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || strings.HasSuffix(s, ".") || strings.HasSuffix(s, "!") || strings.HasSuffix(s, "?") {
		return s
	}
	return s + "."
}
