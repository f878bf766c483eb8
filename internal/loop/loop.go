// Package loop runs the background loops of Outpost's services: a function
// called on a fixed period until its context ends, the skeleton every sweep,
// heartbeat and ping loop shares.
package loop

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// Every calls fn every d until ctx ends; the first call comes d after the
// start. A tick that comes while fn runs is taken when it returns, and the
// ticks missed meanwhile are dropped (a time.Ticker's), so calls neither
// overlap nor bunch up after a slow one. d must be positive.
func Every(ctx context.Context, d time.Duration, fn func(context.Context)) {
	EveryClock(ctx, nil, d, fn)
}

// EveryClock is Every timed by clk, so that a test can drive the loop with
// a fake clock instead of waiting for real ticks; nil is the real clock.
func EveryClock(ctx context.Context, clk clockwork.Clock, d time.Duration, fn func(context.Context)) {
	_ = EveryUntilClock(ctx, clk, d, func(ctx context.Context) error {
		fn(ctx)
		return nil
	})
}

// EveryUntil calls fn as Every does, until ctx ends or fn returns an
// error, and returns that error or ctx.Err().
func EveryUntil(ctx context.Context, d time.Duration, fn func(context.Context) error) error {
	return EveryUntilClock(ctx, nil, d, fn)
}

// EveryUntilClock is EveryUntil timed by clk; nil is the real clock.
func EveryUntilClock(ctx context.Context, clk clockwork.Clock, d time.Duration, fn func(context.Context) error) error {
	if clk == nil {
		clk = clockwork.NewRealClock()
	}
	t := clk.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.Chan():
		}
		if err := fn(ctx); err != nil {
			return err
		}
	}
}
