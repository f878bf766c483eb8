package client

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/backoff"
)

// TestRetryWaitsOnTheClock: a GET that failed with a 5xx is tried again
// only after the policy's wait has passed on the client's clock, and the
// waits grow between attempts.
func TestRetryWaitsOnTheClock(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			writeErr(w, http.StatusServiceUnavailable, "unavailable", "Starting up.")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	c := newTestClient(t, mux)
	clk := clockwork.NewFakeClock()
	c.clock = clk
	c.retry.wait = backoff.Policy{Base: time.Second, Max: 10 * time.Second} // no jitter: exact waits

	ctx := testContext(t)
	done := make(chan error, 1)
	go func() { done <- c.Health(ctx) }()

	for attempt, wait := range []time.Duration{time.Second, 2 * time.Second} {
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatalf("waiting for retry %d: %v", attempt+1, err)
		}
		if n := calls.Load(); n != int32(attempt+1) {
			t.Fatalf("%d calls before wait %d, want %d", n, attempt+1, attempt+1)
		}
		clk.Advance(wait - time.Nanosecond)
		select {
		case err := <-done:
			t.Fatalf("Health returned %v before the wait of %v was over", err, wait)
		default:
		}
		if n := calls.Load(); n != int32(attempt+1) {
			t.Fatalf("retried before the wait of %v was over", wait)
		}
		clk.Advance(time.Nanosecond)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Health = %v, want success on the third attempt", err)
		}
	case <-ctx.Done():
		t.Fatal("Health did not return")
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d calls, want 3", n)
	}
}

// TestDefaultRetryWaits: the default waits stay those the client always had
// (250ms doubling to 5s), less at most a fifth.
func TestDefaultRetryWaits(t *testing.T) {
	t.Parallel()
	p := defaultRetryPolicy
	if p.attempts != 4 {
		t.Errorf("%d attempts, want 4", p.attempts)
	}
	for n, bound := range map[int]time.Duration{1: 250 * time.Millisecond, 2: 500 * time.Millisecond, 3: time.Second, 6: 5 * time.Second, 20: 5 * time.Second} {
		for range 50 {
			if d := p.wait.Delay(n); d > bound || d < bound*4/5 {
				t.Fatalf("wait before retry %d = %v, want within [%v, %v]", n, d, bound*4/5, bound)
			}
		}
	}
}

// TestCallToolIsNeverRetried: a tool call that failed on the server's side
// (a 5xx answer, or the connection cut after the request was sent) is not
// sent again, as CallTool promises: the tool may have run. Its context has
// no deadline of the client's, so only the caller's bounds the call.
func TestCallToolIsNeverRetried(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	var deadline atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions/{id}/tools/{tool}", func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.PathValue("id") == "cut" {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		writeErr(w, http.StatusBadGateway, "unavailable", "The machine went away.")
	})
	c := newTestClient(t, mux)
	c.retry.attempts = 5
	c.retry.wait = backoff.Policy{Base: time.Millisecond, Max: time.Millisecond}
	var seen http.RoundTripper = c.http.Transport
	if seen == nil {
		seen = http.DefaultTransport
	}
	c.http.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if _, ok := r.Context().Deadline(); ok {
			deadline.Store(true)
		}
		return seen.RoundTrip(r)
	})
	for _, id := range []string{"fails", "cut"} {
		calls.Store(0)
		if _, err := c.Sessions.CallTool(context.Background(), id, "exec", nil); err == nil {
			t.Fatalf("%s: CallTool succeeded", id)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("%s: the call was sent %d times, want once", id, n)
		}
	}
	if deadline.Load() {
		t.Error("a tool call got a deadline the caller did not set")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
