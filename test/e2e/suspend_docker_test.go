//go:build linux

package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/demo"
	"github.com/outpost-sh/outpost/internal/orchestrator/podmantest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// httpRepo serves the demo repository over git's dumb HTTP protocol on
// loopback, for machines that do not see the test's files (a container, a
// sandbox with a private /tmp), and returns its clone URL.
func httpRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bare, err := demo.MakeRepo(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", bare, "update-server-info").CombinedOutput(); err != nil {
		t.Fatalf("git update-server-info: %v\n%s", err, out)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	return srv.URL + "/" + filepath.Base(bare)
}

// sessionContainers are the ids of the containers, running or not, of a
// session.
func sessionContainers(t *testing.T, id string) []string {
	t.Helper()
	return strings.Fields(podmanCLI(t, "ps", "-a", "--no-trunc", "--filter", "label=sh.outpost.session="+id, "--format", "{{.ID}}"))
}

// countMachineStarts is how many machines the session's transcript says
// were started for it.
func countMachineStarts(c *cluster, id string) int {
	n := 0
	for _, ev := range c.events(id) {
		if ev.Type == api.EventMachine && ev.Step == api.MachineStepStart {
			n++
		}
	}
	return n
}

// TestSuspendResumeDocker is the suspend-and-resume scenario through `outpost
// orchestrate --backend docker` on Podman: the session's container is
// removed on suspend (the workspace lived only in it), and a second
// container, with a new id, restores every file on the resume. The remote
// in the container reaches the server, for the snapshot's upload and
// download too, over the host's loopback (host networking).
func TestSuspendResumeDocker(t *testing.T) {
	t.Parallel()
	host := podmantest.API(t)
	c := startCluster(t)
	token := setupOutpost(t, c, "suspend-dock")
	state := t.TempDir()
	o := startDockerOrchestrator(t, c, "suspend-dock", token, state, host, "--max-concurrent", "2")
	repo := httpRepo(t)

	// suspendScenario waits for the session to run before its first call,
	// so the container exists by then; it is looked up right after.
	var first []string
	id := suspendScenarioFrom(t, c, "suspend-dock", repo, func(id string) { first = sessionContainers(t, id) })
	if len(first) != 1 {
		t.Fatalf("containers of the running session: %v, want one", first)
	}
	assertMachineSteps(t, c, id, api.MachineStepCreate, api.MachineStepStart, api.MachineStepTeardown)
	// Suspended: no container and no machine workspace is left.
	assertNoContainers(t, state, id)
	if s := c.session(id); s.Status.Status != api.StatusSuspended {
		t.Fatalf("after the container went: %+v", s.Status)
	}
	// The remote's exit 0 on suspend is the end of this machine's work, not
	// a machine that stopped too soon: no attempt is counted against it.
	var e api.QueueEntry
	if code := c.api("GET", "/v1/queue/"+id, c.admin, nil, &e); code != 200 || e.Status.Attempts != 0 {
		t.Errorf("queue entry after the suspend: %d %+v", code, e.Status)
	}
	var exit *api.Event
	evs := c.events(id)
	for i := range evs {
		if evs[i].Type == api.EventMachine && evs[i].Step == api.MachineStepExit {
			exit = &evs[i]
			break
		}
	}
	if exit == nil || exit.ExitCode == nil || *exit.ExitCode != 0 {
		t.Errorf("the container's exit on suspend, on the transcript: %+v", exit)
	}
	if out := o.out.String(); !strings.Contains(out, "session_status=suspended") {
		t.Errorf("the orchestrator did not see the session suspended:\n%s", out)
	}

	// The resume's container, watched for while resumeAndCheck runs (it is
	// removed when the session ends there).
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	second := make(chan string, 1)
	go func() {
		defer close(second)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			out, _ := podmanTry("ps", "-a", "--no-trunc", "--filter", "label=sh.outpost.session="+id, "--format", "{{.ID}}")
			for _, cid := range strings.Fields(out) {
				if !slices.Contains(first, cid) {
					second <- cid
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	resumeAndCheck(t, c, id, "/workspace")
	cid, ok := <-second
	cancel()
	if !ok {
		t.Fatal("no second container served the resume")
	}
	t.Logf("first container %.12s, second %.12s", first[0], cid)
	if n := countMachineStarts(c, id); n != 2 {
		t.Errorf("%d machines started, want 2 (one before the suspend, one after the resume)", n)
	}
	assertNoContainers(t, state, id)
	if out := o.out.String(); strings.Contains(out, "provisioning failed") || strings.Contains(out, "teardown failed") {
		t.Errorf("the orchestrator reported a failure:\n%s", out)
	}
}

// TestSuspendResumeBwrap: the same through `outpost orchestrate --backend
// bwrap`, whose sandbox's workspace is deleted on suspend.
func TestSuspendResumeBwrap(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "suspend-bwrap")
	state := t.TempDir()
	startOrchestrator(t, c, "suspend-bwrap", token, state, "--backend", "bwrap", "--max-concurrent", "2")
	id := suspendScenarioFrom(t, c, "suspend-bwrap", httpRepo(t), nil)
	assertMachineSteps(t, c, id, api.MachineStepCreate, api.MachineStepStart, api.MachineStepTeardown)
	waitfor.Within(t, 30*time.Second, "the sandbox's workspace to go", func() bool {
		entries, _ := filepath.Glob(filepath.Join(state, "machines", "*"))
		return len(entries) == 0
	})
	resumeAndCheck(t, c, id, "/workspace")
	if n := countMachineStarts(c, id); n != 2 {
		t.Errorf("%d machines started, want 2 (one before the suspend, one after the resume)", n)
	}
}
