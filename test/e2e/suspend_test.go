//go:build linux

package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/demo"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// suspendScenario is the suspend-and-resume scenario up to the suspend: an external
// session whose agent (plain HTTP) writes an uncommitted change and an
// untracked file in its repository and a file outside it, then the CLI
// suspends it. It returns the session.
func suspendScenario(t *testing.T, c *cluster, outpost string) string {
	t.Helper()
	repo, err := demo.MakeRepo(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return suspendScenarioFrom(t, c, outpost, "file://"+repo, nil)
}

// suspendScenarioFrom is suspendScenario with the session's repository
// cloned from repoURL, for machines that cannot see the test's files;
// running, when set, is called once the session runs.
func suspendScenarioFrom(t *testing.T, c *cluster, outpost, repoURL string, running func(id string)) string {
	t.Helper()
	id := createSession(t, c, api.CreateSessionRequest{Outpost: outpost, Title: "suspend and resume",
		Repos: []api.Repo{{URL: repoURL, Name: "app"}},
		Agent: api.Agent{Kind: api.AgentExternal}})
	waitfor.Within(t, 60*time.Second, "the session to run", func() bool { return c.session(id).Status.Status == api.StatusRunning })
	if running != nil {
		running(id)
	}
	externalExec(t, c, id, "echo changed-before-the-suspend >> repos/app/README.md && echo untracked > repos/app/new.txt && "+
		"mkdir -p notes && echo outside-the-repo > notes/todo.txt")

	out := run(t, c.env(c.admin), "sessions", "suspend", id)
	if !strings.Contains(out, "suspended") {
		t.Fatalf("sessions suspend printed %q", out)
	}
	s := c.session(id)
	if s.Status.Status != api.StatusSuspended {
		t.Fatalf("after suspend: %+v", s.Status)
	}
	var snap *api.Event
	evs := c.events(id)
	for i := range evs {
		if evs[i].Type == api.EventSnapshot {
			snap = &evs[i]
		}
	}
	if snap == nil || snap.OK == nil || !*snap.OK {
		t.Fatalf("snapshot event %+v", snap)
	}
	// The machine lets go: the entry is pending but stays out of the queue.
	waitfor.Within(t, 60*time.Second, "the claim to be released", func() bool {
		var e api.QueueEntry
		return c.api("GET", "/v1/queue/"+id, c.admin, nil, &e) == 200 && e.Status.Phase == api.PhasePending &&
			e.Status.SessionStatus == api.QueueSessionSuspended
	})
	return id
}

// externalExec runs a command as the session's outside agent, over HTTP,
// and returns its output.
func externalExec(t *testing.T, c *cluster, id, command string) string {
	t.Helper()
	res, err := adminClient(t, c).Sessions.CallTool(t.Context(), id, api.ToolExec, api.ExecArgs{Command: command})
	if err != nil || !res.OK {
		t.Fatalf("exec %q: %+v, %v", command, res, err)
	}
	return res.Output
}

// resumeAndCheck resumes the session through the CLI and checks, as its
// outside agent, that every file came back in workspace (when set), with
// the uncommitted change shown by git status; then ends it.
func resumeAndCheck(t *testing.T, c *cluster, id, workspace string) {
	t.Helper()
	out := run(t, c.env(c.admin), "sessions", "resume", id)
	if !strings.Contains(out, "resuming") {
		t.Fatalf("sessions resume printed %q", out)
	}
	waitfor.Within(t, 90*time.Second, "the session to run again", func() bool { return c.session(id).Status.Status == api.StatusRunning })
	got := externalExec(t, c, id, "cat repos/app/README.md repos/app/new.txt notes/todo.txt && git -C repos/app status --porcelain && pwd")
	for _, want := range []string{"changed-before-the-suspend", "untracked", "outside-the-repo", " M README.md", "?? new.txt"} {
		if !strings.Contains(got, want) {
			t.Errorf("the resumed workspace lacks %q:\n%s", want, got)
		}
	}
	if workspace != "" && !strings.Contains(got, workspace) {
		t.Errorf("the session did not resume in the new workspace %s:\n%s", workspace, got)
	}
	var restore *api.Event
	evs := c.events(id)
	for i := range evs {
		if evs[i].Type == api.EventRestore && len(evs[i].Value) > 0 && strings.Contains(evs[i].Reason, "snapshot") {
			restore = &evs[i]
		}
	}
	if restore == nil || restore.OK == nil || !*restore.OK {
		t.Errorf("restore event %+v", restore)
	}
	if _, err := adminClient(t, c).Sessions.CallTool(t.Context(), id, "end_session", nil); err != nil {
		t.Fatalf("end_session: %v", err)
	}
	if s := c.waitFinal(id, 30*time.Second); s.Status.Status != api.StatusExit {
		t.Fatalf("ended %+v", s.Status)
	}
}

// TestSuspendResumeOnAnotherWorker is the suspend-and-resume scenario on long-lived
// workers: suspended, the first worker stopped and its workspace deleted,
// a second worker in a fresh directory resumes the session and every file
// is back, the uncommitted change too.
//
// It needs the remote's side of protocol version 3 (suspend, the snapshot
// upload and restore) in the binary.
func TestSuspendResumeOnAnotherWorker(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "suspend")
	first, firstDir := startWorker(t, c, "suspend", token)
	id := suspendScenario(t, c, "suspend")

	if err := first.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Logf("first worker: %v", err)
	}
	if err := os.RemoveAll(firstDir); err != nil {
		t.Fatal(err)
	}
	_, second := startWorker(t, c, "suspend", token)
	// A suspended session waits for its resume, whatever machines are free.
	if s := c.session(id); s.Status.Status != api.StatusSuspended {
		t.Fatalf("a worker took the suspended session: %+v", s.Status)
	}
	if _, err := os.Stat(filepath.Join(second, "repos")); err == nil {
		t.Fatal("the new worker's workspace has repositories before the resume")
	}
	resumeAndCheck(t, c, id, second)
}

// TestSuspendResumeOrchestrated: through `outpost orchestrate --backend
// process` the machine is torn down on suspend and the files come back on
// a new one.
func TestSuspendResumeOrchestrated(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "suspend-orch")
	state := t.TempDir()
	startOrchestrator(t, c, "suspend-orch", token, state, "--backend", "process", "--max-concurrent", "2")
	id := suspendScenario(t, c, "suspend-orch")
	assertMachineSteps(t, c, id, api.MachineStepCreate, api.MachineStepStart, api.MachineStepTeardown)
	resumeAndCheck(t, c, id, "")
	// Two machines: the first torn down on suspend, the second at the end.
	starts := 0
	for _, ev := range c.events(id) {
		if ev.Type == api.EventMachine && ev.Step == api.MachineStepStart {
			starts++
		}
	}
	if starts != 2 {
		t.Errorf("%d machines started, want 2 (one before the suspend, one after the resume)", starts)
	}
}

// TestSuspendOverLimit: a snapshot over the server's limit fails the
// suspend with a clear error, on the CLI and the transcript, and the
// session goes on running on its machine.
func TestSuspendOverLimit(t *testing.T) {
	t.Parallel()
	c := startCluster(t, "--max-snapshot-bytes", "20000")
	token := setupOutpost(t, c, "suspend-big")
	startWorker(t, c, "suspend-big", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "suspend-big", Title: "too big to suspend",
		Agent: api.Agent{Kind: api.AgentExternal}})
	waitfor.Within(t, 60*time.Second, "the session to run", func() bool { return c.session(id).Status.Status == api.StatusRunning })
	externalExec(t, c, id, "head -c 200000 /dev/urandom > noise.bin")

	msg := runFail(t, c.env(c.admin), "sessions", "suspend", id)
	if !strings.Contains(msg, "larger than this server's limit") {
		t.Errorf("sessions suspend over the limit said %q", msg)
	}
	if s := c.session(id); s.Status.Status != api.StatusRunning {
		t.Fatalf("after a failed suspend: %+v", s.Status)
	}
	var failed *api.Event
	evs := c.events(id)
	for i := range evs {
		if evs[i].Type == api.EventSnapshot && evs[i].OK != nil && !*evs[i].OK {
			failed = &evs[i]
		}
	}
	if failed == nil || !strings.Contains(failed.Error, "limit") {
		t.Errorf("failed snapshot event %+v", failed)
	}
	if out := externalExec(t, c, id, "ls -l noise.bin && echo still-here"); !strings.Contains(out, "still-here") {
		t.Errorf("after the failed suspend: %q", out)
	}
	if _, err := adminClient(t, c).Sessions.CallTool(t.Context(), id, "end_session", nil); err != nil {
		t.Fatalf("end_session: %v", err)
	}
	c.waitFinal(id, 30*time.Second)
}

// TestSuspendResumeReadOnlyAndSparse: a workspace holding a read-only tree
// (a Go module cache after chmod -R a-w) and a sparse file of 256 MiB with
// a few bytes of data is suspended on one worker and resumed on another:
// the tree comes back read-only, the sparse file with its contents and the
// disk space of its data only, not 256 MiB of zeros.
func TestSuspendResumeReadOnlyAndSparse(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "suspend-ro")
	first, firstDir := startWorker(t, c, "suspend-ro", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "suspend-ro", Title: "read-only and sparse",
		Agent: api.Agent{Kind: api.AgentExternal}})
	waitfor.Within(t, 60*time.Second, "the session to run", func() bool { return c.session(id).Status.Status == api.StatusRunning })
	externalExec(t, c, id, "mkdir -p gomod/example.com/m@v1.0.0/sub && echo 'module example.com/m' > gomod/example.com/m@v1.0.0/go.mod && "+
		"echo 'package sub' > gomod/example.com/m@v1.0.0/sub/s.go && chmod -R a-w gomod && "+
		"truncate -s 256M disk.img && printf sparse-data | dd of=disk.img bs=1 seek=100000000 conv=notrunc 2>/dev/null")
	out := run(t, c.env(c.admin), "sessions", "suspend", id)
	if !strings.Contains(out, "suspended") {
		t.Fatalf("sessions suspend printed %q", out)
	}
	waitfor.Within(t, 60*time.Second, "the claim to be released", func() bool {
		var e api.QueueEntry
		return c.api("GET", "/v1/queue/"+id, c.admin, nil, &e) == 200 && e.Status.Phase == api.PhasePending &&
			e.Status.SessionStatus == api.QueueSessionSuspended
	})
	if err := first.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Logf("first worker: %v", err)
	}
	_ = filepath.WalkDir(firstDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755) // the read-only tree, for a worker not run as root
		}
		return nil
	})
	if err := os.RemoveAll(firstDir); err != nil {
		t.Fatal(err)
	}
	startWorker(t, c, "suspend-ro", token)
	run(t, c.env(c.admin), "sessions", "resume", id)
	waitfor.Within(t, 90*time.Second, "the session to run again", func() bool { return c.session(id).Status.Status == api.StatusRunning })
	got := externalExec(t, c, id, "stat -c '%a %n' gomod/example.com/m@v1.0.0 gomod/example.com/m@v1.0.0/go.mod && cat gomod/example.com/m@v1.0.0/sub/s.go && "+
		"stat -c 'size %s' disk.img && stat -c 'blocks %b %B' disk.img && dd if=disk.img bs=1 skip=100000000 count=11 2>/dev/null; echo")
	for _, want := range []string{"555 gomod/example.com/m@v1.0.0\n", "444 gomod/example.com/m@v1.0.0/go.mod\n", "package sub\n", "size 268435456\n", "sparse-data\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("the resumed workspace lacks %q:\n%s", want, got)
		}
	}
	var blocks int64
	for _, line := range strings.Split(got, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "blocks" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			unit, _ := strconv.ParseInt(f[2], 10, 64)
			blocks = n * unit
		}
	}
	if blocks <= 0 || blocks > 1<<20 {
		t.Errorf("the sparse file takes %d bytes on disk after the resume, want its few KiB of data:\n%s", blocks, got)
	}
	var restore *api.Event
	evs := c.events(id)
	for i := range evs {
		if evs[i].Type == api.EventRestore && len(evs[i].Value) > 0 {
			restore = &evs[i]
		}
	}
	if restore == nil || restore.OK == nil || !*restore.OK {
		t.Errorf("restore event %+v", restore)
	}
	if _, err := adminClient(t, c).Sessions.CallTool(t.Context(), id, "end_session", nil); err != nil {
		t.Fatalf("end_session: %v", err)
	}
	c.waitFinal(id, 30*time.Second)
}

// TestSuspendUnreadableFile: a workspace file the remote cannot read to its
// end (here a sysfs file bind-mounted into the workspace: it says 4096
// bytes and holds a few, which no permission lets even root read) makes the
// suspend fail with 502 naming the remote and its reason, not 500; the
// session goes on running.
func TestSuspendUnreadableFile(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("bind-mounting a file into the workspace needs root")
	}
	c := startCluster(t)
	token := setupOutpost(t, c, "suspend-unread")
	_, workspace := startWorker(t, c, "suspend-unread", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "suspend-unread", Title: "an unreadable file",
		Agent: api.Agent{Kind: api.AgentExternal}})
	waitfor.Within(t, 60*time.Second, "the session to run", func() bool { return c.session(id).Status.Status == api.StatusRunning })
	externalExec(t, c, id, "echo work > work.txt && : > unreadable")
	target := filepath.Join(workspace, "unreadable")
	if out, err := exec.Command("mount", "--bind", "/sys/kernel/uevent_seqnum", target).CombinedOutput(); err != nil {
		t.Skipf("bind-mount a sysfs file: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", target).Run() })

	req, _ := http.NewRequest("POST", c.url+"/v1/sessions/"+id+"/suspend", nil)
	req.Header.Set("Authorization", "Bearer "+c.admin)
	resp, err := c.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e api.ErrorResponse
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if code := resp.StatusCode; code != 502 || e.Error.Code != api.CodeUnavailable || !strings.Contains(e.Error.Message, "remote") || !strings.Contains(e.Error.Message, "unreadable") {
		t.Fatalf("suspend with an unreadable file = %d %+v, want 502 naming the remote and the file", resp.StatusCode, e.Error)
	}
	if s := c.session(id); s.Status.Status != api.StatusRunning {
		t.Fatalf("after the failed suspend: %+v", s.Status)
	}
	if got := externalExec(t, c, id, "cat work.txt"); !strings.Contains(got, "work") {
		t.Errorf("the session after the failed suspend: %q", got)
	}
}
