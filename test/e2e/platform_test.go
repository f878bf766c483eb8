//go:build linux

package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestWorkerRefusesOtherPlatform: an outpost created with --platform
// windows shows its platform in `outposts list`, and a worker on this Linux
// machine refuses it at start with a sentence naming both platforms, exits
// non-zero and claims nothing, so the session waits for a Windows machine.
func TestWorkerRefusesOtherPlatform(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	var o api.Outpost
	if err := json.Unmarshal([]byte(run(t, c.env(c.admin), "outposts", "create", "win", "--platform", "windows", "-o", "json")), &o); err != nil {
		t.Fatal(err)
	}
	if o.Spec.Platform != api.PlatformWindows {
		t.Fatalf("created outpost platform = %q, want windows", o.Spec.Platform)
	}
	if list := run(t, c.env(c.admin), "outposts", "list"); !strings.Contains(list, "PLATFORM") || !strings.Contains(list, "windows") {
		t.Errorf("outposts list does not show the platform:\n%s", list)
	}
	var tok api.CreateTokenResponse
	raw := run(t, c.env(c.admin), "tokens", "create", "--scope", api.ScopeMachine, "--outpost", "win", "--name", "w-win", "-o", "json")
	if err := json.Unmarshal([]byte(raw), &tok); err != nil {
		t.Fatal(err)
	}
	id := createSession(t, c, echoSession("win", ""))

	w, _ := startWorker(t, c, "win", tok.Secret)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker still runs after 30s on an outpost of another platform:\n%s", w.out.String())
	}
	if w.err == nil {
		t.Errorf("the worker exited 0 on an outpost of another platform")
	}
	const want = `outpost "win" serves windows sessions but this machine runs linux`
	if out := w.out.String(); !strings.Contains(out, want) {
		t.Errorf("the worker said\n%s\nwant a sentence containing %q", out, want)
	}
	var e api.QueueEntry
	if code := c.api("GET", "/v1/queue/"+id, c.admin, nil, &e); code != 200 {
		t.Fatalf("GET queue entry = %d", code)
	}
	if e.Status.AcceptorID != nil && *e.Status.AcceptorID != "" {
		t.Errorf("the session was claimed by %q", *e.Status.AcceptorID)
	}
}
