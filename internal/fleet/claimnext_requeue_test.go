package fleet

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestClaimNextEmptyDoesNotHideARequeuedSession: a server-assigned claim answers 204 while session X is held by another
// acceptor; before the answer reaches the consumer, X is released and its
// watch event (pending again) is applied. The consumer then marks every
// candidate it had "claimed until the queue says otherwise"; it must not
// mark X, whose latest event already said pending, or X is never claimed.
func TestClaimNextEmptyDoesNotHideARequeuedSession(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	x := e.session(ctx)
	var once sync.Once
	var c *Consumer // set before it makes its first request
	e.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasSuffix(r.URL.Path, "/queue:claim") {
			return false
		}
		hooked := false
		once.Do(func() {
			hooked = true
			c.mu.Lock()
			before := c.appliedAt[x]
			c.mu.Unlock()
			var req api.ClaimNextRequest
			_ = json.NewDecoder(r.Body).Decode(&req)
			req.WaitSeconds = 0 // an answer at once, as the server gave before the release
			if _, err := e.admin.Queue.Claim(ctx, x, "acc-other"); err != nil {
				t.Errorf("claim by other: %v", err)
			}
			got, err := e.admin.Queue.ClaimNext(ctx, e.outpost.Metadata.OutpostID, req)
			if err != nil || got != nil {
				t.Errorf("claim next while held = %v, %v; want 204", got, err)
			}
			if _, err := e.admin.Queue.Release(ctx, x, "acc-other"); err != nil {
				t.Errorf("release by other: %v", err)
			}
			// The answer waits for the consumer to apply the release
			// (pending again), which came after its request was sent.
			waitfor.Until(ctx, t, "the pending event to reach the consumer", func() bool {
				c.mu.Lock()
				defer c.mu.Unlock()
				return c.appliedAt[x] > before && c.entries[x].Status.Phase == api.PhasePending
			})
			w.WriteHeader(http.StatusNoContent)
		})
		return hooked
	})
	var mu sync.Mutex
	ran := map[string]int{}
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		mu.Lock()
		ran[s.ID]++
		mu.Unlock()
		_, _ = e.admin.Sessions.Terminate(ctx, s.ID, "done")
		return Exited(nil)
	})
	c = e.consumer("acc-mine", 1, r)
	done := start(t, ctx, c)
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	waitfor.Poll(rctx, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ran[x] > 0
	})
	mu.Lock()
	n := ran[x]
	mu.Unlock()
	if n == 0 {
		q, _ := e.admin.Queue.Get(ctx, x)
		t.Errorf("session %s never ran though pending (phase %q); the consumer hid it after an empty claim-next", x, q.Status.Phase)
	}
	cancel()
	<-done
}
