package server

import (
	"context"
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

// newLifecycle is the server's state machine: its transitions commit to
// the server's store and are followed by the server's hooks.
func (s *Server) newLifecycle() *lifecycle.Machine {
	return lifecycle.New(lifecycle.Options{
		Store:     s.store,
		Now:       s.now,
		ClaimTTL:  s.opts.ClaimTTL,
		KeepEnded: s.keepEnded(),
		NewToken: func() (string, string) {
			token := newSecret("opc_")
			return token, hashSecret(token)
		},
		Log: s.log,
		Hooks: lifecycle.Hooks{
			Committed: s.committed,
			Claims:    func(outcome string) { s.metrics.claims.WithLabelValues(outcome).Inc() },
			Waited: func(ctx context.Context, e store.QueueEntry, d time.Duration) {
				s.observeQueueWait(ctx, e.OutpostID, e.Kind, d)
			},
			Attempt:   s.countAttempt,
			Exhausted: s.attemptsExhausted,
			Ended:     s.ended,
		},
	})
}

// claim is the compare-and-swap on acceptor_id: it takes a free or lapsed
// entry, or renews the caller's own claim, and issues a fresh connect token.
func (s *Server) claim(ctx context.Context, sessionID, acceptor string) (lifecycle.Grant, error) {
	return s.life.Claim(ctx, sessionID, acceptor)
}

// release gives a claim back. A finished session's entry stays listed as
// ended until the ended-entry sweep (endedentries.go); any other goes back
// to the queue at once.
// A non-empty reason says why, on the status and the transcript; with
// shutdown the claimer is stopping, and the release is no failed attempt.
func (s *Server) release(ctx context.Context, sessionID, acceptor, reason string, shutdown bool) (store.QueueEntry, error) {
	return s.life.Release(ctx, sessionID, acceptor, reason, shutdown)
}

// attemptsExhausted follows a committed transition in which a session's
// last attempt failed and it ended (after the Committed and Attempt
// hooks): the metrics, and the runner and remote told.
func (s *Server) attemptsExhausted(_ context.Context, sessionID string, m store.Mutation) {
	s.metrics.sessionsEnded.WithLabelValues(api.StatusError, api.DetailError).Inc()
	s.stopRunner(sessionID)
	s.hub.End(sessionID, m.Session.Reason)
}

// endSession moves a session to a final status. It is a no-op on a session
// that already ended. The remote is told to end; its claimer releases.
func (s *Server) endSession(ctx context.Context, sessionID, status, detail, reason string) error {
	after, err := s.life.End(ctx, sessionID, status, detail, reason)
	after()
	return err
}

// ended follows a committed (and published) end of a session: it counts
// and logs it, and returns what must follow — stopping the runner and
// telling the remote to end.
func (s *Server) ended(sessionID, status, detail, reason string) func() {
	s.metrics.sessionsEnded.WithLabelValues(status, detail).Inc()
	s.log.Info("session ended", "session", sessionID, "status", status, "detail", detail, "reason", reason)
	return func() {
		s.stopRunner(sessionID) // first, so no call follows the end frame
		s.hub.End(sessionID, reason)
	}
}

// dropEntry deletes a session's queue entry whatever its claim.
func (s *Server) dropEntry(ctx context.Context, sessionID string) error {
	return s.life.Drop(ctx, sessionID)
}

// committed publishes what a transaction wrote: queue watchers wake, event
// followers get the events, and remotes of dead epochs are cut off.
func (s *Server) committed(sessionID string, m store.Mutation) {
	if m.Entry != nil {
		s.queueFeed.notify(m.Entry.OutpostID)
		s.hub.Fence(sessionID, m.Entry.Epoch)
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
	if c := s.hub.Get(sessionID); c != nil {
		lease := store.Lease{SessionID: sessionID, Epoch: c.Epoch}
		if err := s.store.KeepAlive(ctx, s.now().Add(s.opts.ReconnectGrace), lease); err != nil {
			return fmt.Errorf("keep a connected remote's claim alive: %w", err)
		}
		s.log.Warn("a connected remote's claim was about to lapse (its keep-alive came late); kept", "session", sessionID)
	}
	return s.life.Lapse(ctx, sessionID)
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
