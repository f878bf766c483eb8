package server

import (
	"context"
	"errors"
	"sync"
)

// callGate holds back the calls of one connection while its session is
// being suspended, and counts the calls in flight on it (sent, no result
// yet), so that a suspend starts only when the remote runs none. The zero
// value is open.
type callGate struct {
	mu       sync.Mutex // guards the following
	paused   bool
	inflight map[int64]bool
	changed  chan struct{} // closed and replaced at every change; nil until needed
}

// errConnEnded ends a call held back on a connection that ended.
var errConnEnded = errors.New("the remote's connection ended")

// changedLocked returns the channel of the next change.
func (g *callGate) changedLocked() chan struct{} {
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.changed
}

func (g *callGate) notifyLocked() {
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// enter waits while the gate is paused, then counts call seq in flight.
// It fails when ctx or the connection (done) ends first.
func (g *callGate) enter(ctx context.Context, done <-chan struct{}, seq int64) error {
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

// leave counts call seq as no longer in flight (its result came, or its
// send failed).
func (g *callGate) leave(seq int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inflight[seq] {
		delete(g.inflight, seq)
		g.notifyLocked()
	}
}

// pause holds back new calls.
func (g *callGate) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paused = true
	g.notifyLocked()
}

// waitIdle waits until no call is in flight, or ctx or the connection
// (done) ends.
func (g *callGate) waitIdle(ctx context.Context, done <-chan struct{}) error {
	if err := g.lockWhen(ctx, done, func() bool { return len(g.inflight) == 0 }); err != nil {
		return err
	}
	g.mu.Unlock()
	return nil
}

// lockWhen waits until ready (called with g.mu held) holds and returns with
// g.mu held; it fails, without the lock, when ctx or the connection (done)
// ends first.
func (g *callGate) lockWhen(ctx context.Context, done <-chan struct{}, ready func() bool) error {
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
			return errConnEnded
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// unpause lets calls through again.
func (g *callGate) unpause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paused = false
	g.notifyLocked()
}
