// Package backoff is the one retry wait of Outpost: an exponential bound
// from a base to a cap, less a random part of it (jitter) so that many
// clients do not retry in step, waited on an injectable clock so tests can
// step time instead of sleeping.
//
// It is public because the client SDK uses it; the worker, the remote, the
// orchestrator, the model providers and the server's agent loop use the same
// policy type with their own numbers.
package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"github.com/jonboulle/clockwork"
)

// Policy says how long to wait before each retry.
//
// The wait before retry n (n ≥ 1: the first retry waits Delay(1)) is bounded
// by Base·2^(n-1), at most Max; Jitter is the fraction of that bound that may
// be taken off at random: 0 waits the bound exactly, 0.5 waits between half
// of it and all of it, 1 waits anything from zero to the bound ("full
// jitter").
type Policy struct {
	Base   time.Duration
	Max    time.Duration
	Jitter float64
}

// Bound is the longest wait before retry n (n ≥ 1): Base·2^(n-1), at most
// Max. A Policy without Max is capped only by the largest Duration.
func (p Policy) Bound(n int) time.Duration {
	if p.Base <= 0 {
		return 0
	}
	limit := p.Max
	if limit <= 0 {
		limit = math.MaxInt64
	}
	n = max(n, 1)
	if n > 31 {
		return limit
	}
	d := p.Base << (n - 1)
	if d <= 0 || d > limit { // overflow or over the cap
		return limit
	}
	return d
}

// Delay is the wait before retry n (n ≥ 1): Bound(n) less a random part of
// at most Jitter of it.
func (p Policy) Delay(n int) time.Duration {
	d := p.Bound(n)
	j := min(max(p.Jitter, 0), 1)
	if cut := time.Duration(float64(d) * j); cut > 0 {
		d -= rand.N(cut + 1)
	}
	return d
}

// Sleep waits d on clk, or until ctx ends, whichever is first; it returns
// ctx's error in the second case. A nil clk is the real clock.
func Sleep(ctx context.Context, clk clockwork.Clock, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	if clk == nil {
		clk = clockwork.NewRealClock()
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.Chan():
		return nil
	}
}

// Wait sleeps before retry n of p: Sleep(ctx, clk, p.Delay(n)).
func (p Policy) Wait(ctx context.Context, clk clockwork.Clock, n int) error {
	return Sleep(ctx, clk, p.Delay(n))
}
