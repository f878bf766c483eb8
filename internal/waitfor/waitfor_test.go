package waitfor

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestPoll: Poll returns true as soon as the condition holds, set by
// another goroutine, and false once the context ends without it.
func TestPoll(t *testing.T) {
	t.Parallel()
	var flag atomic.Bool
	go func() {
		flag.Store(true)
	}()
	if !Poll(t.Context(), flag.Load) {
		t.Fatal("Poll returned false for a condition that came true")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if Poll(ctx, func() bool { return false }) {
		t.Fatal("Poll returned true for a condition that never holds")
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("Poll gave up after %s, before its context ended", took)
	}
}

// recorder is a testing.TB that records Fatalf instead of stopping.
type recorder struct {
	testing.TB
	failed atomic.Bool
	msg    string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed.Store(true)
	r.msg = format
}

// TestWithinFails: Within fails its test when the deadline passes, and not
// when the condition holds.
func TestWithinFails(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	Within(r, 20*time.Millisecond, "nothing", func() bool { return false })
	if !r.failed.Load() {
		t.Error("Within did not fail past its deadline")
	}
	r = &recorder{TB: t}
	n := 0
	Within(r, time.Minute, "a third look", func() bool { n++; return n == 3 })
	if r.failed.Load() || n != 3 {
		t.Errorf("Within failed %v after %d looks", r.failed.Load(), n)
	}
}
