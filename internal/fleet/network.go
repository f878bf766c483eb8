package fleet

import (
	"context"
	"errors"
	"sync"

	"github.com/outpost-sh/outpost/api"
)

// errNoEnforcement is why a consumer that says nothing about network
// policies refuses restricted sessions: an enforcement point it does not
// have must never be assumed.
var errNoEnforcement = errors.New("this claimer cannot enforce a session's network policy, so it does not serve restricted sessions")

// Restricted reports whether e's session runs under an enabled network
// policy, which only a claimer that enforces it may serve.
func Restricted(e *api.QueueEntry) bool {
	return e.Spec.NetworkPolicy != nil && e.Spec.NetworkPolicy.Enabled
}

// networkRefusal is why the consumer will not serve e now: nil when e is
// unrestricted or the runner enforces network policies. A runner that says
// nothing (NetworkEnforcement nil) enforces nothing.
func (c *Consumer) networkRefusal(e *api.QueueEntry) error {
	if !Restricted(e) {
		return nil
	}
	if c.NetworkEnforcement == nil {
		return errNoEnforcement
	}
	if err := c.NetworkEnforcement(); err != nil {
		return err
	}
	if c.NetworkRefusal != nil {
		return c.NetworkRefusal(e)
	}
	return nil
}

// enforcesNetwork says whether the runner enforces network policies now,
// which a claim-next request tells the server.
func (c *Consumer) enforcesNetwork() bool {
	return c.NetworkEnforcement != nil && c.NetworkEnforcement() == nil
}

// refusedNetwork is the Outcome of a restricted session claimed by a
// consumer that cannot enforce its policy (the server chose it before the
// watch showed its policy): its claim is given back at once with the
// sentence why, and the consumer leaves it to others; it is not claimed
// again while the refusal holds (claimable).
func refusedNetwork(err error) Outcome {
	why := "Refused to run a session with a network policy: " + err.Error() + "."
	return NotStarted(errors.New(why)).WithReason(why).Postponed()
}

// updated records e, a newer version of the held session's entry the
// watch showed, and wakes Updated's readers.
func (s *Session) updated(e api.QueueEntry) {
	s.mu.Lock()
	s.latest = &e
	s.mu.Unlock()
	select {
	case s.changes <- struct{}{}:
	default:
	}
}

// Entry returns the newest queue entry of the session the consumer knows:
// the claim's answer, or a later version the queue watch showed (a
// network policy changed while the session runs). Its status fields are
// not the claim's; read Claim for the connect token and gateway.
func (s *Session) Entry() api.QueueEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.latest != nil {
		return *s.latest
	}
	return s.Claim
}

// Updated receives a value after the session's entry changed (see Entry).
// Changes that come faster than they are read are merged into one. It is
// the channel Restricting reads too: use one or the other.
func (s *Session) Updated() <-chan struct{} { return s.changes }

// sessionState is the part of a Session the watch updates.
type sessionState struct {
	mu      sync.Mutex // guards latest
	latest  *api.QueueEntry
	changes chan struct{}
}

// Restricting returns a channel that is closed when the session's entry,
// open when its machine started, turns restricted (a network policy was
// enabled while it ran): its machine runs outside any enforcement point
// and must stop, so that the session restarts behind one. It watches
// until ctx ends. It reads Updated: use one or the other.
func (s *Session) Restricting(ctx context.Context) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.changes:
			}
			e := s.Entry()
			if Restricted(&e) {
				close(out)
				return
			}
		}
	}()
	return out
}
