//go:build linux

package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestFollowLive starts `sessions logs -f` before any worker exists, then a
// worker: the follower prints the run as it happens and exits 0 at the end,
// the failure of a continue_on_error step notwithstanding.
// Then the worker and the server stop cleanly on SIGTERM.
func TestFollowLive(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "live")
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: "live", Title: "follow me",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep("for i in 1 2 3; do echo line-$i; sleep 0.1; done"),
			{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"echo '<b>not html</b>' >&2; exit 3"}`), ContinueOnError: true},
		}},
	})
	follower := start(t, "follower", c.env(c.admin), "sessions", "logs", "-f", id)
	waitfor.Within(t, 10*time.Second, "the follower to print the queued status", func() bool {
		return strings.Contains(follower.out.String(), "status new")
	})
	w, _ := startWorker(t, c, "live", token)
	select {
	case <-follower.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the follower did not end with the session")
	}
	if follower.err != nil {
		t.Fatalf("follower exit: %v", follower.err)
	}
	out := follower.out.String()
	for _, want := range []string{"claimed by", "remote connected", "line-1\nline-2\nline-3", "<b>not html</b>", "[exit 3]", "session ended: exit (finished)"} {
		if !strings.Contains(out, want) {
			t.Errorf("follower output lacks %q:\n%s", want, out)
		}
	}
	waitfor.Within(t, 30*time.Second, "the worker to release the session", func() bool {
		return c.released(id, c.admin)
	})
	if err := w.stop(syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatalf("worker exit after SIGTERM: %v", err)
	}
	if err := c.server.stop(syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatalf("server exit after SIGTERM: %v", err)
	}
}
