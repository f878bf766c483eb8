package backoff_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/backoff"
)

func TestBound(t *testing.T) {
	p := backoff.Policy{Base: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 100, 200, 400, 800, 1000, 1000}
	for n, w := range want {
		if got := p.Bound(n); got != w*time.Millisecond {
			t.Errorf("Bound(%d) = %v, want %v", n, got, w*time.Millisecond)
		}
	}
	if got := p.Bound(1 << 20); got != time.Second {
		t.Errorf("Bound(huge) = %v, want the cap", got)
	}
	if got := (backoff.Policy{Base: time.Hour}).Bound(40); got != math.MaxInt64 {
		t.Errorf("uncapped Bound(40) = %v", got)
	}
	if got := (backoff.Policy{}).Bound(3); got != 0 {
		t.Errorf("zero policy Bound = %v, want 0", got)
	}
}

func TestDelayJitter(t *testing.T) {
	for _, j := range []float64{0, 0.25, 0.5, 1} {
		p := backoff.Policy{Base: time.Second, Max: 8 * time.Second, Jitter: j}
		for n := 1; n <= 6; n++ {
			b := p.Bound(n)
			lo := b - time.Duration(float64(b)*j)
			seen := map[time.Duration]bool{}
			for range 200 {
				d := p.Delay(n)
				if d < lo || d > b {
					t.Fatalf("jitter %v: Delay(%d) = %v, outside [%v, %v]", j, n, d, lo, b)
				}
				seen[d] = true
			}
			if j == 0 && len(seen) != 1 {
				t.Fatalf("no jitter gave %d different waits", len(seen))
			}
			if j > 0 && len(seen) < 2 {
				t.Fatalf("jitter %v gave one wait only", j)
			}
		}
	}
}

func TestSleepOnFakeClock(t *testing.T) {
	clk := clockwork.NewFakeClock()
	done := make(chan error, 1)
	go func() { done <- backoff.Sleep(context.Background(), clk, time.Minute) }()
	if err := clk.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(59 * time.Second)
	select {
	case <-done:
		t.Fatal("Sleep returned before its time")
	default:
	}
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("Sleep = %v", err)
	}
}

func TestSleepCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clk := clockwork.NewFakeClock()
	done := make(chan error, 1)
	go func() { done <- backoff.Sleep(ctx, clk, time.Hour) }()
	if err := clk.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep = %v, want context.Canceled", err)
	}
	if err := backoff.Sleep(ctx, nil, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on an ended context = %v", err)
	}
}

// ExamplePolicy shows the waits of a policy without jitter.
func ExamplePolicy() {
	p := backoff.Policy{Base: 250 * time.Millisecond, Max: 2 * time.Second}
	for n := 1; n <= 5; n++ {
		fmt.Println(p.Delay(n))
	}
	// Output:
	// 250ms
	// 500ms
	// 1s
	// 2s
	// 2s
}
