package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// queueScript is a fleet API that answers lists with cursor 10 and each
// watch with the next step of a script, recording the cursors it is asked
// for.
type queueScript struct {
	changed chan struct{} // poked at each request
	mu      sync.Mutex
	lists   int
	watches []string
	steps   []func(w http.ResponseWriter, cursor string)
}

func (q *queueScript) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/outposts/"):
		_ = json.NewEncoder(w).Encode(api.Outpost{Metadata: api.OutpostMetadata{OutpostID: "op_1"}, Spec: api.OutpostSpec{Name: "dev", Platform: api.PlatformLinux}})
	case r.URL.Path == "/v1/queue" && r.URL.Query().Get("watch") == "":
		q.mu.Lock()
		if r.URL.Query().Get("phase") == api.PhasePending {
			q.lists++
		}
		q.mu.Unlock()
		q.poke()
		_ = json.NewEncoder(w).Encode(api.QueueList{Items: []api.QueueEntry{}, Cursor: "10"})
	case r.URL.Path == "/v1/queue":
		cursor := r.URL.Query().Get("cursor")
		q.mu.Lock()
		q.watches = append(q.watches, cursor)
		var step func(http.ResponseWriter, string)
		if len(q.steps) > 0 {
			step, q.steps = q.steps[0], q.steps[1:]
		}
		q.mu.Unlock()
		q.poke()
		if step == nil {
			<-r.Context().Done() // a quiet, healthy stream
			return
		}
		step(w, cursor)
	default:
		http.NotFound(w, r)
	}
}

func (q *queueScript) poke() {
	select {
	case q.changed <- struct{}{}:
	default:
	}
}

func (q *queueScript) state() (int, []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lists, append([]string(nil), q.watches...)
}

// oneEvent sends one event with the given cursor, then ends the stream.
func oneEvent(next string) func(http.ResponseWriter, string) {
	return func(w http.ResponseWriter, _ string) {
		w.Header().Set("Content-Type", "text/event-stream")
		acceptor := "someone-else"
		ev := api.WatchEvent{Type: api.WatchModified, Cursor: next, Object: api.QueueEntry{
			Metadata: api.QueueMetadata{SessionID: "ses_x", OutpostID: "op_1"},
			Status:   api.QueueStatus{Phase: api.PhaseClaimed, AcceptorID: &acceptor}}}
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
}

func status(code int) func(http.ResponseWriter, string) {
	return func(w http.ResponseWriter, _ string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(`{"error":{"code":"x","message":"scripted failure"}}`))
	}
}

// TestWatchReconnectsFromSavedCursor: a broken watch reconnects from the last event's cursor without listing
// again; a refused cursor makes it list again; the cursor is saved.
func TestWatchReconnectsFromSavedCursor(t *testing.T) {
	q := &queueScript{changed: make(chan struct{}, 1), steps: []func(http.ResponseWriter, string){
		oneEvent("11"), // healthy stream that ends: reconnect from 11
		status(503),    // failure: reconnect from 11 again, no list
		oneEvent("12"), // then from 12
		status(400),    // cursor refused: list again, then watch from 10
	}}
	srv := httptest.NewServer(q)
	defer srv.Close()
	c, err := client.New(srv.URL, "opk_test")
	if err != nil {
		t.Fatal(err)
	}
	cursorFile := filepath.Join(t.TempDir(), "cursor")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		c := &Consumer{Client: c, Outpost: api.Outpost{Metadata: api.OutpostMetadata{OutpostID: "op_1"}},
			Identity: &Identity{AcceptorID: "orch-test", Kind: api.WorkerKindOrchestrator}, Capacity: 2,
			Runner:       runnerFunc(func(context.Context, *Session) Outcome { return Outcome{} }),
			PollInterval: time.Hour, CursorFile: cursorFile, Logger: testLogger(t)}
		done <- c.Run(ctx)
	}()
	want := []string{"10", "11", "11", "12", "10"}
	deadline := time.Now().Add(20 * time.Second)
	for {
		lists, watches := q.state()
		if len(watches) >= len(want) {
			if strings.Join(watches[:len(want)], ",") != strings.Join(want, ",") {
				t.Fatalf("watch cursors %v, want %v", watches, want)
			}
			if lists != 2 {
				t.Fatalf("listed the queue %d times, want 2 (at start and after the refused cursor)", lists)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch cursors %v, lists %d: want %v", watches, lists, want)
		}
		select {
		case <-q.changed:
		case <-time.After(time.Until(deadline)):
		}
	}
	b, err := os.ReadFile(cursorFile)
	if err != nil || strings.TrimSpace(string(b)) == "" {
		t.Fatalf("saved cursor: %q, %v", b, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}
