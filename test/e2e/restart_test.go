//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// unreapedWorker is a worker process the test starts and does not wait
// for, so that once killed it stays a zombie whose pid still answers
// kill(pid, 0), as a crashed child of a supervisor that has not reaped it
// yet does.
type unreapedWorker struct {
	cmd *exec.Cmd
	out *syncBuffer
}

// startUnreapedWorker starts a worker on outpost without isolation in dir
// with data dir dataDir; the test's cleanup kills and reaps it.
func startUnreapedWorker(t *testing.T, c *cluster, outpost, token, dir, dataDir string) *unreapedWorker {
	t.Helper()
	w := &unreapedWorker{out: &syncBuffer{}}
	w.cmd = exec.Command(binary, "worker", "start", "--outpost", outpost, "--dir", dir, "--data-dir", dataDir)
	w.cmd.Env = append(os.Environ(), append(c.env(token), api.EnvWorkerIsolation.Name+"=none")...)
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
		_ = w.cmd.Wait()
		if t.Failed() {
			t.Logf("--- output of the killed worker ---\n%s", w.out.String())
		}
	})
	return w
}

// procState is the state letter of /proc/<pid>/stat ("Z" for a zombie),
// or "" when there is no such process.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	_, after, ok := strings.Cut(string(b), ") ")
	if !ok || after == "" {
		return ""
	}
	return after[:1]
}

// killInDir kills every process working in dir (commands a killed
// remote left behind), so that none outlives the test.
func killInDir(dir string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/")) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestWorkerRestartedAtOnceAfterKill9 kills a worker with SIGKILL in the
// middle of a session and leaves it a zombie (its pid still answers), then
// starts it again at once in the same directory, as systemd would. The
// restarted worker holds the data dir's lock, which proves its predecessor
// gone: it takes the acceptor id over, hands back the claim its
// predecessor held (whose remote died with it) without waiting for the
// reconnect grace or the claim deadline, and finishes the session within
// seconds: the call that was running is answered, once, as one that may
// have partly run, never run again, and the script goes on.
func TestWorkerRestartedAtOnceAfterKill9(t *testing.T) {
	t.Parallel()
	c := startCluster(t) // the default claim TTL (300 s) and reconnect grace (60 s)
	token := setupOutpost(t, c, "restarted")
	dir, dataDir := t.TempDir(), filepath.Join(t.TempDir(), "worker")
	t.Cleanup(func() { killInDir(dir) })
	first := startUnreapedWorker(t, c, "restarted", token, dir, dataDir)
	marks := filepath.Join(t.TempDir(), "runs")
	// The second call is running when the worker dies: its remote dies
	// too, so the call is answered "may have partly run" and never run
	// again; the script goes on past it.
	blocked := execStep(fmt.Sprintf("echo ran >> %s; while true; do sleep 0.05; done", marks))
	blocked.ContinueOnError = true
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: "restarted", Title: "worker restarted after kill -9",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep("echo one"), blocked, execStep("echo three")}},
	})
	waitEvent(t, c, id, "the second call to start", func(ev api.Event) bool { return ev.Type == api.EventCall && ev.CallSeq == 2 })
	waitfor.Within(t, 30*time.Second, "the second call's command to run", func() bool { _, err := os.Stat(marks); return err == nil })

	pid := first.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitfor.Within(t, 10*time.Second, "the killed worker to be a zombie", func() bool { return procState(pid) == "Z" })
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the zombie's pid does not answer kill(pid, 0): %v", err)
	}
	killedAt := time.Now()
	second := start(t, "restarted worker", append(c.env(token), api.EnvWorkerIsolation.Name+"=none"),
		"worker", "start", "--outpost", "restarted", "--dir", dir, "--data-dir", dataDir)

	s := c.waitFinal(id, 45*time.Second) // under the reconnect grace
	took := time.Since(killedAt)
	select {
	case <-second.done:
		t.Fatalf("the restarted worker exited: %v", second.err)
	default:
	}
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	t.Logf("the session finished %s after the kill", took.Round(time.Millisecond))
	results := map[int64]int{}
	handedBack := false
	for _, ev := range c.events(id) {
		switch ev.Type {
		case api.EventResult:
			results[ev.CallSeq]++
			if ev.CallSeq == 2 && !strings.Contains(ev.Error, "may have partly run") {
				t.Errorf("the interrupted call's result: %+v, want an error saying it may have partly run", ev)
			}
		case api.EventRelease:
			handedBack = handedBack || strings.Contains(ev.Reason, "restarted")
		}
	}
	if results[1] != 1 || results[2] != 1 || results[3] != 1 {
		t.Errorf("results per call %v, want one each", results)
	}
	if runs, _ := os.ReadFile(marks); strings.Count(string(runs), "ran") != 1 {
		t.Errorf("the interrupted call ran %d times, want once", strings.Count(string(runs), "ran"))
	}
	if !handedBack {
		t.Error("the transcript does not say the restarted worker handed the session back")
	}
	ws := waitWorkers(t, c, "restarted", 1)
	if ws[0].PID != second.cmd.Process.Pid {
		t.Errorf("listed worker %+v, want the restarted one (pid %d)", ws[0], second.cmd.Process.Pid)
	}
}

// TestRemoteKill9MidCall kills a session's remote with SIGKILL while a
// call runs: the worker hands the session back at once, claims it again
// and starts a remote in the same state dir, whose journal answers the
// interrupted call, once, as one that may have partly run; it is never
// run again, and the script goes on to finish.
func TestRemoteKill9MidCall(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "remote-killed")
	w, dir := startWorker(t, c, "remote-killed", token)
	t.Cleanup(func() { killInDir(dir) })
	marks := filepath.Join(t.TempDir(), "runs")
	blocked := execStep(fmt.Sprintf("echo ran >> %s; while true; do sleep 0.05; done", marks))
	blocked.ContinueOnError = true
	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: "remote-killed", Title: "remote killed mid-call",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep("echo one"), blocked, execStep("echo three")}},
	})
	waitfor.Within(t, 30*time.Second, "the second call's command to run", func() bool { _, err := os.Stat(marks); return err == nil })
	m := regexp.MustCompile(`msg="remote started" session=` + id + ` pid=(\d+)`).FindStringSubmatch(w.out.String())
	if m == nil {
		t.Fatalf("the worker did not log its remote's pid:\n%s", w.out.String())
	}
	pid, _ := strconv.Atoi(m[1])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s := c.waitFinal(id, 45*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	results := map[int64]int{}
	for _, ev := range c.events(id) {
		if ev.Type == api.EventResult {
			results[ev.CallSeq]++
		}
	}
	if results[1] != 1 || results[2] != 1 || results[3] != 1 {
		t.Errorf("results per call %v, want one each", results)
	}
	if runs, _ := os.ReadFile(marks); strings.Count(string(runs), "ran") != 1 {
		t.Errorf("the interrupted call ran %d times, want once", strings.Count(string(runs), "ran"))
	}
}
