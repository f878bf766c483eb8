//go:build linux

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
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

// startOrchestrator runs `outpost orchestrate` with its state in stateDir.
func startOrchestrator(t *testing.T, c *cluster, outpost, token, stateDir string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"orchestrate", "--outpost", outpost, "--state-dir", stateDir, "--poll-interval", "2s"}, extra...)
	return start(t, "orchestrator", c.env(token), args...)
}

// machineSampler watches the state dir's machine workspaces while a test
// runs: the most seen at once, and every remote pid.
type machineSampler struct {
	dir  string
	mu   sync.Mutex
	max  int
	pids map[int]bool
	stop chan struct{}
	done chan struct{}
}

func sampleMachines(stateDir string) *machineSampler {
	s := &machineSampler{dir: filepath.Join(stateDir, "machines"), pids: map[int]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *machineSampler) sample() {
	entries, _ := os.ReadDir(s.dir)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.max = max(s.max, len(entries))
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join(s.dir, e.Name(), "pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				s.pids[pid] = true
			}
		}
	}
}

func (s *machineSampler) finish() (int, map[int]bool) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max, s.pids
}

// processAlive reports whether pid runs and is not a zombie.
func processAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || (b[i+2] != 'Z' && b[i+2] != 'X')
}

// assertNothingLeft waits until no workspace and no remote process is left.
func assertNothingLeft(t *testing.T, stateDir string, pids map[int]bool) {
	t.Helper()
	waitfor.Within(t, 30*time.Second, "every workspace and remote process to go", func() bool {
		entries, _ := os.ReadDir(filepath.Join(stateDir, "machines"))
		if len(entries) > 0 {
			return false
		}
		for pid := range pids {
			if processAlive(pid) {
				return false
			}
		}
		return true
	})
}

func scriptSession(outpost, title string, steps ...api.Step) api.CreateSessionRequest {
	return api.CreateSessionRequest{Outpost: outpost, Title: title,
		Agent: api.Agent{Kind: api.AgentScript, Steps: steps}}
}

func assertFinished(t *testing.T, s api.Session) {
	t.Helper()
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session %s ended %s/%s: %s", s.Metadata.SessionID, s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
}

// TestOrchestrateProcessBackend runs sessions on the process backend: they
// finish, and no workspace or process of theirs is left.
func TestOrchestrateProcessBackend(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "orch")
	state := t.TempDir()
	sampler := sampleMachines(state)
	startOrchestrator(t, c, "orch", token, state, "--backend", "process", "--max-concurrent", "2")
	var ids []string
	for i := range 3 {
		ids = append(ids, createSession(t, c, scriptSession("orch", fmt.Sprintf("orch %d", i),
			execStep("echo hello; sleep 0.3"), execStep("pwd"))))
	}
	for _, id := range ids {
		assertFinished(t, c.waitFinal(id, 90*time.Second))
	}
	most, pids := sampler.finish()
	if len(pids) == 0 || most == 0 {
		t.Fatalf("never saw a machine workspace (max %d, pids %v)", most, pids)
	}
	assertNothingLeft(t, state, pids)
	for _, id := range ids {
		assertMachineSteps(t, c, id, api.MachineStepCreate, api.MachineStepStart, api.MachineStepTeardown)
	}
}

// assertMachineSteps waits until the session's transcript shows the
// orchestrator's provisioning steps, in this order (others may come
// between).
func assertMachineSteps(t *testing.T, c *cluster, id string, want ...string) []api.Event {
	t.Helper()
	var got []api.Event
	waitfor.Within(t, 20*time.Second, "provisioning steps "+strings.Join(want, ",")+" on the transcript", func() bool {
		var list api.EventList
		if c.api("GET", "/v1/sessions/"+id+"/events?limit=1000", c.admin, nil, &list) != 200 {
			return false
		}
		got = got[:0]
		i := 0
		for _, ev := range list.Items {
			if ev.Type != api.EventMachine {
				continue
			}
			got = append(got, ev)
			if i < len(want) && ev.Step == want[i] {
				i++
			}
		}
		return i == len(want)
	})
	for _, ev := range got {
		if ev.Machine != "outpost-"+id || ev.Backend == "" || ev.Reason == "" {
			t.Fatalf("machine event lacks its machine, backend or message: %+v", ev)
		}
	}
	return got
}

// TestOrchestrateBurstHonoursMaxConcurrent creates 50 sessions at once for
// an orchestrator with --max-concurrent 4: never more than 4 machines exist
// at once, and all 50 finish.
func TestOrchestrateBurstHonoursMaxConcurrent(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "burst")
	state := t.TempDir()
	sampler := sampleMachines(state)
	startOrchestrator(t, c, "burst", token, state, "--backend", "process", "--max-concurrent", "4")
	ids := make([]string, 50)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			ids[i] = createSession(t, c, scriptSession("burst", fmt.Sprintf("burst %d", i), execStep("sleep 0.2; echo done")))
		})
	}
	wg.Wait()
	for _, id := range ids {
		assertFinished(t, c.waitFinal(id, 180*time.Second))
	}
	most, pids := sampler.finish()
	if most > 4 {
		t.Fatalf("saw %d machine workspaces at once, want at most 4", most)
	}
	if most == 0 {
		t.Fatal("never saw a machine workspace")
	}
	assertNothingLeft(t, state, pids)
}

// TestOrchestrateExecProvisionFailureReleases uses an exec backend whose
// provision command fails: the claim is released at once, far before the
// claim TTL, the transcript and status say why, and a second orchestrator
// on the same outpost serves the session.
func TestOrchestrateExecProvisionFailureReleases(t *testing.T) {
	t.Parallel()
	c := startCluster(t) // the claim TTL is the default 300s
	token := setupOutpost(t, c, "failing")
	state := t.TempDir()
	o := startOrchestrator(t, c, "failing", token, state, "--backend", "exec",
		"--provision-cmd", "echo no capacity >&2; exit 3", "--teardown-cmd", "true", "--retry-after", "5m")
	start := time.Now()
	id := createSession(t, c, scriptSession("failing", "cannot provision", execStep("echo never")))
	waitfor.Within(t, 30*time.Second, "provisioning to fail", func() bool {
		return strings.Contains(o.out.String(), "provisioning failed")
	})
	waitfor.Within(t, 10*time.Second, "the entry to be pending again", func() bool {
		var e api.QueueEntry
		return c.api("GET", "/v1/queue/"+id, c.admin, nil, &e) == 200 && e.Status.Phase == api.PhasePending && e.Status.AcceptorID == nil
	})
	if took := time.Since(start); took > 60*time.Second {
		t.Fatalf("the claim came back after %s", took)
	}
	if !strings.Contains(o.out.String(), "claim released") {
		t.Fatalf("the orchestrator did not log the release:\n%s", o.out.String())
	}
	entries, _ := os.ReadDir(filepath.Join(state, "machines"))
	if len(entries) != 0 {
		t.Fatalf("workspaces left after failed provisioning: %v", entries)
	}
	steps := assertMachineSteps(t, c, id, api.MachineStepCreate, api.MachineStepFailed)
	if failed := steps[len(steps)-1]; !strings.Contains(failed.Reason, "no capacity") || !strings.Contains(failed.Reason, "exit status 3") {
		t.Fatalf("the failed step does not say why: %+v", failed)
	}
	var s api.Session
	c.api("GET", "/v1/sessions/"+id, c.admin, nil, &s)
	if !strings.Contains(s.Status.Reason, "no capacity") {
		t.Fatalf("the session's status does not say why provisioning failed: %q", s.Status.Reason)
	}
	// The web UI's session page shows the steps too.
	req, _ := http.NewRequest("GET", c.url+"/ui/sessions/"+id, nil)
	req.AddCookie(&http.Cookie{Name: "outpost_token", Value: c.admin})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"machine create", "machine failed", "no capacity", "outpost-" + id} {
		if !strings.Contains(string(page), want) {
			t.Fatalf("the session page lacks %q (status %d)", want, resp.StatusCode)
		}
	}

	// Another orchestrator on the same outpost serves it.
	startOrchestrator(t, c, "failing", token, t.TempDir(), "--backend", "process")
	assertFinished(t, c.waitFinal(id, 90*time.Second))
}

// TestOrchestrateKill9Restart kills the orchestrator with SIGKILL in the
// middle of a session and starts it again on the same state dir: the
// session is not stuck (it finishes), and no workspace or process leaks.
func TestOrchestrateKill9Restart(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "crash")
	state := t.TempDir()
	sampler := sampleMachines(state)
	first := startOrchestrator(t, c, "crash", token, state, "--backend", "process", "--max-concurrent", "2")
	gate := filepath.Join(t.TempDir(), "gate")
	id := createSession(t, c, scriptSession("crash", "orchestrator crash",
		execStep("echo one"),
		execStep(fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done; echo two", gate)),
		execStep("echo three")))
	waitEvent(t, c, id, "the second call to start", func(ev api.Event) bool { return ev.Type == api.EventCall && ev.CallSeq == 2 })

	first.kill9()
	ws := filepath.Join(state, "machines", "outpost-"+id)
	if _, err := os.Stat(ws); err != nil {
		t.Fatalf("the workspace should outlive the crash: %v", err)
	}
	second := startOrchestrator(t, c, "crash", token, state, "--backend", "process", "--max-concurrent", "2")
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	assertFinished(t, c.waitFinal(id, 120*time.Second))
	_, pids := sampler.finish()
	if len(pids) == 0 {
		t.Fatal("never saw a remote pid")
	}
	assertNothingLeft(t, state, pids)
	if !strings.Contains(second.out.String(), "adopted leftover machine") && !strings.Contains(second.out.String(), "removing leftover machine") {
		t.Fatalf("the restarted orchestrator did not deal with the leftover machine:\n%s", second.out.String())
	}
	t.Logf("restarted orchestrator:\n%s", second.out.String())
}

// TestOrchestrateExecBackendAndSIGTERM runs a session on the exec backend
// (the local example of docs/orchestration.md), checks the metrics, then
// stops the orchestrator with SIGTERM while a second session runs: it exits
// 0, the machine is torn down and the claim released at once.
func TestOrchestrateExecBackendAndSIGTERM(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "execs")
	state := t.TempDir()
	metrics := freeAddr(t)
	envDir := t.TempDir()
	o := startOrchestrator(t, c, "execs", token, state, "--backend", "exec", "--max-concurrent", "2", "--metrics-listen", metrics,
		"--provision-cmd", `env > `+envDir+`/"$OUTPOST_SESSION_ID".env; mkdir -p state work && cd work && { setsid "$OUTPOST_BIN" remote serve >../remote.log 2>&1 & echo $! > "$OUTPOST_WORKSPACE/pid"; }`,
		// A pid file outlives its process and pids are reused (they wrap
		// around during a test run): signal the pid only while it is the
		// remote working in this machine's directory.
		"--teardown-cmd", `pid=$(cat "$OUTPOST_WORKSPACE/pid") && [ "$(readlink /proc/$pid/cwd)" = "$OUTPOST_WORKSPACE/work" ] && kill -TERM -- "-$pid" "$pid" 2>/dev/null; true`,
		"--status-cmd", `pid=$(cat "$OUTPOST_WORKSPACE/pid") && [ "$(readlink /proc/$pid/cwd)" = "$OUTPOST_WORKSPACE/work" ]`)
	sampler := sampleMachines(state)
	id := createSession(t, c, scriptSession("execs", "exec backend", execStep("echo via exec")))
	waitfor.Within(t, 30*time.Second, "the provision command's environment", func() bool {
		b, err := os.ReadFile(filepath.Join(envDir, id+".env"))
		if err != nil || !strings.Contains(string(b), "OUTPOST_CONNECT_TOKEN=") {
			return false
		}
		if strings.Contains(string(b), token) {
			t.Fatalf("the orchestrator's token reached the machine")
		}
		for _, k := range []string{"OUTPOST_SESSION_ID=" + id, "OUTPOST_GATEWAY_URL=", "OUTPOST_PLATFORM=linux", "OUTPOST_WORKSPACE="} {
			if !strings.Contains(string(b), k) {
				t.Fatalf("provision env lacks %s:\n%s", k, b)
			}
		}
		return true
	})
	assertFinished(t, c.waitFinal(id, 90*time.Second))

	long := createSession(t, c, scriptSession("execs", "long", execStep("sleep 600")))
	waitEvent(t, c, long, "the call to start", func(ev api.Event) bool { return ev.Type == api.EventCall })
	// The orchestrator is on the outpost's list of connected acceptors.
	waitfor.Within(t, 10*time.Second, "the orchestrator among the connected workers", func() bool {
		var l api.WorkerList
		if c.api("GET", "/v1/outposts/execs/workers", c.admin, nil, &l) != 200 || len(l.Items) != 1 {
			return false
		}
		w := l.Items[0]
		return w.Kind == api.WorkerKindOrchestrator && w.MaxSessions == 2 && w.ActiveSessions == 1
	})
	var body string
	waitfor.Within(t, 10*time.Second, "metrics", func() bool {
		out, err := httpGet("http://" + metrics + "/metrics")
		body = out
		return err == nil && strings.Contains(out, "outpost_orchestrator_machines_active 1")
	})
	for _, m := range []string{"outpost_orchestrator_provision_seconds_count 2", "outpost_orchestrator_claims_held 1"} {
		if !strings.Contains(body, m) {
			t.Fatalf("metrics lack %q:\n%s", m, body)
		}
	}
	if err := o.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("orchestrator exit after SIGTERM: %v", err)
	}
	var e api.QueueEntry
	if code := c.api("GET", "/v1/queue/"+long, c.admin, nil, &e); code != 200 || e.Status.Phase != api.PhasePending {
		t.Fatalf("entry after SIGTERM: %d %+v", code, e.Status)
	}
	var l api.WorkerList
	if code := c.api("GET", "/v1/outposts/execs/workers", c.admin, nil, &l); code != 200 || len(l.Items) != 0 {
		t.Fatalf("the orchestrator did not say goodbye: %d %+v", code, l.Items)
	}
	_, pids := sampler.finish()
	assertNothingLeft(t, state, pids)
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
