//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/demo"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestCheckpointRestoredAfterKill9: with --snapshot-interval, a worker's
// machine killed with SIGKILL after a checkpoint loses nothing the
// checkpoint holds: its claim lapses, a second worker in a fresh directory
// restores the checkpoint (the uncommitted change, the untracked file, the
// file outside the repository), and the resume event says it was restored
// from the last checkpoint.
func TestCheckpointRestoredAfterKill9(t *testing.T) {
	t.Parallel()
	c := startCluster(t, "--claim-ttl", "3s", "--reconnect-grace", "2s", "--snapshot-interval", "200ms")
	token := setupOutpost(t, c, "checkpoint")
	first, firstDir := startWorker(t, c, "checkpoint", token)
	repo, err := demo.MakeRepo(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "checkpoint", Title: "checkpoint and kill -9",
		Repos: []api.Repo{{URL: "file://" + repo, Name: "app"}},
		Agent: api.Agent{Kind: api.AgentExternal}})
	waitfor.Within(t, 60*time.Second, "the session to run", func() bool { return c.session(id).Status.Status == api.StatusRunning })
	externalExec(t, c, id, "echo changed-before-the-checkpoint >> repos/app/README.md && echo untracked > repos/app/new.txt && "+
		"mkdir -p notes && echo outside-the-repo > notes/todo.txt")
	var last int64
	for _, ev := range c.events(id) {
		if ev.Type == api.EventResult {
			last = max(last, ev.CallSeq)
		}
	}
	waitEvent(t, c, id, "a checkpoint after the change", func(ev api.Event) bool {
		var v struct {
			Checkpoint bool  `json:"checkpoint"`
			AfterSeq   int64 `json:"after_seq"`
		}
		return ev.Type == api.EventSnapshot && ev.OK != nil && *ev.OK && json.Unmarshal(ev.Value, &v) == nil && v.Checkpoint && v.AfterSeq >= last
	})

	// The machine dies without suspending; its workspace goes with it.
	killMachine(t, first, firstDir)
	if err := os.RemoveAll(firstDir); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, id, "the claim to lapse", func(ev api.Event) bool {
		return ev.Type == api.EventStatus && ev.Status == api.StatusResuming
	})
	_, second := startWorker(t, c, "checkpoint", token)
	waitfor.Within(t, 90*time.Second, "the session to run again", func() bool { return c.session(id).Status.Status == api.StatusRunning })
	got := externalExec(t, c, id, "cat repos/app/README.md repos/app/new.txt notes/todo.txt && git -C repos/app status --porcelain && pwd")
	for _, want := range []string{"changed-before-the-checkpoint", "untracked", "outside-the-repo", " M README.md", "?? new.txt", second} {
		if !strings.Contains(got, want) {
			t.Errorf("the restored workspace lacks %q:\n%s", want, got)
		}
	}
	var resume string
	for _, ev := range c.events(id) {
		if ev.Type == api.EventResume {
			resume = ev.Reason
		}
	}
	if !strings.Contains(resume, "last checkpoint") || !strings.Contains(resume, "lost") {
		t.Errorf("resume event %q does not say the workspace came from the last checkpoint", resume)
	}
	if _, err := adminClient(t, c).Sessions.CallTool(t.Context(), id, "end_session", nil); err != nil {
		t.Fatalf("end_session: %v", err)
	}
	if s := c.waitFinal(id, 30*time.Second); s.Status.Status != api.StatusExit {
		t.Fatalf("ended %+v", s.Status)
	}
}
