package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/loop"
	"github.com/outpost-sh/outpost/internal/store"
)

// The session state machine's store calls. Every transition is one store
// transaction (UpdateSession, ClaimSession, ClaimNext) whose function is a
// decision of package lifecycle on the current rows; nothing is read and
// then written without that guard. What follows a commit (queue feed,
// fencing, end frames, metrics) is here.

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
	m, err := s.store.ClaimSession(ctx, sessionID, c.req.Now, c.fn)
	return s.claimed(ctx, c, m, err)
}

// claimTx is one claim's transaction function and what it found.
type claimTx struct {
	req   lifecycle.ClaimRequest
	token string
	// check, when set, runs first on the entry fn sees; its error aborts.
	check func(e store.QueueEntry) error
	// got is the decision of fn's last run.
	got lifecycle.Claimed
}

func (s *Server) newClaimTx(acceptor string) *claimTx {
	token := newSecret("opc_")
	return &claimTx{token: token, req: lifecycle.ClaimRequest{Acceptor: acceptor, Now: s.now(), TTL: s.opts.ClaimTTL,
		TokenHash: hashSecret(token), KeepEnded: s.keepEnded()}}
}

// fn is the claim's decision, run in the store's transaction (ClaimSession
// or ClaimNext).
func (c *claimTx) fn(sess store.Session, e store.QueueEntry, load store.OutpostLoad) (store.Mutation, error) {
	c.got = lifecycle.Claimed{}
	if c.check != nil {
		if err := c.check(e); err != nil {
			return store.Mutation{}, err
		}
	}
	got, err := lifecycle.Claim(sess, e, load, c.req)
	if err != nil {
		return store.Mutation{}, err
	}
	c.got = got
	return got.Mutation, nil
}

// claimed publishes a claim's transaction (m, err) and counts its outcome.
func (s *Server) claimed(ctx context.Context, c *claimTx, m store.Mutation, err error) (claimResult, error) {
	if err != nil {
		outcome := "error"
		switch {
		case errors.Is(err, lifecycle.ErrAtCapacity):
			outcome = "at_capacity"
		case errors.Is(err, lifecycle.ErrConflict), errors.Is(err, lifecycle.ErrEnded):
			outcome = "conflict"
		}
		s.metrics.claims.WithLabelValues(outcome).Inc()
		return claimResult{}, err
	}
	sessionID := m.Entry.SessionID
	if c.got.Exhausted {
		s.metrics.claims.WithLabelValues("lapsed").Inc()
		s.attemptsExhausted(ctx, sessionID, m)
		s.metrics.claims.WithLabelValues("conflict").Inc()
		return claimResult{}, c.got.Err()
	}
	res := claimResult{entry: *m.Entry, token: c.token, renewed: c.got.Renewed}
	if res.renewed {
		s.metrics.claims.WithLabelValues("renewed").Inc()
	} else {
		s.metrics.claims.WithLabelValues("claimed").Inc()
		s.observeQueueWait(ctx, res.entry.OutpostID, res.entry.Kind, c.req.Now.Sub(c.got.Queued))
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
		m, end, err := lifecycle.Release(sess, e, now, acceptor, reason, shutdown, s.keepEnded())
		ended = end
		return m, err
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
		return lifecycle.End(sess, e, now, status, detail, reason, s.keepEnded()), nil
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
	m, err := s.store.UpdateSession(ctx, sessionID, func(_ store.Session, e store.QueueEntry) (store.Mutation, error) {
		return lifecycle.Drop(e, now), nil
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
		m, _, end := lifecycle.Lapse(sess, e, now, s.keepEnded())
		ended = end
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
