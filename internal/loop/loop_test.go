package loop

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestEvery runs a loop until its function has run three times, then ends
// its context: the first call comes a period after the start, calls never
// overlap, and the loop returns once the context ends, calling no more.
func TestEvery(t *testing.T) {
	t.Parallel()
	const d = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls, running atomic.Int32
	var overlapped atomic.Bool
	third := make(chan struct{})
	var first atomic.Int64
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, d, func(context.Context) {
			if running.Add(1) > 1 {
				overlapped.Store(true)
			}
			defer running.Add(-1)
			if calls.Add(1) == 1 {
				first.Store(int64(time.Since(start)))
			}
			if calls.Load() == 3 {
				close(third)
			}
		})
	}()
	select {
	case <-third:
	case <-time.After(10 * time.Second):
		t.Fatalf("three calls did not come within 10s (%d did)", calls.Load())
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
	if got := time.Duration(first.Load()); got < d {
		t.Errorf("the first call came %s after the start, before the period %s", got, d)
	}
	if overlapped.Load() {
		t.Error("two calls ran at once")
	}
	n := calls.Load()
	if n < 3 {
		t.Fatalf("%d calls", n)
	}
	// Every has returned: nothing calls fn any more.
	if got := calls.Load(); got != n {
		t.Errorf("%d calls after Every returned, %d before", got, n)
	}
}

// TestEveryUntil checks that the loop ends with its function's first error,
// and with the context's error, without a call, when the context has ended.
func TestEveryUntil(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var calls int
	err := EveryUntil(context.Background(), time.Millisecond, func(context.Context) error {
		calls++
		if calls == 2 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls != 2 {
		t.Errorf("EveryUntil = %v after %d calls, want boom after 2", err, calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = EveryUntil(ctx, time.Hour, func(context.Context) error {
		t.Error("called with its context ended")
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("EveryUntil with an ended context = %v, want context.Canceled", err)
	}

	// fn gets the loop's context.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	type key struct{}
	ctx = context.WithValue(ctx, key{}, "loop's")
	err = EveryUntil(ctx, time.Millisecond, func(got context.Context) error {
		if got.Value(key{}) != "loop's" {
			t.Error("fn got another context")
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("EveryUntil = %v", err)
	}
}

// TestEveryDropsMissedTicks: after a call that took ten periods the loop
// goes on at its period; the ticks missed meanwhile do not come as a burst
// of calls, as Every promises.
func TestEveryDropsMissedTicks(t *testing.T) {
	t.Parallel()
	const d = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		calls    int
		slowDone time.Time
		after    []time.Duration // when each call after the slow one came, from its end
	)
	enough := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, d, func(ctx context.Context) {
			calls++
			switch {
			case calls == 1:
				<-time.After(10 * d) // a slow call: ten ticks pass meanwhile
				slowDone = time.Now()
			case len(after) < 20:
				after = append(after, time.Since(slowDone))
				if len(after) == 20 {
					close(enough)
				}
			}
		})
	}()
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
		t.Fatal("20 calls after the slow one did not come within 30s")
	}
	cancel()
	<-done
	// Within three periods of the slow call's end a ticker's loop calls at
	// most four times (the one tick kept, then one a period); one that
	// caught up on the ten missed ticks would call at least ten times.
	var burst int
	for _, at := range after {
		if at < 3*d {
			burst++
		}
	}
	if burst > 4 {
		t.Errorf("%d calls within %s of the slow call's end (%v): missed ticks were not dropped", burst, 3*d, after)
	}
}
