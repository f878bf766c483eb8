//go:build linux

package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/demo"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// tourWorker starts `outpost worker start --outpost NAME` the way the
// README's tour does: in a directory of its own, as the user whose home is
// home, with the token in OUTPOST_TOKEN and no --data-dir.
func tourWorker(t *testing.T, c *cluster, home, dir, outpost, token string, extra ...string) *proc {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Without isolation: the sessions append to a log outside the
	// workspace, which a sandbox would not show them.
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "OUTPOST_SERVER=" + c.url, "OUTPOST_TOKEN=" + token,
		"OUTPOST_WORKER_ISOLATION=none"}
	return startExact(t, "worker "+filepath.Base(dir), env, dir, append([]string{"worker", "start", "--outpost", outpost}, extra...)...)
}

// connectedWorkers lists the acceptors connected to an outpost.
func connectedWorkers(t *testing.T, c *cluster, outpost string) []api.Worker {
	t.Helper()
	var l api.WorkerList
	if code := c.api("GET", "/v1/outposts/"+outpost+"/workers", c.admin, nil, &l); code != 200 {
		t.Fatalf("list workers of %s: %d", outpost, code)
	}
	return l.Items
}

// waitWorkers waits until n acceptors are connected to the outpost.
func waitWorkers(t *testing.T, c *cluster, outpost string, n int) []api.Worker {
	t.Helper()
	var ws []api.Worker
	waitfor.Within(t, 60*time.Second, fmt.Sprintf("%d workers on %s", n, outpost), func() bool {
		ws = connectedWorkers(t, c, outpost)
		return len(ws) == n
	})
	return ws
}

// markSession is a session whose one step appends its mark to log, a file
// outside every workspace.
func markSession(outpost, log, mark string) api.CreateSessionRequest {
	return api.CreateSessionRequest{
		Outpost: outpost, Title: "mark " + mark,
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep(`echo "$MARK" >> '` + log + `'`)}},
		Env:   map[string]string{"MARK": mark},
	}
}

// runMarked creates n mark sessions at once, waits for all to end, and
// checks in log that each ran exactly once.
func runMarked(t *testing.T, c *cluster, outpost, log string, n int) {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		var s api.Session
		if code := c.api("POST", "/v1/sessions", c.admin, markSession(outpost, log, "m"+strconv.Itoa(i)), &s); code != 201 {
			t.Fatalf("create session %d: %d", i, code)
		}
		ids[i] = s.Metadata.SessionID
	}
	for _, id := range ids {
		requireFinished(t, c.waitFinal(id, 3*time.Minute))
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	for _, line := range strings.Fields(string(b)) {
		runs[line]++
	}
	for i := range n {
		mark := "m" + strconv.Itoa(i)
		if runs[mark] != 1 {
			t.Errorf("session %s (%s) ran %d times, want once", ids[i], mark, runs[mark])
		}
		delete(runs, mark)
	}
	if len(runs) > 0 {
		t.Errorf("unexpected lines in the log: %v", runs)
	}
}

// TestTourWorkersEachRunSessionsOnce starts two, then four, workers as the
// README's tour does — one user, each worker in its own directory, no
// --data-dir — and runs many short sessions at once on them: each worker
// has an identity of its own and every session runs exactly once.
func TestTourWorkersEachRunSessionsOnce(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	for _, tc := range []struct{ workers, sessions int }{{2, 40}, {4, 48}} {
		t.Run(fmt.Sprintf("%d workers", tc.workers), func(t *testing.T) {
			outpost := fmt.Sprintf("tour-%d", tc.workers)
			token := setupOutpost(t, c, outpost)
			home, boxes := t.TempDir(), t.TempDir()
			for i := range tc.workers {
				tourWorker(t, c, home, filepath.Join(boxes, fmt.Sprintf("box-%d", i+1)), outpost, token)
			}
			ws := waitWorkers(t, c, outpost, tc.workers)
			ids := map[string]bool{}
			for _, w := range ws {
				ids[w.AcceptorID] = true
			}
			if len(ids) != tc.workers {
				t.Fatalf("%d workers announce %d acceptor ids: %+v", tc.workers, len(ids), ws)
			}
			dirs, _ := os.ReadDir(filepath.Join(home, ".outpost", "worker"))
			if len(dirs) != tc.workers {
				t.Errorf("%d data dirs under ~/.outpost/worker, want one per workspace", len(dirs))
			}
			runMarked(t, c, outpost, filepath.Join(t.TempDir(), "runs.log"), tc.sessions)
		})
	}
}

// exitCode is the exit status of a process that has ended.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

// TestSecondWorkerOnDataDirRefused: a second worker on a data dir a
// running worker holds — started in the same directory, or given the same
// --data-dir — refuses to start with a sentence naming the data dir, the
// holder's pid and --data-dir.
func TestSecondWorkerOnDataDirRefused(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "locked")
	home, box := t.TempDir(), filepath.Join(t.TempDir(), "box-1")
	first := tourWorker(t, c, home, box, "locked", token)
	waitWorkers(t, c, "locked", 1)
	dirs, _ := os.ReadDir(filepath.Join(home, ".outpost", "worker"))
	if len(dirs) != 1 {
		t.Fatalf("data dirs: %v", dirs)
	}
	dataDir := filepath.Join(home, ".outpost", "worker", dirs[0].Name())

	for name, second := range map[string]*proc{
		"same directory": tourWorker(t, c, home, box, "locked", token),
		"same data dir":  tourWorker(t, c, home, filepath.Join(t.TempDir(), "box-2"), "locked", token, "--data-dir", dataDir),
	} {
		err := waitExit(t, second, 60*time.Second)
		out := second.out.String()
		want := fmt.Sprintf("error: the worker data dir %s is in use by another worker (pid %d)", dataDir, first.cmd.Process.Pid)
		if exitCode(err) != 3 || !strings.Contains(out, want) || !strings.Contains(out, "--data-dir DIR") {
			t.Errorf("%s: exit %v, output:\n%s\nwant exit 3 and %q", name, err, out, want)
		}
	}
	select {
	case <-first.done:
		t.Fatalf("the first worker stopped:\n%s", first.out.String())
	default:
	}
	runMarked(t, c, "locked", filepath.Join(t.TempDir(), "runs.log"), 3)
}

// TestSharedAcceptorIDRefused starts two workers with one --acceptor-id at
// the same moment: one of them refuses to run, naming the other, and no
// session runs twice.
func TestSharedAcceptorIDRefused(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "shared")
	home := t.TempDir()
	a := tourWorker(t, c, home, filepath.Join(t.TempDir(), "box-a"), "shared", token, "--acceptor-id", "shared-id")
	b := tourWorker(t, c, home, filepath.Join(t.TempDir(), "box-b"), "shared", token, "--acceptor-id", "shared-id")
	var refused, serving *proc
	waitfor.Within(t, 60*time.Second, "one of the two workers to stop", func() bool {
		select {
		case <-a.done:
			refused, serving = a, b
		case <-b.done:
			refused, serving = b, a
		default:
			return false
		}
		return true
	})
	host, _ := os.Hostname()
	want := fmt.Sprintf(`error: acceptor id "shared-id" is in use by another live worker on %s (pid %d)`, host, serving.cmd.Process.Pid)
	if exitCode(refused.err) != 3 || !strings.Contains(refused.out.String(), want) || !strings.Contains(refused.out.String(), "never share an identity") {
		t.Fatalf("refused worker: exit %v, output:\n%s\nwant exit 3 and %q", refused.err, refused.out.String(), want)
	}
	if ws := waitWorkers(t, c, "shared", 1); ws[0].PID != serving.cmd.Process.Pid {
		t.Errorf("listed worker %+v, want pid %d", ws[0], serving.cmd.Process.Pid)
	}
	runMarked(t, c, "shared", filepath.Join(t.TempDir(), "runs.log"), 12)
	select {
	case <-serving.done:
		t.Fatalf("the serving worker stopped:\n%s", serving.out.String())
	default:
	}
}

// procFile reads /proc/<pid>/<name> (the tests run as root, which may
// read it even from a process that is not dumpable).
func procFile(t *testing.T, p *proc, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", p.cmd.Process.Pid, name))
	if err != nil {
		t.Skipf("cannot read /proc/%d/%s: %v", p.cmd.Process.Pid, name, err)
	}
	return string(b)
}

// TestWorkerTokenOffCommandLineAndEnvironment: a worker given --token
// warns that local users can read it there and blanks it from its
// /proc/PID/cmdline once read; one given OUTPOST_TOKEN, or the file
// OUTPOST_TOKEN_FILE names, no longer shows either in /proc/PID/environ;
// each of them serves sessions.
func TestWorkerTokenOffCommandLineAndEnvironment(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "tokens")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "OUTPOST_SERVER=" + c.url}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"flag", nil, []string{"--token", token}},
		{"environment", []string{"OUTPOST_TOKEN=" + token}, nil},
		{"public environment name", []string{"DEVIN_OUTPOSTS_TOKEN=" + token}, nil},
		{"token file", []string{"OUTPOST_TOKEN_FILE=" + tokenFile}, nil},
	} {
		w := startExact(t, "worker "+tc.name, append(slices.Clone(base), tc.env...), t.TempDir(),
			append([]string{"worker", "start", "--outpost", "tokens"}, tc.args...)...)
		waitWorkers(t, c, "tokens", 1)
		if cmdline := procFile(t, w, "cmdline"); strings.Contains(cmdline, token) {
			t.Errorf("%s: /proc/PID/cmdline holds the token: %q", tc.name, cmdline)
		}
		environ := procFile(t, w, "environ")
		if strings.Contains(environ, token) || strings.Contains(environ, tokenFile) {
			t.Errorf("%s: /proc/PID/environ holds the token or its file: %q", tc.name, environ)
		}
		warned := strings.Contains(w.out.String(), "warning: --token puts the API token on this process's command line")
		if warned != (tc.name == "flag") {
			t.Errorf("%s: --token warning shown %v:\n%s", tc.name, warned, w.out.String())
		}
		id := createSession(t, c, api.CreateSessionRequest{Outpost: "tokens", Title: tc.name,
			Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep("echo served")}}})
		requireFinished(t, c.waitFinal(id, 60*time.Second))
		if err := w.stop(syscall.SIGTERM, 30*time.Second); exitCode(err) != 0 {
			t.Errorf("%s: worker exit %v:\n%s", tc.name, err, w.out.String())
		}
		waitWorkers(t, c, "tokens", 0)
	}
}

// hygieneProbe is a script step that reports what a session finds of the
// previous one in the workspace and in repos/demo.
const hygieneProbe = `test -e leftover.txt && echo LEFTOVER-FILE || echo NO-LEFTOVER-FILE
test -e cache/deep/f && echo LEFTOVER-DIR || echo NO-LEFTOVER-DIR
cd repos/demo
test -z "$(git status --porcelain --ignored)" && echo REPO-CLEAN || echo REPO-DIRTY
grep -q uncommitted Makefile && echo MAKEFILE-EDITED || echo MAKEFILE-PRISTINE
git branch --list --format='branch=%(refname:short)'
git tag --list 'session-*' | sed 's/^/tag=/'
test "$(git rev-parse HEAD)" = "$(git rev-parse origin/main)" && echo AT-REF || echo NOT-AT-REF`

// TestWorkspaceClearedBetweenSessions: a session leaves files in the
// workspace and a dirty repository with a local branch, commit and tag and
// an uncommitted change;
// the next session on the same worker finds no stray file and the
// repository clean at its ref, with only its own branch; a worker started
// with --keep-workspace leaves the files, branches and tags for the next
// session, which still gets the repository at its ref, the previous
// session's uncommitted changes stashed.
func TestWorkspaceClearedBetweenSessions(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "hygiene")
	repo, err := demo.MakeRepo(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dirty := api.CreateSessionRequest{Outpost: "hygiene", Title: "leave a mess",
		Repos: []api.Repo{{URL: repo, Name: "demo", Ref: "main"}},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep(`echo mess > leftover.txt
mkdir -p cache/deep && echo x > cache/deep/f
cd repos/demo
git checkout -q -b session-one
echo 'session one' >> README.md
git -c user.name=s -c user.email=s@example.com commit -qam 'session one'
git tag session-tag
echo '# uncommitted' >> Makefile
echo junk > untracked.txt`)}},
	}
	probe := api.CreateSessionRequest{Outpost: "hygiene", Title: "look around",
		Repos: []api.Repo{{URL: repo, Name: "demo", Ref: "main"}},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep(hygieneProbe)}},
	}
	run := func(extra ...string) string {
		w, _ := startWorker(t, c, "hygiene", token, extra...)
		requireFinished(t, c.waitFinal(createSession(t, c, dirty), 90*time.Second))
		id := createSession(t, c, probe)
		requireFinished(t, c.waitFinal(id, 90*time.Second))
		if err := w.stop(syscall.SIGTERM, 30*time.Second); exitCode(err) != 0 {
			t.Errorf("worker exit %v:\n%s", err, w.out.String())
		}
		waitWorkers(t, c, "hygiene", 0)
		return sessionOutput(t, c, id)
	}

	out := run()
	for _, want := range []string{"NO-LEFTOVER-FILE", "NO-LEFTOVER-DIR", "REPO-CLEAN", "MAKEFILE-PRISTINE", "branch=main", "AT-REF"} {
		if !strings.Contains(out, want) {
			t.Errorf("the next session's view lacks %s:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"branch=session-one", "tag=session-tag"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("the next session sees %s:\n%s", unwanted, out)
		}
	}

	out = run("--keep-workspace")
	// Kept: files, branches and tags; the repository the session asks for
	// is at its ref again, the uncommitted changes stashed, not lost.
	for _, want := range []string{"LEFTOVER-FILE", "LEFTOVER-DIR", "REPO-CLEAN", "MAKEFILE-PRISTINE", "branch=session-one", "tag=session-tag", "AT-REF", "they are stashed"} {
		if !strings.Contains(out, want) {
			t.Errorf("with --keep-workspace the next session's view lacks %s:\n%s", want, out)
		}
	}
}

// dumpableProbe reports whether the session's commands can read the
// environment of their parent (the remote, alive: kill -0 works for the
// same user) and of a sibling of theirs, and whether a setuid program
// still runs. With /proc mounted hidepid=invisible a process that is not
// dumpable is not even listed, which also reads as unreadable.
const dumpableProbe = `kill -0 $PPID && echo PARENT-ALIVE
cat /proc/$PPID/environ >/dev/null 2>&1 && echo PARENT-ENVIRON-READABLE || echo PARENT-ENVIRON-UNREADABLE
sleep 30 & sib=$!
cat /proc/$sib/environ >/dev/null 2>&1 && echo SIBLING-ENVIRON-READABLE || echo SIBLING-ENVIRON-UNREADABLE
kill $sib
if test -u /usr/bin/passwd; then passwd -S >/dev/null 2>&1 && echo SETUID-OK || echo SETUID-FAILED; else echo NO-SETUID-PROGRAM; fi
if command -v sudo >/dev/null; then sudo -n true 2>/dev/null && echo SUDO-OK || echo SUDO-REFUSED; else echo NO-SUDO; fi
echo commands-run`

// TestRemoteNotDumpable serves a session with `outpost remote serve`
// running as an unprivileged user (nobody; the tests run as root), as a
// worker runs it as its own user: the session's commands, which run as
// that same user, can read a sibling's /proc/PID/environ but not the
// remote's, where its connect token is, and still run setuid programs.
func TestRemoteNotDumpable(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the remote as the user nobody")
	}
	c := startCluster(t)
	token := setupOutpost(t, c, "nodump")
	// A copy of the binary and directories the user nobody can use.
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Skipf("cannot open a directory to the user nobody: %v", err)
		}
	}
	exe := filepath.Join(root, "outpost")
	b, err := os.ReadFile(binary)
	if err == nil {
		err = os.WriteFile(exe, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	workspace, stateDir := filepath.Join(root, "workspace"), filepath.Join(root, "state")
	for _, d := range []string{workspace, stateDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 65534, 65534); err != nil {
			t.Skipf("cannot give a directory to the user nobody: %v", err)
		}
	}

	id := createSession(t, c, api.CreateSessionRequest{Outpost: "nodump", Title: "probe the remote",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep(dumpableProbe)}}})
	e := claimAs(t, c, id, token, "e2e-nobody")
	r := &proc{name: "remote as nobody", out: &syncBuffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(exe, "remote", "serve")
	r.cmd.Dir = workspace
	r.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + workspace,
		"OUTPOST_GATEWAY_URL=" + e.Status.GatewayURL, "OUTPOST_CONNECT_TOKEN=" + e.Status.ConnectToken,
		"OUTPOST_SESSION_ID=" + id, "OUTPOST_STATE_DIR=" + stateDir}
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start the remote as nobody: %v", err)
	}
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() { _ = r.stop(syscall.SIGTERM, 10*time.Second) })
	if err := waitExit(t, r, 90*time.Second); err != nil {
		t.Fatalf("remote exit %v:\n%s", err, r.out.String())
	}
	requireFinished(t, c.waitFinal(id, 10*time.Second))
	out := sessionOutput(t, c, id)
	for _, want := range []string{"PARENT-ALIVE", "PARENT-ENVIRON-UNREADABLE", "SIBLING-ENVIRON-READABLE", "commands-run"} {
		if !strings.Contains(out, want) {
			t.Errorf("probe output lacks %s:\n%s", want, out)
		}
	}
	switch {
	case strings.Contains(out, "SETUID-FAILED"):
		t.Errorf("a setuid program failed under the remote:\n%s", out)
	case strings.Contains(out, "NO-SETUID-PROGRAM"):
		t.Log("no setuid passwd here: setuid programs not checked")
	}
	if strings.Contains(out, "NO-SUDO") {
		t.Log("sudo is not installed here: sudo not checked (passwd -S stands in for a setuid program)")
	}
}

// TestRemoteRefusedExitsWithItsCode: a remote the gateway keeps refusing
// (here: a dead connect token) exits with api.RemoteExitRejected, the code
// that tells its claimer to leave the claim alone.
func TestRemoteRefusedExitsWithItsCode(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "refused")
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "refused", Title: "refused",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep("true")}}})
	e := claimAs(t, c, id, token, "e2e-refused")
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"OUTPOST_GATEWAY_URL=" + e.Status.GatewayURL, "OUTPOST_CONNECT_TOKEN=oct_not-a-real-token",
		"OUTPOST_SESSION_ID=" + id, "OUTPOST_STATE_DIR=" + t.TempDir()}
	r := startExact(t, "remote", env, t.TempDir(), "remote", "serve")
	err := waitExit(t, r, 60*time.Second)
	if exitCode(err) != api.RemoteExitRejected || !strings.Contains(r.out.String(), "gateway rejected the remote") {
		t.Errorf("remote exit %v, want %d:\n%s", err, api.RemoteExitRejected, r.out.String())
	}
}

// TestRestartedWorkerTakesOverItsIdentity: a worker killed with SIGKILL
// leaves its presence entry live for 90 s; started again in the same
// directory it finds its data dir unlocked and its predecessor's pid gone,
// takes the entry over at once and serves.
func TestRestartedWorkerTakesOverItsIdentity(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "restart")
	home, box := t.TempDir(), filepath.Join(t.TempDir(), "box-1")
	first := tourWorker(t, c, home, box, "restart", token)
	before := waitWorkers(t, c, "restart", 1)[0]
	first.kill9()
	second := tourWorker(t, c, home, box, "restart", token)
	waitfor.Within(t, 30*time.Second, "the restarted worker to take its entry over", func() bool {
		ws := connectedWorkers(t, c, "restart")
		return len(ws) == 1 && ws[0].PID == second.cmd.Process.Pid
	})
	after := connectedWorkers(t, c, "restart")[0]
	if after.AcceptorID != before.AcceptorID || after.Instance == before.Instance {
		t.Errorf("before %+v, after %+v: want the same acceptor id under a new instance", before, after)
	}
	if !strings.Contains(second.out.String(), "taking its place") {
		t.Errorf("the restarted worker does not say it took over:\n%s", second.out.String())
	}
	runMarked(t, c, "restart", filepath.Join(t.TempDir(), "runs.log"), 2)
}
