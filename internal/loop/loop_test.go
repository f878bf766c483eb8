package loop

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// fakeLoop runs EveryClock with a fake clock whose function reports each
// call's time on calls and returns when the test sends on release.
type fakeLoop struct {
	clk        *clockwork.FakeClock
	start      time.Time
	calls      chan time.Time
	release    chan struct{}
	overlapped atomic.Bool
	done       chan struct{}
}

func startFakeLoop(t *testing.T, ctx context.Context, d time.Duration) *fakeLoop {
	t.Helper()
	l := &fakeLoop{clk: clockwork.NewFakeClock(), calls: make(chan time.Time), release: make(chan struct{}), done: make(chan struct{})}
	l.start = l.clk.Now()
	var running atomic.Int32
	go func() {
		defer close(l.done)
		EveryClock(ctx, l.clk, d, func(context.Context) {
			if running.Add(1) > 1 {
				l.overlapped.Store(true)
			}
			defer running.Add(-1)
			l.calls <- l.clk.Now()
			<-l.release
		})
	}()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := l.clk.BlockUntilContext(wctx, 1); err != nil {
		t.Fatalf("the loop did not start its ticker: %v", err)
	}
	return l
}

// next waits for the loop's next call and returns the clock's time then.
func (l *fakeLoop) next(t *testing.T) time.Time {
	t.Helper()
	select {
	case at := <-l.calls:
		return at
	case <-time.After(10 * time.Second):
		t.Fatal("no call within 10s")
		return time.Time{}
	}
}

// stop ends the loop's context and waits for the loop to return, which
// must come without another call.
func (l *fakeLoop) stop(t *testing.T, cancel context.CancelFunc) {
	t.Helper()
	cancel()
	select {
	case <-l.done:
	case at := <-l.calls:
		t.Errorf("a call at %s after the start, after its context ended", at.Sub(l.start))
		close(l.release)
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
}

// TestEvery drives a loop with a fake clock: the first call comes a period
// after the start, not before, each later one a period after the one
// before, and the loop returns once its context ends, calling no more.
func TestEvery(t *testing.T) {
	t.Parallel()
	const d = time.Minute
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	l := startFakeLoop(t, ctx, d)
	l.clk.Advance(d - time.Nanosecond)
	l.clk.Advance(time.Nanosecond)
	// A call at d-1ns would be the one received here.
	if at := l.next(t); !at.Equal(l.start.Add(d)) {
		t.Errorf("the first call came %s after the start, want %s", at.Sub(l.start), d)
	}
	l.release <- struct{}{}
	for i := 2; i <= 3; i++ {
		l.clk.Advance(d)
		if at := l.next(t); !at.Equal(l.start.Add(time.Duration(i) * d)) {
			t.Errorf("call %d came %s after the start, want %s", i, at.Sub(l.start), time.Duration(i)*d)
		}
		l.release <- struct{}{}
	}
	l.stop(t, cancel)
	if l.overlapped.Load() {
		t.Error("two calls ran at once")
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
// calls once for the ticks missed meanwhile, then goes on at its period;
// the missed ticks do not come as a burst of calls, as Every promises.
func TestEveryDropsMissedTicks(t *testing.T) {
	t.Parallel()
	const d = time.Minute
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	l := startFakeLoop(t, ctx, d)
	l.clk.Advance(d)
	l.next(t)
	// The call is slow: ten ticks pass while it runs.
	for range 10 {
		l.clk.Advance(d)
	}
	l.release <- struct{}{}
	slowDone := l.clk.Now()
	// The one tick kept.
	if at := l.next(t); !at.Equal(slowDone) {
		t.Errorf("the call after the slow one came %s after it ended, want at once", at.Sub(slowDone))
	}
	l.release <- struct{}{}
	// A loop that caught up on the missed ticks would call again at once,
	// at the same time; Every calls a period later.
	for i := 1; i <= 3; i++ {
		l.clk.Advance(d)
		if at := l.next(t); !at.Equal(slowDone.Add(time.Duration(i) * d)) {
			t.Errorf("call %d after the slow one came %s after it ended, want %s: missed ticks were not dropped",
				i+1, at.Sub(slowDone), time.Duration(i)*d)
		}
		l.release <- struct{}{}
	}
	l.stop(t, cancel)
	if l.overlapped.Load() {
		t.Error("two calls ran at once")
	}
}
