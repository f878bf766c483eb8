package gateway

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
)

// CallGate holds back the calls of one connection while its session is
// being suspended, and counts the calls in flight on it (sent, no result
// yet), so that a suspend starts only when the remote runs none. The zero
// value is open.
type CallGate struct {
	mu       sync.Mutex // guards the following
	paused   bool
	inflight map[int64]bool
	changed  chan struct{} // closed and replaced at every change; nil until needed
}

// ErrConnEnded ends a call held back on a connection that ended.
var ErrConnEnded = errors.New("the remote's connection ended")

// changedLocked returns the channel of the next change.
func (g *CallGate) changedLocked() chan struct{} {
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.changed
}

func (g *CallGate) notifyLocked() {
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// Enter waits while the gate is paused, then counts call seq in flight.
// It fails when ctx or the connection (done) ends first.
func (g *CallGate) Enter(ctx context.Context, done <-chan struct{}, seq int64) error {
	if err := g.lockWhen(ctx, done, func() bool { return !g.paused }); err != nil {
		return err
	}
	defer g.mu.Unlock()
	if g.inflight == nil {
		g.inflight = map[int64]bool{}
	}
	g.inflight[seq] = true
	g.notifyLocked()
	return nil
}

// Leave counts call seq as no longer in flight (its result came, or its
// send failed).
func (g *CallGate) Leave(seq int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inflight[seq] {
		delete(g.inflight, seq)
		g.notifyLocked()
	}
}

// Pause holds back new calls.
func (g *CallGate) Pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paused = true
	g.notifyLocked()
}

// WaitIdle waits until no call is in flight, or ctx or the connection
// (done) ends.
func (g *CallGate) WaitIdle(ctx context.Context, done <-chan struct{}) error {
	if err := g.lockWhen(ctx, done, func() bool { return len(g.inflight) == 0 }); err != nil {
		return err
	}
	g.mu.Unlock()
	return nil
}

// lockWhen waits until ready (called with g.mu held) holds and returns with
// g.mu held; it fails, without the lock, when ctx or the connection (done)
// ends first.
func (g *CallGate) lockWhen(ctx context.Context, done <-chan struct{}, ready func() bool) error {
	for {
		g.mu.Lock()
		if ready() {
			return nil
		}
		ch := g.changedLocked()
		g.mu.Unlock()
		select {
		case <-ch:
		case <-done:
			return ErrConnEnded
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Unpause lets calls through again.
func (g *CallGate) Unpause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paused = false
	g.notifyLocked()
}

// PauseIfIdle holds back new calls and reports true when none is in
// flight; otherwise it changes nothing and reports false. A checkpoint
// uses it: it snapshots only a remote that runs no call, and never waits
// for one.
func (g *CallGate) PauseIfIdle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.inflight) > 0 {
		return false
	}
	g.paused = true
	g.notifyLocked()
	return true
}

// Paused reports whether the gate holds calls back.
func (g *CallGate) Paused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused
}

// InFlight returns the calls in flight, in order.
func (g *CallGate) InFlight() []int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(maps.Keys(g.inflight))
}
