package fleet

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// noClaimNext answers a server-assigned claim as a server from before it
// does (404), so the consumer claims by id; it reports whether it did.
func noClaimNext(w http.ResponseWriter, r *http.Request) bool {
	if !strings.HasSuffix(r.URL.Path, "/queue:claim") {
		return false
	}
	http.Error(w, "404 page not found", http.StatusNotFound)
	return true
}

// TestBurstHasNoConflicts: four consumers of capacity 3 drain a burst of
// 24 sessions, all pending before they start, through server-assigned
// claims: each session runs exactly
// once, no claim is lost to another consumer and none names its session.
func TestBurstHasNoConflicts(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	const n, consumers = 24, 4
	var mu sync.Mutex
	ran := map[string]int{}
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		mu.Lock()
		ran[s.ID]++
		mu.Unlock()
		if _, err := e.admin.Sessions.Terminate(ctx, s.ID, "done"); err != nil {
			t.Errorf("terminate %s: %v", s.ID, err)
		}
		return Exited(nil)
	})
	// All pending before any consumer lists the queue: every consumer
	// sees every session, the most contended start.
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.session(ctx)
	}
	obs := &countingObserver{}
	var dones []<-chan error
	for i := range consumers {
		c := e.consumer("acc-burst-"+string(rune('a'+i)), 3, r)
		c.Observer = obs
		dones = append(dones, start(t, ctx, c))
	}
	waitfor.Until(ctx, t, "every session to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == n
	})
	cancel()
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Errorf("Run = %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if ran[id] != 1 {
			t.Errorf("session %s ran %d times, want once", id, ran[id])
		}
	}
	if k := obs.conflicts.Load(); k != 0 {
		t.Errorf("%d claims lost to another consumer, want 0", k)
	}
	if k := e.count("claim"); k != 0 {
		t.Errorf("%d claims by id, want 0: the server assigns them", k)
	}
	if k := e.count("claim_next"); k < n {
		t.Errorf("%d server-assigned claims, want at least %d", k, n)
	}
}

// TestClaimNextFallsBackToClaimByID: against a server without
// server-assigned claims (404) a consumer claims by id, and asks for an
// assigned claim only once.
func TestClaimNextFallsBackToClaimByID(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	e.setHook(noClaimNext)
	ran := make(chan string, 4)
	c := e.consumer("acc-old-server", 1, runnerFunc(func(ctx context.Context, s *Session) Outcome {
		if _, err := e.admin.Sessions.Terminate(ctx, s.ID, "done"); err != nil {
			t.Errorf("terminate %s: %v", s.ID, err)
		}
		ran <- s.ID
		return Exited(nil)
	}))
	done := start(t, ctx, c)
	for range 2 {
		id := e.session(ctx)
		if got := receive(t, ctx, "the session to run", ran); got != id {
			t.Fatalf("ran %s, want %s", got, id)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if k := e.count("claim_next"); k != 1 {
		t.Errorf("%d server-assigned claims asked, want 1 (then by id)", k)
	}
	if k := e.count("claim"); k < 2 {
		t.Errorf("%d claims by id, want at least 2", k)
	}
}

// TestClaimNextSkipsPostponed: a session whose outcome said Postpone is
// excluded from the consumer's next assigned claims until RetryAfter, so
// another pending session is claimed meanwhile.
func TestClaimNextSkipsPostponed(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	first := e.session(ctx)
	ran := make(chan string, 4)
	c := e.consumer("acc-postpone", 1, runnerFunc(func(ctx context.Context, s *Session) Outcome {
		ran <- s.ID
		if s.ID == first {
			return NotStarted(errors.New("not this machine")).Postponed()
		}
		if _, err := e.admin.Sessions.Terminate(ctx, s.ID, "done"); err != nil {
			t.Errorf("terminate %s: %v", s.ID, err)
		}
		return Exited(nil)
	}))
	c.RetryAfter = testTimeout // not within the test
	done := start(t, ctx, c)
	if got := receive(t, ctx, "the first session", ran); got != first {
		t.Fatalf("ran %s, want %s", got, first)
	}
	waitfor.Until(ctx, t, "the first session back in the queue", func() bool {
		q, err := e.admin.Queue.Get(ctx, first)
		return err == nil && q.Status.Phase == api.PhasePending
	})
	second := e.session(ctx)
	if got := receive(t, ctx, "the second session", ran); got != second {
		t.Fatalf("ran %s, want %s (the first is postponed)", got, second)
	}
	cancel()
	<-done
}
