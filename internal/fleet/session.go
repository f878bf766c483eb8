package fleet

import (
	"context"
	"fmt"
	"sync"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/backoff"
	"github.com/outpost-sh/outpost/client"
)

// Session is a claimed session handed to a Runner.
type Session struct {
	// ID is the session's id.
	ID string
	// Claim is the claim's answer: the entry with its connect token,
	// gateway and deadline.
	Claim api.QueueEntry
	// Adopted says the claim was held before the consumer started
	// (Consumer.Recover): its machine may still run.
	Adopted bool

	c        *Consumer
	stopping <-chan struct{}
	ended    chan struct{}
	endOnce  sync.Once
	sessionState
}

// Env returns the spawn contract's environment for the session's remote,
// whose state dir is stateDir (see SpawnEnv).
func (s *Session) Env(stateDir string) []string {
	claim := s.Claim
	if claim.Status.GatewayURL == "" {
		claim.Status.GatewayURL = s.c.GatewayURL
	}
	return SpawnEnv(&claim, stateDir, s.c.lookup)
}

// Remote returns the command of the remote serving the session: the build
// its entry pins, downloaded and verified, or this build's.
func (s *Session) Remote(ctx context.Context) ([]string, error) {
	if s.c.Resolver == nil {
		return s.c.RemoteCommand, nil
	}
	var unpinned []string
	if s.c.PinnedOnly {
		unpinned = s.c.RemoteCommand
	}
	return RemoteOf(ctx, s.c.Resolver, &s.Claim, unpinned)
}

// Stopping is closed when the consumer shuts down.
func (s *Session) Stopping() <-chan struct{} { return s.stopping }

// Setup returns a context for the runner's work before its session's machine
// runs (preparing a workspace, resolving the remote build, provisioning): it
// ends with ctx, and also when the consumer shuts down (Stopping), since a
// shutdown waits for runners but nothing started yet needs to finish. The
// caller must call cancel.
func (s *Session) Setup(ctx context.Context) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancel(ctx)
	if s.stopping == nil {
		return sctx, cancel
	}
	go func() {
		select {
		case <-s.stopping:
			cancel()
		case <-sctx.Done():
		}
	}()
	return sctx, cancel
}

// isStopping reports whether the consumer is shutting down.
func (s *Session) isStopping() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

// Ended is closed when the queue shows the session terminated or gone.
func (s *Session) Ended() <-chan struct{} { return s.ended }

func (s *Session) end() { s.endOnce.Do(func() { close(s.ended) }) }

func (s *Session) isEnded() bool {
	select {
	case <-s.ended:
		return true
	default:
		return false
	}
}

// register records a held claim.
func (c *Consumer) register(claim api.QueueEntry, adopted bool, stopping <-chan struct{}) *Session {
	s := &Session{ID: claim.Metadata.SessionID, Claim: claim, Adopted: adopted, c: c, stopping: stopping, ended: make(chan struct{})}
	s.changes = make(chan struct{}, 1)
	c.mu.Lock()
	c.held[s.ID] = s
	c.heldChangedLocked()
	c.mu.Unlock()
	return s
}

// unregister forgets a claim once its session is done.
func (c *Consumer) unregister(s *Session, postpone bool) {
	c.mu.Lock()
	delete(c.held, s.ID)
	// The entry the watch showed last is this claim's, unless the watch
	// already showed it pending again: released while not over, it is
	// to be claimed again (up to its max_attempts).
	if e, ok := c.entries[s.ID]; ok && e.Status.Phase != api.PhasePending {
		delete(c.entries, s.ID)
	}
	if postpone && c.RetryAfter > 0 {
		c.retryAt[s.ID] = c.clock.Now().Add(c.RetryAfter)
	}
	c.heldChangedLocked()
	c.mu.Unlock()
}

func (c *Consumer) heldChangedLocked() {
	n, id := len(c.held), ""
	if c.Capacity == 1 {
		for k := range c.held {
			id = k
		}
	}
	c.obs.Held(n)
	c.Presence.setHeld(n, id)
}

// start serves a claimed session in the background.
func (c *Consumer) start(ctx context.Context, claim api.QueueEntry, adopted bool) {
	s := c.register(claim, adopted, c.stopping)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		out, err := c.serveSession(ctx, s)
		if out.Stop {
			// Before the slot frees: no claim may follow a Stop.
			c.halting.Store(true)
			select {
			case c.halt <- err:
			default:
			}
		}
		c.unregister(s, out.Postpone)
		c.poke()
	}()
}

// serveOne is Serve's body.
func (c *Consumer) serveOne(ctx context.Context, id string) error {
	logged := false
	for {
		e, err := c.Client.Queue.Get(ctx, id)
		switch {
		case client.IsNotFound(err):
			return fmt.Errorf("session %s is not in the queue (it ended or never existed)", id)
		case err != nil:
			return fmt.Errorf("read session %s from the queue: %w", id, err)
		case e.Metadata.OutpostID != c.outpostID():
			return fmt.Errorf("session %s is queued on another outpost (%s), not %q", id, e.Metadata.OutpostID, c.Outpost.Spec.Name)
		case e.Status.SessionStatus == api.QueueSessionTerminated:
			return fmt.Errorf("session %s has already ended", id)
		case e.Spec.Platform != "" && e.Spec.Platform != c.platform:
			return fmt.Errorf("session %s needs a %s machine, this one runs %s", id, e.Spec.Platform, c.platform)
		}
		held := e.Status.AcceptorID != nil && *e.Status.AcceptorID == c.Identity.AcceptorID
		if e.Status.SessionStatus != api.QueueSessionSuspended && (e.Status.Phase == api.PhasePending || held) {
			claim, err := c.claim(ctx, id)
			if err == nil {
				s := c.register(*claim, false, ctx.Done())
				_, err := c.serveSession(ctx, s)
				c.unregister(s, false)
				return err
			}
			if !client.IsConflict(err) {
				return fmt.Errorf("claim session %s: %w", id, err)
			}
		}
		if !logged {
			c.log.Info("waiting for the session to become claimable", "session", id,
				"phase", e.Status.Phase, "session_status", e.Status.SessionStatus)
			logged = true
		}
		if err := backoff.Sleep(ctx, c.clock, c.PollInterval); err != nil {
			return err
		}
	}
}
