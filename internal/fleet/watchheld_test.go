package fleet

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// watchRecorder records the held_by of each watch request through the
// proxy ("" for a whole-queue watch); next, when set, is the proxy's hook
// for every other request.
func watchRecorder(e *fleetEnv, next func(w http.ResponseWriter, r *http.Request) bool) func() []string {
	var mu sync.Mutex
	var seen []string
	e.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/v1/queue" && r.URL.Query().Get("watch") == "true" {
			mu.Lock()
			seen = append(seen, r.URL.Query().Get(api.QueryHeldBy))
			mu.Unlock()
			return false
		}
		return next != nil && next(w, r)
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// TestConsumerWatchesHeld: a consumer with WatchHeld that claims through
// waiting requests watches only its own entries: it still takes a new
// session, its cursor moves past another acceptor's changes with the
// bookmarks, and it learns at once of its session's cancellation from the
// watch (no checks, no renewal within the test).
func TestConsumerWatchesHeld(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{KeepaliveInterval: 50 * time.Millisecond})
	ctx, cancel := testContext(t)
	watches := watchRecorder(e, nil)
	started := make(chan string, 1)
	stopped := make(chan string, 1)
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		started <- s.ID
		select {
		case <-s.Ended():
			stopped <- s.ID
		case <-ctx.Done():
		}
		return Exited(nil)
	})
	c := e.consumer("acc-held", 1, r)
	c.WatchHeld = true
	var cursor atomic.Int64
	c.Cursor = func(cur string) {
		if n, err := strconv.ParseInt(cur, 10, 64); err == nil {
			cursor.Store(n)
		}
	}
	done := start(t, ctx, c)
	waitfor.Until(ctx, t, "the held watch", func() bool { return len(watches()) >= 1 })
	if w := watches(); w[0] != "acc-held" {
		t.Fatalf("the consumer's watch asked for held_by %q, want its acceptor", w[0])
	}

	mine := e.session(ctx)
	if got := receive(t, ctx, "the session to start", started); got != mine {
		t.Fatalf("ran %s, want %s", got, mine)
	}
	// Another acceptor's change while the consumer is full: passed over,
	// the cursor moves past it.
	other := e.session(ctx)
	if _, err := e.admin.Queue.Claim(ctx, other, "acc-other"); err != nil {
		t.Fatal(err)
	}
	list, err := e.admin.Queue.List(ctx, client.QueueFilter{Outpost: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	last, _ := strconv.ParseInt(list.Cursor, 10, 64)
	waitfor.Until(ctx, t, "the cursor past the other acceptor's claim", func() bool { return cursor.Load() >= last })

	if _, err := e.admin.Sessions.Terminate(ctx, mine, "stop"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled session did not end within 5s: the held watch did not carry its end")
	}
	for _, h := range watches() {
		if h != "acc-held" {
			t.Errorf("a watch with held_by %q, want every one held by the consumer", h)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// TestConsumerWatchesAllForAnOlderServer: against a server that does not
// park claim-next requests, a consumer with WatchHeld opens the whole
// queue's watch instead, and claims a new session from it.
func TestConsumerWatchesAllForAnOlderServer(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	watches := watchRecorder(e, e.asOlderServer)
	started := make(chan string, 1)
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		started <- s.ID
		<-s.Stopping()
		return Outcome{}
	})
	c := e.consumer("acc-old", 1, r)
	c.WatchHeld = true
	done := start(t, ctx, c)
	waitfor.Until(ctx, t, "a whole-queue watch", func() bool {
		w := watches()
		return len(w) > 0 && w[len(w)-1] == ""
	})
	id := e.session(ctx)
	if got := receive(t, ctx, "the session to start", started); got != id {
		t.Fatalf("ran %s, want %s", got, id)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// TestConsumerByIDAfterHeldWatch: a session created while a full
// consumer's watch was held (so passed over) is claimed by id once the
// server stops assigning claims: the consumer lists the queue before it
// watches all of it.
func TestConsumerByIDAfterHeldWatch(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	var refuse atomic.Bool
	e.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if refuse.Load() && strings.HasSuffix(r.URL.Path, "/queue:claim") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"code":"not_found","message":"no such route"}}`)
			return true
		}
		return false
	})
	started := make(chan string, 2)
	finish := make(chan struct{})
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		started <- s.ID
		select {
		case <-finish:
		case <-s.Stopping():
			return Outcome{}
		}
		if _, err := e.admin.Sessions.Terminate(ctx, s.ID, "done"); err != nil {
			t.Errorf("terminate %s: %v", s.ID, err)
		}
		return Exited(nil)
	})
	c := e.consumer("acc-byid", 1, r)
	c.WatchHeld = true
	done := start(t, ctx, c)
	first := e.session(ctx)
	if got := receive(t, ctx, "the first session to start", started); got != first {
		t.Fatalf("ran %s, want %s", got, first)
	}
	later := e.session(ctx) // pending while the consumer is full
	refuse.Store(true)
	close(finish)
	select {
	case got := <-started:
		if got != later {
			t.Fatalf("ran %s, want %s", got, later)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the session created while the watch was held was not claimed by id within 10s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}
