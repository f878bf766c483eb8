package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/backoff"
	"github.com/outpost-sh/outpost/client"
)

// claim claims session id. A claim already sent is seen through even when
// ctx ends meanwhile, and then released at once, so that shutdown never
// leaves a session claimed by nobody until its deadline.
func (c *Consumer) claim(ctx context.Context, id string) (*api.QueueEntry, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	claim, err := c.Client.Queue.Claim(cctx, id, c.Identity.AcceptorID)
	if err == nil && ctx.Err() != nil {
		c.Release(context.WithoutCancel(ctx), id, "")
		return nil, ctx.Err()
	}
	return claim, err
}

// serveSession runs the session's runner while keeping its claim, then
// confirms the session's end and releases the claim. It returns the
// runner's outcome and the session's error: nil when the session is over.
func (c *Consumer) serveSession(ctx context.Context, s *Session) (Outcome, error) {
	log := c.log.With("session", s.ID)
	if s.Adopted {
		log.Info("adopted session", "kind", s.Claim.Spec.Kind)
	} else {
		log.Info("claimed session", "kind", s.Claim.Spec.Kind)
	}
	// The claim is kept, and released, beyond ctx: a runner may finish its
	// session after shutdown.
	bg := context.WithoutCancel(ctx)
	rctx, cancel := context.WithCancelCause(bg)
	defer cancel(nil)
	kctx, stopKeeping := context.WithCancel(bg)
	var lost atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if !c.keep(kctx, s, log) {
			lost.Store(true)
			c.obs.Failure("claim_lost")
			cancel(ErrClaimLost)
		}
	}()
	if c.CheckInterval > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.check(kctx, s)
		}()
	}
	var out Outcome
	if err := c.networkRefusal(&s.Claim); err != nil {
		log.Warn("refusing a session with a network policy", "err", err)
		out = refusedNetwork(err)
	} else {
		out = c.Runner.Run(rctx, s)
	}
	stopKeeping()
	wg.Wait()
	resumable := false
	if r, ok := c.Runner.(Releaser); ok {
		defer func() { r.Released(bg, s, resumable) }()
	}

	switch {
	case lost.Load():
		log.Warn("session abandoned: the claim was lost", "err", out.Err)
		return out, fmt.Errorf("lost the claim on session %s", s.ID)
	case out.Ending == EndHandedOff && s.isStopping():
		// Shutdown of a consumer whose machines outlive it (the
		// operator's pods): the claim stays, renewed by the connected
		// remote, for the next process to adopt.
		log.Info("claim kept on shutdown: the session's machine goes on, for the next process to adopt", "reason", out.Err)
		resumable = true
		return out, nil
	case out.Ending == EndHandedOff:
		// The claim is someone else's now: another process serving the
		// session under this acceptor id, or a new holder. Releasing it
		// would take it from them.
		log.Error("the gateway refused the remote: another remote serves the session under the same claim, "+
			"or the claim ended or moved; leaving the claim alone (not releasing it)", "err", out.Err)
		return out, fmt.Errorf("the gateway refused the remote for session %s; its claim was left to whoever serves it", s.ID)
	case out.Ending == EndNotStarted:
		err := out.Err
		if err == nil {
			err = errors.New("the session's machine could not be started")
		}
		c.Release(bg, s.ID, releaseReason(out, err))
		resumable = true
		return out, err
	}
	// stopped or exited: the queue says whether the session is over.
	status := "ended"
	if !s.isEnded() {
		window := time.Duration(0)
		if out.Ending == EndExited {
			window = confirmWindow
		}
		status = c.confirmEnd(bg, s, window)
	}
	over := s.isEnded() || status == api.QueueSessionTerminated || status == api.QueueSessionSuspended || status == "gone"
	if over {
		c.Release(bg, s.ID, "")
		log.Info("session done", "session_status", status)
		return out, nil
	}
	err := out.Err
	if err == nil {
		err = errors.New("the session's machine stopped before the session ended")
	}
	reason := releaseReason(out, err)
	// A session given back because the consumer stops has not failed an
	// attempt.
	c.release(bg, s.ID, api.ClaimRequest{Reason: reason, Shutdown: s.isStopping()})
	resumable = true
	log.Info("session handed back to the queue", "session_status", status, "reason", reason)
	return out, fmt.Errorf("%w (session status %q); the session goes back to the queue", err, status)
}

func releaseReason(out Outcome, err error) string {
	if out.Reason != "" {
		return out.Reason
	}
	return err.Error()
}

// keep re-claims the session at about a third of the time left before its
// claim deadline, until ctx ends (true) or the server says the claim is no
// longer the consumer's (false). Failed renewals are retried at the same
// cadence. A renewal that shows the session terminated or suspended ends it.
func (c *Consumer) keep(ctx context.Context, s *Session, log *slog.Logger) bool {
	deadline := claimDeadline(&s.Claim)
	for {
		if err := backoff.Sleep(ctx, c.clock, renewWait(deadline, c.clock.Now())); err != nil {
			return true
		}
		e, err := c.Client.Queue.Claim(ctx, s.ID, c.Identity.AcceptorID)
		switch {
		case ctx.Err() != nil:
			return true
		case client.IsConflict(err) || client.IsNotFound(err):
			log.Warn("claim renewal refused", "err", err)
			return false
		case err != nil:
			log.Warn("cannot renew the claim; retrying", "err", err, "claim_deadline", deadline.Format(time.TimeOnly))
			c.obs.Failure("renew")
			continue
		}
		deadline = claimDeadline(e)
		// A backstop for the watch: the renewal's entry carries the
		// session's current spec (its network policy).
		s.updated(*e)
		log.Debug("claim renewed", "claim_deadline", deadline.Format(time.TimeOnly), "session_status", e.Status.SessionStatus)
		// Suspended is over for this machine too; its remote exits on the
		// server's end frame, and this is the backstop if it does not.
		if e.Status.SessionStatus == api.QueueSessionTerminated || e.Status.SessionStatus == api.QueueSessionSuspended {
			s.end()
		}
	}
}

// renewWait is the wait before the next renewal of a claim that lapses at
// deadline (zero: unknown).
func renewWait(deadline, now time.Time) time.Duration {
	if deadline.IsZero() {
		return unknownDeadlineWait
	}
	return max(deadline.Sub(now)/3, minRenewWait)
}

func claimDeadline(e *api.QueueEntry) time.Time {
	if e == nil || e.Status.ClaimDeadline == nil {
		return time.Time{}
	}
	return time.Unix(*e.Status.ClaimDeadline, 0)
}

// check reads the session's entry every CheckInterval, in case the watch
// missed its end.
func (c *Consumer) check(ctx context.Context, s *Session) {
	for backoff.Sleep(ctx, c.clock, c.CheckInterval) == nil {
		e, err := c.Client.Queue.Get(ctx, s.ID)
		if client.IsNotFound(err) || err == nil && e.Status.SessionStatus == api.QueueSessionTerminated {
			s.end()
			return
		}
		if err == nil {
			s.updated(*e)
		}
	}
}

// confirmEnd reads the queue entry until it shows the session suspended or
// terminated, or is gone ("gone"), for up to window, because the status
// can lag the remote's exit. It returns the last status read.
func (c *Consumer) confirmEnd(ctx context.Context, s *Session, window time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, window+releaseTimeout)
	defer cancel()
	until := c.clock.Now().Add(window)
	status := "unknown"
	for {
		e, err := c.Client.Queue.Get(ctx, s.ID)
		switch {
		case client.IsNotFound(err):
			return "gone"
		case err == nil:
			status = e.Status.SessionStatus
			if status == api.QueueSessionTerminated || status == api.QueueSessionSuspended {
				return status
			}
		}
		if s.isEnded() || !c.clock.Now().Before(until) || backoff.Sleep(ctx, c.clock, confirmEvery) != nil {
			return status
		}
	}
}

// Release gives the claim on session id back, saying why when reason is
// set (it goes onto the session's status and transcript), and ignoring
// answers that mean it is no longer held. It has a timeout of its own and
// ignores ctx's end, so that shutdown never drops it.
func (c *Consumer) Release(ctx context.Context, id, reason string) {
	c.release(ctx, id, api.ClaimRequest{Reason: reason})
}

// release is Release of the request req, whose acceptor it sets.
func (c *Consumer) release(ctx context.Context, id string, req api.ClaimRequest) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	reason := req.Reason
	if len(reason) > maxReleaseReason {
		reason = strings.ToValidUTF8(reason[:maxReleaseReason-3], "") + "..."
	}
	req.AcceptorID, req.Reason = c.Identity.AcceptorID, reason
	log := c.logger().With("session", id)
	_, err := c.Client.Queue.ReleaseRequest(ctx, id, req)
	switch {
	case err == nil && req.Shutdown:
		log.Info("claim released on shutdown", "reason", reason)
	case err == nil && reason != "":
		log.Info("claim released", "reason", reason)
	case err == nil:
		log.Info("claim released")
	case client.IsConflict(err) || client.IsNotFound(err):
		log.Debug("claim already gone", "err", err)
	default:
		log.Warn("cannot release the claim; it lapses at its deadline", "err", err)
		if c.Observer != nil {
			c.Observer.Failure("release")
		}
	}
}

// logger is the consumer's logger, also before Run.
func (c *Consumer) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.DiscardHandler)
}
