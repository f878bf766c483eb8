package gateway

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestCallGateHoldsCallsWhilePaused: a paused gate holds a call back
// until it is unpaused; WaitIdle waits for the calls in flight; a
// connection that ends frees a call held back with ErrConnEnded.
func TestCallGateHoldsCallsWhilePaused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var g CallGate
	done := make(chan struct{})
	if err := g.Enter(ctx, done, 1); err != nil {
		t.Fatalf("enter an open gate: %v", err)
	}
	if g.PauseIfIdle() {
		t.Fatal("PauseIfIdle paused a gate with a call in flight")
	}
	if err := g.Enter(ctx, done, 7); err != nil {
		t.Fatalf("enter an open gate: %v", err)
	}
	if got := g.InFlight(); !slices.Equal(got, []int64{1, 7}) {
		t.Fatalf("InFlight = %v, want [1 7]", got)
	}
	g.Leave(7)
	if got := g.InFlight(); !slices.Equal(got, []int64{1}) {
		t.Fatalf("InFlight after Leave(7) = %v, want [1]", got)
	}
	g.Pause()
	if !g.Paused() {
		t.Fatal("Pause left the gate open")
	}
	idle := make(chan error, 1)
	go func() { idle <- g.WaitIdle(ctx, done) }()
	entered := make(chan error, 1)
	go func() { entered <- g.Enter(ctx, done, 2) }()
	select {
	case err := <-idle:
		t.Fatalf("WaitIdle returned %v with call 1 in flight", err)
	case err := <-entered:
		t.Fatalf("Enter returned %v through a paused gate", err)
	case <-time.After(50 * time.Millisecond):
	}
	g.Leave(1)
	if err := <-idle; err != nil {
		t.Fatalf("WaitIdle after the last result: %v", err)
	}
	g.Unpause()
	if err := <-entered; err != nil {
		t.Fatalf("Enter after Unpause: %v", err)
	}
	g.Leave(2)
	if !g.PauseIfIdle() {
		t.Fatal("PauseIfIdle did not pause an idle gate")
	}
	held := make(chan error, 1)
	go func() { held <- g.Enter(ctx, done, 3) }()
	close(done)
	if err := <-held; !errors.Is(err, ErrConnEnded) {
		t.Fatalf("Enter on an ended connection = %v, want ErrConnEnded", err)
	}
}
