//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestRevokedWorkerTokenReleasesItsSession: a worker serves a session
// with its machine token; `outpost tokens revoke` puts the session back in
// the queue within seconds, although its remote was connected and the
// claim's grace is long, and another worker with another token finishes
// it.
func TestRevokedWorkerTokenReleasesItsSession(t *testing.T) {
	t.Parallel()
	c := startCluster(t, "--claim-ttl", "60s", "--reconnect-grace", "60s")
	token := setupOutpost(t, c, "revoke")
	first, _ := startWorker(t, c, "revoke", token)
	gate := filepath.Join(t.TempDir(), "gate")
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: "revoke", Title: "token revoked",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep("echo one"),
			execStep(fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done; echo two", gate)),
		}},
	})
	waitEvent(t, c, id, "the second call to start", func(ev api.Event) bool { return ev.Type == api.EventCall && ev.CallSeq == 2 })

	var me api.WhoAmI
	if code := c.api("GET", "/v1/whoami", token, nil, &me); code != 200 {
		t.Fatalf("whoami: %d", code)
	}
	revoked := time.Now()
	run(t, c.env(c.admin), "tokens", "revoke", me.ID)
	waitfor.Within(t, 5*time.Second, "the session back in the queue", func() bool {
		var e api.QueueEntry
		return c.api("GET", "/v1/queue/"+id, c.admin, nil, &e) == 200 && e.Status.Phase == api.PhasePending
	})
	t.Logf("released %s after the revocation", time.Since(revoked).Round(time.Millisecond))
	found := false
	for _, ev := range c.events(id) {
		if ev.Type == api.EventRelease && strings.Contains(ev.Reason, "revoked") {
			found = true
		}
	}
	if !found {
		t.Error("the transcript does not say the claim was released for the revoked token")
	}
	if s := c.session(id); api.IsFinal(s.Status.Status) {
		t.Fatalf("the session ended on the revocation: %+v", s.Status)
	}

	// Another worker, with another token, takes it and finishes it.
	var tok api.CreateTokenResponse
	raw := run(t, c.env(c.admin), "tokens", "create", "--scope", api.ScopeMachine, "--outpost", "revoke", "--name", "e2e-worker-2", "-o", "json")
	if err := json.Unmarshal([]byte(raw), &tok); err != nil || tok.Secret == "" {
		t.Fatalf("tokens create -o json printed %q: %v", raw, err)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	startWorker(t, c, "revoke", tok.Secret)
	s := c.waitFinal(id, 90*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s\nfirst worker:\n%s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason, first.out.String())
	}
}
