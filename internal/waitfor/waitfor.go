// Package waitfor polls a test's condition until it holds, failing the test
// when a deadline passes first. It is the one way tests wait for something
// another goroutine or process does, instead of sleeping.
//
// It imports nothing of the project, so any package's tests can use it,
// internal/server's own included (servertest, which starts a server, cannot
// be imported there).
package waitfor

import (
	"context"
	"testing"
	"time"
)

// Timeout is how long True waits: long enough for a loaded machine running
// the race detector, short enough that a hang fails the test.
const Timeout = 30 * time.Second

// Interval is how often a condition is checked.
const Interval = 10 * time.Millisecond

// True polls cond until it holds; after Timeout it fails tb, naming what
// was awaited.
func True(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	Within(tb, Timeout, what, cond)
}

// Within is True with a deadline of d.
func Within(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if !Poll(ctx, cond) {
		tb.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// Until polls cond until it holds; when ctx ends first (a test's own
// deadline) it fails tb, naming what was awaited.
func Until(ctx context.Context, tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	if !Poll(ctx, cond) {
		tb.Fatalf("timed out waiting for %s: %v", what, context.Cause(ctx))
	}
}

// Poll checks cond every Interval until it holds (true) or ctx ends
// (false), for a caller that says more than True when it fails, or that
// must not fail at all.
func Poll(ctx context.Context, cond func() bool) bool {
	if cond() {
		return true
	}
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// A last look: the condition may have come true meanwhile.
			return cond()
		case <-tick.C:
			if cond() {
				return true
			}
		}
	}
}
