//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

func execStep(command string) api.Step {
	b, _ := json.Marshal(api.ExecArgs{Command: command, TimeoutS: 120})
	return api.Step{Tool: api.ToolExec, Args: b}
}

// waitEvent waits until the transcript has an event that matches.
func waitEvent(t *testing.T, c *cluster, id, what string, match func(api.Event) bool) {
	t.Helper()
	waitfor.Within(t, 60*time.Second, what, func() bool {
		for _, ev := range c.events(id) {
			if match(ev) {
				return true
			}
		}
		return false
	})
}

// TestServerKill9MidCall kills the control plane with SIGKILL while a call
// runs on the remote and restarts it: the remote reconnects, the call is
// not run again, its result arrives exactly once, and the session finishes.
func TestServerKill9MidCall(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "durable")
	startWorker(t, c, "durable", token)
	marks := filepath.Join(t.TempDir(), "runs")
	release := filepath.Join(t.TempDir(), "release")
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: "durable", Title: "kill -9 the server",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep(fmt.Sprintf("echo ran >> %s; while [ ! -e %s ]; do sleep 0.05; done; echo finished-waiting", marks, release)),
			execStep("echo second step"),
		}},
	})
	waitEvent(t, c, id, "the first call to start", func(ev api.Event) bool { return ev.Type == api.EventCall && ev.CallSeq == 1 })
	waitfor.Within(t, 30*time.Second, "the command to run", func() bool { _, err := os.Stat(marks); return err == nil })

	c.server.kill9()
	if err := os.WriteFile(release, nil, 0o600); err != nil { // the call finishes while the server is down
		t.Fatal(err)
	}
	c.startServer()

	s := c.waitFinal(id, 90*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	runs, _ := os.ReadFile(marks)
	if n := strings.Count(string(runs), "ran"); n != 1 {
		t.Fatalf("the first call ran %d times, want once", n)
	}
	results := map[int64]int{}
	for _, ev := range c.events(id) {
		if ev.Type == api.EventResult {
			results[ev.CallSeq]++
		}
	}
	if results[1] != 1 || results[2] != 1 {
		t.Fatalf("results per call %v, want one each", results)
	}
}

// TestLapsedClaimResumesOnAnotherMachine kills a worker's machine (the
// worker, its remote and the commands running) with SIGKILL in the middle
// of a session. Its remote's connection goes, its claim lapses after the
// reconnect grace, the session is queued again as kind resume, and a
// second worker finishes it from where the server's record ends.
func TestLapsedClaimResumesOnAnotherMachine(t *testing.T) {
	t.Parallel()
	c := startCluster(t, "--claim-ttl", "3s", "--reconnect-grace", "2s")
	token := setupOutpost(t, c, "resume")
	first, firstDir := startWorker(t, c, "resume", token)
	gate := filepath.Join(t.TempDir(), "gate")
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: "resume", Title: "machine lost",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep("echo one"),
			execStep(fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done; echo two", gate)),
			execStep("echo three"),
		}},
	})
	waitEvent(t, c, id, "the second call to start", func(ev api.Event) bool { return ev.Type == api.EventCall && ev.CallSeq == 2 })

	// The machine dies without a word.
	killMachine(t, first, firstDir)
	waitEvent(t, c, id, "the claim to lapse", func(ev api.Event) bool {
		return ev.Type == api.EventStatus && ev.Status == api.StatusResuming
	})
	var e api.QueueEntry
	if code := c.api("GET", "/v1/queue/"+id, c.admin, nil, &e); code != 200 || e.Spec.Kind != api.KindResume || e.Status.Phase != api.PhasePending {
		t.Fatalf("queue entry after lapse: %d %+v", code, e)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	startWorker(t, c, "resume", token)
	s := c.waitFinal(id, 90*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	resumed, results := false, map[int64]int{}
	for _, ev := range c.events(id) {
		switch ev.Type {
		case api.EventResume:
			resumed = true
			if !strings.Contains(ev.Reason, "after call 1") {
				t.Errorf("resume event does not say where it continues: %q", ev.Reason)
			}
		case api.EventResult:
			results[ev.CallSeq]++
		}
	}
	if !resumed {
		t.Error("the transcript does not say the session moved")
	}
	if results[1] != 1 || results[2] != 1 || results[3] != 1 {
		t.Fatalf("results per call %v, want one each", results)
	}
}

// TestWorkerSIGTERMReleases stops an idle worker and a busy worker with
// SIGTERM: both exit 0 and hold no claim afterwards.
func TestWorkerSIGTERMReleases(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "graceful")
	w, _ := startWorker(t, c, "graceful", token, "--grace-period", "2s")
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: "graceful", Title: "long",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep("sleep 600")}},
	})
	waitEvent(t, c, id, "the call to start", func(ev api.Event) bool { return ev.Type == api.EventCall })
	if err := w.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("worker exit after SIGTERM: %v\n%s", err, w.out.String())
	}
	var e api.QueueEntry
	if code := c.api("GET", "/v1/queue/"+id, c.admin, nil, &e); code != 200 || e.Status.Phase != api.PhasePending {
		t.Fatalf("entry after worker stop: %d %+v", code, e.Status)
	}
}

// TestTerminateAndLimits terminates a session in the middle of a call and
// lets another hit its max_duration_s; the worker serves both in turn and
// each ends with the right detail.
func TestTerminateAndLimits(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "ends")
	startWorker(t, c, "ends", token)
	long := createSession(t, c, api.CreateSessionRequest{
		Outpost: "ends", Title: "to terminate",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep("sleep 600")}},
	})
	waitEvent(t, c, long, "the call to start", func(ev api.Event) bool { return ev.Type == api.EventCall })
	if code := c.api("POST", "/v1/sessions/"+long+"/terminate", c.admin, api.TerminateRequest{Reason: "enough"}, nil); code != 200 {
		t.Fatalf("terminate: %d", code)
	}
	s := c.waitFinal(long, 10*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailUserRequest || !strings.Contains(s.Status.Reason, "enough") {
		t.Fatalf("terminated session: %+v", s.Status)
	}
	waitfor.Within(t, 30*time.Second, "the worker to release the terminated session", func() bool {
		return c.released(long, c.admin)
	})

	limited := createSession(t, c, api.CreateSessionRequest{
		Outpost: "ends", Title: "over its limit", Limits: api.Limits{MaxDurationS: 1},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep("sleep 600")}},
	})
	s = c.waitFinal(limited, 60*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailUsageLimitExceeded || !strings.Contains(s.Status.Reason, "max_duration_s") {
		t.Fatalf("limited session: %+v", s.Status)
	}
}
