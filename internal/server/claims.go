package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
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
	var res claimResult
	var queued time.Time // when a session taken from the queue entered it
	now := s.now()
	token := newSecret("opc_")
	m, err := s.store.UpdateSession(ctx, sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if e.OutpostID == "" || e.Deleted {
			return store.Mutation{}, errGone
		}
		var m store.Mutation
		held := e.Held(now)
		switch e.SessionStatus {
		case api.QueueSessionSuspended, api.QueueSessionTerminated:
			// Never handed out; but its holder may keep renewing until
			// its remote has exited and it releases.
			if !held || e.AcceptorID != acceptor {
				return store.Mutation{}, errConflict("Session %s is %s and cannot be claimed.", sessionID, e.SessionStatus)
			}
		}
		if held && e.AcceptorID != acceptor {
			return store.Mutation{}, errConflict("Session %s is claimed by another acceptor.", sessionID)
		}
		queued = e.UpdatedAt // a pending entry's last change put it in the queue
		if e.Phase == api.PhaseClaimed && !held {
			// The previous holder's claim lapsed and the sweeper has not
			// seen it yet: requeue first, in this same transaction.
			queued = e.Expiry()
			lapse(&sess, &e, now, &m)
		}
		res.renewed = held
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
		e.ClaimDeadline = now.Add(s.opts.ClaimTTL)
		e.UpdatedAt = now
		sess.UpdatedAt = now
		m.Session, m.Entry = &sess, &e
		m.ConnectTokens = append(m.ConnectTokens, store.ConnectToken{Hash: hashSecret(token), SessionID: sessionID, Epoch: e.Epoch, CreatedAt: now})
		return m, nil
	})
	if err != nil {
		outcome := "error"
		var he *httpError
		if errors.As(err, &he) && he.status == 409 {
			outcome = "conflict"
		}
		s.metrics.claims.WithLabelValues(outcome).Inc()
		return res, err
	}
	res.entry, res.token = *m.Entry, token
	if res.renewed {
		s.metrics.claims.WithLabelValues("renewed").Inc()
	} else {
		s.metrics.claims.WithLabelValues("claimed").Inc()
		s.observeQueueWait(ctx, res.entry.OutpostID, res.entry.Kind, now.Sub(queued))
	}
	s.committed(sessionID, m)
	return res, nil
}

// release gives a claim back. A finished session's entry is dropped; any
// other goes back to the queue at once.
// A non-empty reason says why, on the status and the transcript.
func (s *Server) release(ctx context.Context, sessionID, acceptor, reason string) (store.QueueEntry, error) {
	now := s.now()
	m, err := s.store.UpdateSession(ctx, sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
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
		requeue(&sess, &e, now, &m, why)
		m.Session, m.Entry = &sess, &e
		return m, nil
	})
	if err != nil {
		return store.QueueEntry{}, err
	}
	s.metrics.claims.WithLabelValues("released").Inc()
	s.committed(sessionID, m)
	return *m.Entry, nil
}

// lapse requeues an entry whose claim ran out.
func lapse(sess *store.Session, e *store.QueueEntry, now time.Time, m *store.Mutation) {
	why := fmt.Sprintf("The claim of %s lapsed: no remote connected before its deadline and it was not renewed.", e.AcceptorID)
	if !e.LiveUntil.IsZero() {
		why = fmt.Sprintf("The claim of %s lapsed: its remote's connection was gone longer than the reconnect grace and the claim was not renewed.", e.AcceptorID)
	}
	requeue(sess, e, now, m, why)
}

// requeue ends the current claim. The old connect tokens die with the epoch.
// A finished session's entry becomes a tombstone; a session that had started
// returns as kind resume; one that never started returns as new.
func requeue(sess *store.Session, e *store.QueueEntry, now time.Time, m *store.Mutation, why string) {
	acceptor := e.AcceptorID
	e.Epoch++
	e.Phase = api.PhasePending
	e.AcceptorID = ""
	e.ClaimDeadline, e.LiveUntil = time.Time{}, time.Time{}
	e.UpdatedAt = now
	sess.UpdatedAt = now
	m.Events = append(m.Events, api.Event{Type: api.EventRelease, AcceptorID: acceptor, Time: now.UnixMilli(), Reason: why})
	if api.IsFinal(sess.Status) {
		e.Deleted = true
		return
	}
	if sess.Status == api.StatusSuspended {
		// It waits for its resume (suspend.go), not for a machine.
		e.Kind, e.SessionStatus = api.KindResume, api.QueueSessionSuspended
		return
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
		sess.Status, sess.StatusDetail, sess.Reason = status, detail, reason
		sess.UpdatedAt, sess.EndedAt = now, &now
		m.Session = &sess
		m.Events = append(m.Events, statusEvent(sess, now), api.Event{Type: api.EventEnd, Time: now.UnixMilli(), Status: status, StatusDetail: detail, Reason: reason})
		if e.OutpostID != "" && !e.Deleted {
			e.SessionStatus = api.QueueSessionTerminated
			e.UpdatedAt = now
			if e.Phase == api.PhasePending {
				e.Deleted = true // nobody holds it: nothing to release
			}
			m.Entry = &e
		}
		return m, nil
	})
	if err != nil {
		return func() {}, fmt.Errorf("end session %s: %w", sessionID, err)
	}
	if m.Session == nil {
		return func() {}, nil
	}
	s.metrics.sessionsEnded.WithLabelValues(status, detail).Inc()
	s.log.Info("session ended", "session", sessionID, "status", status, "detail", detail, "reason", reason)
	s.committed(sessionID, m)
	return func() {
		s.stopRunner(sessionID) // first, so no call follows the end frame
		s.hub.end(sessionID, reason)
	}, nil
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
		s.queueChanged.notify()
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
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastLimits time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if now := s.now(); now.Sub(lastLimits) >= 5*s.opts.SweepInterval {
			lastLimits = now
			s.enforceLimits(ctx)
		}
		ids, err := s.store.LapsedClaims(ctx, s.now())
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("sweep lapsed claims", "err", err)
			}
			continue
		}
		for _, id := range ids {
			if err := s.lapseClaim(ctx, id); err != nil && ctx.Err() == nil {
				s.log.Warn("requeue lapsed claim", "session", id, "err", err)
			}
		}
	}
}

// lapseClaim requeues one entry if its claim is still lapsed.
func (s *Server) lapseClaim(ctx context.Context, sessionID string) error {
	now := s.now()
	m, err := s.store.UpdateSession(ctx, sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if e.OutpostID == "" || e.Deleted || e.Phase != api.PhaseClaimed || e.Held(now) {
			return store.Mutation{}, nil
		}
		var m store.Mutation
		lapse(&sess, &e, now, &m)
		m.Session, m.Entry = &sess, &e
		return m, nil
	})
	if err != nil {
		return err
	}
	if m.Entry != nil {
		s.metrics.claims.WithLabelValues("lapsed").Inc()
		s.log.Info("claim lapsed; session requeued", "session", sessionID, "kind", m.Entry.Kind)
		s.committed(sessionID, m)
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
