package server

import (
	"context"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/store"
)

// The server's side of the session state machine. The transitions, the
// keep-alive and the sweeps are lifecycle.Machine's, each one store
// transaction whose decision is made on the rows it read; what must follow
// a commit here (queue feed, fencing, end frames, metrics) and which
// remotes are attached to this server are the hooks below.

// newLifecycle is the server's state machine: its transitions commit to
// the server's store and are followed by the server's hooks.
func (s *Server) newLifecycle() *lifecycle.Machine {
	return lifecycle.New(lifecycle.Options{
		Store:          countedStore{Store: s.store, claimNext: s.metrics.claimNextTx},
		Now:            s.now,
		ClaimTTL:       s.opts.ClaimTTL,
		ReconnectGrace: s.opts.ReconnectGrace,
		SweepInterval:  s.opts.SweepInterval,
		EndedRetention: s.opts.EndedEntryRetention,
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
			Attached: func(sessionID string) (int64, bool) {
				if c := s.hub.Get(sessionID); c != nil {
					return c.Epoch, true
				}
				return 0, false
			},
		},
	})
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

// committed publishes what a transaction wrote: queue watchers wake, event
// followers get the events, and remotes of dead epochs are cut off.
func (s *Server) committed(sessionID string, m store.Mutation) {
	if m.Entry != nil {
		s.queueFeed.Notify(m.Entry.OutpostID)
		s.hub.Fence(sessionID, m.Entry.Epoch)
		s.claimWaits.pending(m.Entry)
	}
	if len(m.Events) > 0 {
		s.topics.publish(sessionID, m.Events...)
	}
}
