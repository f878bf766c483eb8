//go:build linux

package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestOrchestrateAttemptsRunOut: a session whose command kills its remote
// (kill -9 $PPID: the exec's parent) loses its machine each time; on an
// outpost with max_attempts 2 (set through the CLI) it is given a fresh
// machine once more and then ends in error, its reason and transcript
// naming each attempt, instead of cycling forever.
func TestOrchestrateAttemptsRunOut(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	run(t, c.env(c.admin), "outposts", "create", "doomed", "--max-attempts", "2", "--max-running", "1")
	var o api.Outpost
	if err := json.Unmarshal([]byte(run(t, c.env(c.admin), "outposts", "get", "doomed", "-o", "json")), &o); err != nil {
		t.Fatal(err)
	}
	if o.Spec.MaxAttempts != 2 || o.Spec.MaxRunning != 1 {
		t.Fatalf("outpost spec %+v, want max_attempts 2 and max_running 1", o.Spec)
	}
	var tok api.CreateTokenResponse
	raw := run(t, c.env(c.admin), "tokens", "create", "--scope", api.ScopeMachine, "--outpost", "doomed", "--name", "orch", "-o", "json")
	if err := json.Unmarshal([]byte(raw), &tok); err != nil {
		t.Fatal(err)
	}
	startOrchestrator(t, c, "doomed", tok.Secret, t.TempDir(), "--backend", "process", "--max-concurrent", "2")
	id := createSession(t, c, scriptSession("doomed", "kills its machine", execStep("echo about to die; kill -9 $PPID; sleep 30")))

	s := c.waitFinal(id, 90*time.Second)
	if s.Status.Status != api.StatusError {
		t.Fatalf("session ended %s/%s: %s; want error after its attempts", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	for _, want := range []string{"after 2 failed attempts (max_attempts 2)", "Attempt 1: Released by", "Attempt 2: Released by", "remote exited"} {
		if !strings.Contains(s.Status.Reason, want) {
			t.Errorf("reason %q does not say %q", s.Status.Reason, want)
		}
	}
	claims, releases := 0, 0
	for _, ev := range c.events(id) {
		switch ev.Type {
		case api.EventClaim:
			claims++
		case api.EventRelease:
			releases++
		}
	}
	if claims != 2 || releases != 2 {
		t.Errorf("transcript has %d claims and %d releases, want 2 and 2", claims, releases)
	}
}
