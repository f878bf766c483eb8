package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// herdRequests runs n idle consumers (ClaimWait wait) of one outpost,
// creates k sessions one after the other, each run once, and returns how
// many claim-next requests reached the server.
func herdRequests(t *testing.T, n, k int, wait time.Duration) int {
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	var mu sync.Mutex
	ran := map[string]int{}
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		mu.Lock()
		ran[s.ID]++
		mu.Unlock()
		_, _ = e.admin.Sessions.Terminate(ctx, s.ID, "done")
		return Exited(nil)
	})
	var dones []<-chan error
	for i := range n {
		c := e.consumer(fmt.Sprintf("acc-%02d", i), 1, r)
		c.ClaimWait = wait
		dones = append(dones, start(t, ctx, c))
	}
	if wait >= 0 {
		waitfor.Until(ctx, t, "every consumer's waiting claim", func() bool { return e.count("claim_next") >= n })
	} else {
		waitfor.Until(ctx, t, "every consumer's watch", func() bool { return e.count("watch") >= n })
	}
	before := e.count("claim_next")
	for range k {
		id := e.session(ctx)
		waitfor.Until(ctx, t, "the session to run", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return ran[id] > 0
		})
	}
	got := e.count("claim_next") - before
	mu.Lock()
	for id, times := range ran {
		if times != 1 {
			t.Errorf("session %s ran %d times", id, times)
		}
	}
	if len(ran) != k {
		t.Errorf("%d sessions ran, want %d", len(ran), k)
	}
	mu.Unlock()
	cancel()
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Errorf("Run = %v", err)
		}
	}
	return got
}

// TestConsumerWaitsOnce: idle consumers each keep one claim-next waiting
// at the server, so k new sessions among n idle consumers cost about a
// request each (the claim, then the winner's next wait), where consumers
// asking on each change send one per consumer and session.
func TestConsumerWaitsOnce(t *testing.T) {
	t.Parallel()
	const n, k = 12, 4
	waiting := herdRequests(t, n, k, 0)
	asking := herdRequests(t, n, k, -1)
	t.Logf("claim-next requests for %d sessions among %d idle consumers: %d waiting, %d asking on each change", k, n, waiting, asking)
	if waiting > 2*k+2 {
		t.Errorf("%d claim-next requests for %d sessions with waiting claims, want at most %d", waiting, k, 2*k+2)
	}
	if asking < 2*waiting {
		t.Errorf("asking on each change sent %d requests, waiting %d: want the herd to show", asking, waiting)
	}
}

// TestConsumerOlderServerDoesNotSpin: against a server that ignores
// wait_seconds and answers at once (no api.HeaderClaimWait), the consumer
// asks on each change as before: it claims a new session, and sends no
// requests while nothing changes.
func TestConsumerOlderServerDoesNotSpin(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	e.setHook(func(w http.ResponseWriter, r *http.Request) bool { return e.asOlderServer(w, r) })
	started := make(chan string, 1)
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		started <- s.ID
		<-s.Stopping()
		return Outcome{}
	})
	c := e.consumer("acc-old", 1, r)
	done := start(t, ctx, c)
	waitfor.Until(ctx, t, "the first claim-next", func() bool { return e.count("claim_next") >= 1 })
	first := e.count("claim_next")
	// Idle for a while: a consumer that took the 204 for the end of a
	// wait would ask again and again.
	select {
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
	}
	if n := e.count("claim_next"); n > first+1 {
		t.Errorf("%d claim-next requests while idle against an older server (%d at first), want no more", n, first)
	}
	id := e.session(ctx)
	if got := receive(t, ctx, "the session to start", started); got != id {
		t.Fatalf("ran %s, want %s", got, id)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// asOlderServer answers a claim-next request as a server without waiting
// claims does (at once, no api.HeaderClaimWait); false for other requests.
func (e *fleetEnv) asOlderServer(w http.ResponseWriter, r *http.Request) bool {
	if !strings.HasSuffix(r.URL.Path, "/queue:claim") {
		return false
	}
	var req api.ClaimNextRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	req.WaitSeconds = 0
	body, _ := json.Marshal(req)
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	e.rp.ServeHTTP(olderServer{w}, r)
	return true
}

// olderServer answers as a server without waiting claims: no
// api.HeaderClaimWait.
type olderServer struct{ http.ResponseWriter }

func (o olderServer) WriteHeader(code int) {
	o.Header().Del(api.HeaderClaimWait)
	o.ResponseWriter.WriteHeader(code)
}

func (o olderServer) Write(b []byte) (int, error) {
	o.Header().Del(api.HeaderClaimWait)
	return o.ResponseWriter.Write(b)
}

// TestConsumerWaitSkipsPostponed: a consumer with room for two, whose
// waiting claim is parked while it serves a session, is not handed that
// session straight back when its runner gives it back postponed.
func TestConsumerWaitSkipsPostponed(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	var mu sync.Mutex
	ran := map[string]int{}
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		mu.Lock()
		ran[s.ID]++
		mu.Unlock()
		return NotStarted(fmt.Errorf("no machine for it now")).Postponed()
	})
	c := e.consumer("acc-two", 2, r)
	c.RetryAfter = time.Hour
	done := start(t, ctx, c)
	id := e.session(ctx)
	waitfor.Until(ctx, t, "the session to run once", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ran[id] > 0
	})
	waitfor.Until(ctx, t, "the session back in the queue", func() bool {
		q, err := e.admin.Queue.Get(ctx, id)
		return err == nil && q.Status.Phase == api.PhasePending
	})
	// Give a wrongly woken request time to claim it again.
	select {
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
	}
	mu.Lock()
	n := ran[id]
	mu.Unlock()
	if n != 1 {
		t.Errorf("the postponed session ran %d times, want once", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}
