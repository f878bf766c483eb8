//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// requireBwrap skips a test without bubblewrap, unless CI is set: CI
// installs it, so there its absence fails the test.
func requireBwrap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but bwrap is missing (apt-get install bubblewrap): %v", err)
		}
		t.Skip("bwrap not installed (apt-get install bubblewrap)")
	}
}

// sandboxSampler records the pid namespace of every bwrap sandbox seen in
// a state dir (from each workspace's bwrap.json), to check afterwards
// that none has a process left.
type sandboxSampler struct {
	dir  string
	mu   sync.Mutex
	ns   map[uint64]bool
	stop chan struct{}
	done chan struct{}
}

func sampleSandboxes(stateDir string) *sandboxSampler {
	s := &sandboxSampler{dir: filepath.Join(stateDir, "machines"), ns: map[uint64]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			entries, _ := os.ReadDir(s.dir)
			for _, e := range entries {
				b, err := os.ReadFile(filepath.Join(s.dir, e.Name(), "bwrap.json"))
				if err != nil {
					continue
				}
				var st struct {
					NS uint64 `json:"pid-namespace"`
				}
				if json.NewDecoder(strings.NewReader(string(b))).Decode(&st) == nil && st.NS != 0 {
					s.mu.Lock()
					s.ns[st.NS] = true
					s.mu.Unlock()
				}
			}
			select {
			case <-s.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *sandboxSampler) finish() map[uint64]bool {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ns
}

// sandboxProcesses lists the live processes of the given pid namespaces.
func sandboxProcesses(ns map[uint64]bool) []int {
	links := map[string]bool{}
	for n := range ns {
		links[fmt.Sprintf("pid:[%d]", n)] = true
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && links[l] && processAlive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// assertNoSandboxLeft waits until no workspace, supervisor or sandbox
// process is left.
func assertNoSandboxLeft(t *testing.T, state string, pids map[int]bool, ns map[uint64]bool) {
	t.Helper()
	if len(ns) == 0 {
		t.Fatal("never saw a sandbox's pid namespace")
	}
	assertNothingLeft(t, state, pids)
	// A torn-down sandbox's processes are killed with its pid namespace;
	// the wait is for the kernel to reap them, which a loaded machine can
	// take seconds to do.
	waitfor.Within(t, 30*time.Second, "every sandbox process to go", func() bool { return len(sandboxProcesses(ns)) == 0 })
}

// transcriptJSON is the whole transcript of a session, as JSON.
func transcriptJSON(t *testing.T, c *cluster, id string) string {
	t.Helper()
	b, err := json.Marshal(c.events(id))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// leakProbe dumps what a sandboxed agent can read: its environment, every
// command line and environment in its /proc, and every token-like string
// in the directories it can read and write.
const leakProbe = `env; echo
for p in /proc/[0-9]*; do echo "proc ${p#/proc/} $(cat $p/comm)"; tr '\0' ' ' < $p/cmdline; echo; tr '\0' '\n' < $p/environ; done
grep -rIsho 'opt_[A-Za-z0-9_-]*' /outpost /workspace /home /tmp /etc /opt /run 2>/dev/null | sort -u | head -50
echo "home=$HOME"; ls -a /home; echo probe-done`

// TestOrchestrateBwrapBackend runs script sessions in bwrap sandboxes:
// they finish, the orchestrator's token is nowhere the agent can look, and
// no workspace, supervisor or sandbox process is left.
func TestOrchestrateBwrapBackend(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "sandboxed")
	state := t.TempDir()
	machines, sandboxes := sampleMachines(state), sampleSandboxes(state)
	o := startOrchestrator(t, c, "sandboxed", token, state, "--backend", "bwrap", "--max-concurrent", "2")
	probe := createSession(t, c, scriptSession("sandboxed", "leak probe", execStep(leakProbe)))
	var ids []string
	for i := range 3 {
		ids = append(ids, createSession(t, c, scriptSession("sandboxed", fmt.Sprintf("bwrap %d", i),
			execStep("echo hello; sleep 0.3"), execStep("pwd; touch /usr/x || echo usr-read-only"))))
	}
	for _, id := range append(ids, probe) {
		assertFinished(t, c.waitFinal(id, 90*time.Second))
	}
	tr := transcriptJSON(t, c, probe)
	// The probe saw the remote's process; its environment (the connect
	// token) is not readable, as the remote is not dumpable.
	if !strings.Contains(tr, "probe-done") || !strings.Contains(tr, "proc 2 outpost") {
		t.Fatalf("the probe did not run:\n%s", tr)
	}
	if strings.Contains(tr, token) {
		t.Fatalf("the orchestrator's token is visible in the sandbox:\n%s", tr)
	}
	for _, want := range []string{"HOME=/home/outpost", "OUTPOST_STATE_DIR=/outpost/state", "proc 1 bwrap", "proc 2 outpost"} {
		if !strings.Contains(tr, want) {
			t.Errorf("the probe's output lacks %q", want)
		}
	}
	for _, id := range ids {
		tr := transcriptJSON(t, c, id)
		if !strings.Contains(tr, "/workspace") || !strings.Contains(tr, "usr-read-only") {
			t.Errorf("session %s did not run in the sandbox:\n%s", id, tr)
		}
	}

	// SIGTERM with a session running: the sandbox is torn down and the
	// claim released at once.
	long := createSession(t, c, scriptSession("sandboxed", "long", execStep("sleep 600 & sleep 600")))
	waitEvent(t, c, long, "the call to start", func(ev api.Event) bool { return ev.Type == api.EventCall })
	if err := o.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("orchestrator exit after SIGTERM: %v", err)
	}
	var e api.QueueEntry
	if code := c.api("GET", "/v1/queue/"+long, c.admin, nil, &e); code != 200 || e.Status.Phase != api.PhasePending {
		t.Fatalf("entry after SIGTERM: %d %+v", code, e.Status)
	}
	most, pids := machines.finish()
	if most == 0 || len(pids) == 0 {
		t.Fatalf("never saw a machine workspace (max %d, pids %v)", most, pids)
	}
	assertNoSandboxLeft(t, state, pids, sandboxes.finish())
}

// TestOrchestrateBwrapKill9Restart kills the orchestrator with SIGKILL in
// the middle of a sandboxed session: the sandbox outlives it (its
// supervisor, not the orchestrator, is bwrap's parent), the restarted
// orchestrator adopts it, the session finishes and nothing leaks.
func TestOrchestrateBwrapKill9Restart(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "sandcrash")
	state := t.TempDir()
	machines, sandboxes := sampleMachines(state), sampleSandboxes(state)
	gate := t.TempDir()
	args := []string{"--backend", "bwrap", "--max-concurrent", "2", "--bwrap-ro-bind", gate + ":/gate"}
	first := startOrchestrator(t, c, "sandcrash", token, state, args...)
	id := createSession(t, c, scriptSession("sandcrash", "orchestrator crash",
		execStep("echo one"),
		execStep("while [ ! -e /gate/go ]; do sleep 0.05; done; echo two"),
		execStep("echo three")))
	waitEvent(t, c, id, "the second call to start", func(ev api.Event) bool { return ev.Type == api.EventCall && ev.CallSeq == 2 })

	first.kill9()
	ws := filepath.Join(state, "machines", "outpost-"+id)
	b, err := os.ReadFile(filepath.Join(ws, "pid"))
	if err != nil {
		t.Fatalf("the workspace should outlive the crash: %v", err)
	}
	sup, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	time.Sleep(300 * time.Millisecond)
	if !processAlive(sup) {
		t.Fatalf("the sandbox's supervisor %d died with the orchestrator", sup)
	}
	second := startOrchestrator(t, c, "sandcrash", token, state, args...)
	waitfor.Within(t, 30*time.Second, "the restarted orchestrator to adopt the sandbox", func() bool {
		return strings.Contains(second.out.String(), "adopted leftover machine")
	})
	if err := os.WriteFile(filepath.Join(gate, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := c.waitFinal(id, 120*time.Second)
	assertFinished(t, s)
	tr := transcriptJSON(t, c, id)
	if !strings.Contains(tr, "two") || !strings.Contains(tr, "three") {
		t.Fatalf("the session did not go on in the adopted sandbox:\n%s", tr)
	}
	_, pids := machines.finish()
	assertNoSandboxLeft(t, state, pids, sandboxes.finish())
	t.Logf("restarted orchestrator:\n%s", second.out.String())
}
