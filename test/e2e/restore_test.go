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
	"github.com/outpost-sh/outpost/internal/demo"
)

// TestResumeRestoresReposOnAnotherMachine clones two repositories (one
// from the session's repos, one by a script step), kills the worker with
// SIGKILL mid-session and lets a second worker, in another workspace, take
// the session over: the repositories are cloned again there before the
// next call, which finds them; the uncommitted change made on the first
// machine is gone; the transcript says so.
func TestResumeRestoresReposOnAnotherMachine(t *testing.T) {
	t.Parallel()
	c := startCluster(t, "--claim-ttl", "3s", "--reconnect-grace", "2s")
	token := setupOutpost(t, c, "restore")
	first, firstDir := startWorker(t, c, "restore", token)
	repo, err := demo.MakeRepo(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	clone, _ := json.Marshal(api.GitCloneArgs{URL: repo, Name: "lib", Ref: "main"})
	gate := filepath.Join(t.TempDir(), "gate")
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: "restore", Title: "repos follow the session",
		Repos: []api.Repo{{URL: "file://" + repo, Name: "app"}},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			{Tool: api.ToolGitClone, Args: clone},
			execStep("echo uncommitted-on-the-old-machine >> repos/app/README.md"),
			execStep(fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done; echo gate open", gate)),
			execStep("grep -q 'says foo' repos/app/README.md && test -f repos/lib/Makefile && " +
				"! grep -q uncommitted repos/app/README.md && git -C repos/lib rev-parse --abbrev-ref HEAD && pwd"),
		}},
	})
	waitEvent(t, c, id, "the gated call to start", func(ev api.Event) bool { return ev.Type == api.EventCall && ev.CallSeq == 4 })

	killMachine(t, first, firstDir)
	waitEvent(t, c, id, "the claim to lapse", func(ev api.Event) bool {
		return ev.Type == api.EventStatus && ev.Status == api.StatusResuming
	})
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, second := startWorker(t, c, "restore", token)
	s := c.waitFinal(id, 90*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	if _, err := os.Stat(filepath.Join(second, "repos", "app", "README.md")); err != nil {
		t.Errorf("the repository is not in the new workspace: %v", err)
	}

	var restore, resume *api.Event
	var lastResult api.Event
	output := ""
	evs := c.events(id)
	for i := range evs {
		ev := evs[i]
		switch ev.Type {
		case api.EventRestore:
			restore = &evs[i]
		case api.EventResume:
			resume = &evs[i]
		case api.EventResult:
			if ev.CallSeq == 5 {
				lastResult = ev
			}
			if ev.CallSeq == 4 && restore == nil {
				t.Error("the resumed call's result came before the restore event")
			}
		case api.EventOutput:
			if ev.CallSeq == 5 {
				output += ev.Text
			}
		}
	}
	if resume == nil || !strings.Contains(resume.Reason, "(app, lib) are cloned again") || !strings.Contains(resume.Reason, "uncommitted work") {
		t.Errorf("resume event = %+v", resume)
	}
	if restore == nil {
		t.Fatal("the transcript has no restore event")
	}
	if !strings.Contains(restore.Reason, "Restored 2 repositories on the new machine: app (") ||
		!strings.Contains(restore.Reason, "lib (main @ ") || restore.OK == nil || !*restore.OK {
		t.Errorf("restore event = %+v", restore)
	}
	if lastResult.OK == nil || !*lastResult.OK {
		t.Fatalf("the call reading the restored repositories failed: %+v (output %q)", lastResult, output)
	}
	if !strings.Contains(output, "main\n") || !strings.Contains(output, second) {
		t.Errorf("output of the last call = %q, want the branch and the new workspace %s", output, second)
	}
	logs := run(t, c.env(c.admin), "sessions", "logs", id)
	if !strings.Contains(logs, "restored: Restored 2 repositories") {
		t.Errorf("sessions logs lacks the restore:\n%s", logs)
	}
}
