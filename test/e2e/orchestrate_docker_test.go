//go:build linux

package e2e

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/orchestrator/podmantest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// The docker backend's end-to-end tests run the real binary against
// Podman's Docker-compatible API service and the test image of package
// podmantest (a minimal Debian bookworm with git).

// startDockerOrchestrator runs `outpost orchestrate --backend docker` with
// the test image on the Podman service.
func startDockerOrchestrator(t *testing.T, c *cluster, outpost, token, stateDir, host string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"--backend", "docker", "--docker-host", host, "--docker-image", podmantest.Image, "--docker-network", "host"}, extra...)
	return startOrchestrator(t, c, outpost, token, stateDir, args...)
}

// transcriptOutput is the text of every output event of a session.
func transcriptOutput(c *cluster, id string) string {
	var b strings.Builder
	for _, ev := range c.events(id) {
		if ev.Type == api.EventOutput {
			b.WriteString(ev.Text)
		}
	}
	return b.String()
}

// assertNoContainers waits until no container of the sessions is left and
// no machine workspace either.
func assertNoContainers(t *testing.T, stateDir string, ids ...string) {
	t.Helper()
	waitfor.Within(t, 30*time.Second, "every container and workspace to go", func() bool {
		for _, id := range ids {
			if len(podmantest.Containers(t, "sh.outpost.session="+id)) > 0 {
				return false
			}
		}
		entries, _ := os.ReadDir(filepath.Join(stateDir, "machines"))
		return len(entries) == 0
	})
}

// TestOrchestrateDockerBackend runs sessions in containers: they see the
// image's Debian and git, run in /workspace, finish, and leave no container
// and no workspace. The orchestrator's token is nowhere in a container: not
// in any process's environment or command line, nor in any file.
func TestOrchestrateDockerBackend(t *testing.T) {
	t.Parallel()
	host := podmantest.API(t)
	c := startCluster(t)
	token := setupOutpost(t, c, "dock")
	state := t.TempDir()
	o := startDockerOrchestrator(t, c, "dock", token, state, host, "--max-concurrent", "2", "--docker-cpus", "1", "--docker-memory", "1g")

	id := createSession(t, c, scriptSession("dock", "in a container",
		execStep("cat /etc/os-release; git --version; pwd; id -u"),
		execStep("git init -q repos/demo && cd repos/demo && git -c user.name=t -c user.email=t@e commit -q --allow-empty -m first && git log --oneline | wc -l")))
	// The orchestrator's token in a form that does not give it away in the
	// command: the search below decodes it into a shell variable.
	enc := base64.StdEncoding.EncodeToString([]byte(token))
	spy := createSession(t, c, scriptSession("dock", "look for the token",
		execStep("echo ENV-BEGIN; env; echo ENV-END"),
		execStep("for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do tr '\\0' ' ' < $f; echo; done 2>/dev/null; echo PROC-END"),
		execStep(`T=$(echo `+enc+` | base64 -d); echo GREP-BEGIN; grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -e "$T" / ; echo GREP-END`)))

	assertFinished(t, c.waitFinal(id, 120*time.Second))
	out := transcriptOutput(c, id)
	for _, want := range []string{"bookworm", "git version", "/workspace", "\n1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the session's output lacks %q:\n%s", want, out)
		}
	}

	assertFinished(t, c.waitFinal(spy, 120*time.Second))
	spied := transcriptOutput(c, spy)
	if !strings.Contains(spied, "ENV-END") || !strings.Contains(spied, "PROC-END") || !strings.Contains(spied, "GREP-END") {
		t.Fatalf("the search did not run to its end:\n%s", spied)
	}
	if strings.Contains(spied, token) {
		t.Fatalf("the orchestrator's token is visible in the container:\n%s", spied)
	}
	if _, after, _ := strings.Cut(spied, "GREP-BEGIN"); strings.TrimSpace(strings.Split(after, "GREP-END")[0]) != "" {
		t.Fatalf("files in the container hold the orchestrator's token:\n%s", after)
	}
	env, _, _ := strings.Cut(spied, "ENV-END")
	for _, want := range []string{"OUTPOST_SESSION_ID=" + spy, "OUTPOST_STATE_DIR=/outpost/state", "PWD=/workspace"} {
		if !strings.Contains(env, want) {
			t.Errorf("the container's environment lacks %s:\n%s", want, env)
		}
	}
	if path := os.Getenv("PATH"); strings.Contains(env, "PATH="+path+"\n") {
		t.Errorf("the host's PATH reached the container:\n%s", env)
	}
	if strings.Contains(env, "OUTPOST_TOKEN") || strings.Contains(env, "OUTPOST_SERVER") {
		t.Errorf("the orchestrator's own settings reached the container:\n%s", env)
	}

	assertNoContainers(t, state, id, spy)
	if !strings.Contains(o.out.String(), "docker backend ready") {
		t.Fatalf("the orchestrator did not report the backend:\n%s", o.out.String())
	}
}

// TestOrchestrateDockerKill9Restart kills the orchestrator with SIGKILL in
// the middle of a session in a container and starts it again: the running
// container is adopted (or removed), the session ends, and nothing leaks.
func TestOrchestrateDockerKill9Restart(t *testing.T) {
	t.Parallel()
	host := podmantest.API(t)
	c := startCluster(t)
	token := setupOutpost(t, c, "dockcrash")
	state := t.TempDir()
	first := startDockerOrchestrator(t, c, "dockcrash", token, state, host, "--max-concurrent", "2")
	id := createSession(t, c, scriptSession("dockcrash", "orchestrator crash",
		execStep("echo one"),
		execStep("while [ ! -e /tmp/gate ]; do sleep 0.05; done; echo two"),
		execStep("echo three")))
	waitEvent(t, c, id, "the second call to start", func(ev api.Event) bool { return ev.Type == api.EventCall && ev.CallSeq == 2 })

	first.kill9()
	name := "outpost-" + id
	if got := podmantest.Containers(t, "sh.outpost.session="+id); len(got) != 1 || got[0] != name {
		t.Fatalf("the container should outlive the crash: %v", got)
	}
	if out, err := exec.Command("podman", "inspect", name).CombinedOutput(); err != nil || strings.Contains(string(out), token) {
		t.Fatalf("podman inspect %s (the orchestrator's token must not be in it): %v\n%s", name, err, out)
	}
	second := startDockerOrchestrator(t, c, "dockcrash", token, state, host, "--max-concurrent", "2")
	waitfor.Within(t, 30*time.Second, "the restarted orchestrator to deal with the container", func() bool {
		out := second.out.String()
		return strings.Contains(out, "adopted leftover machine") || strings.Contains(out, "removing leftover machine")
	})
	// Open the gate in the session's container (a new one, if the old one
	// was removed and the session provisioned again).
	var s api.Session
	waitfor.Within(t, 120*time.Second, "the session to end", func() bool {
		_ = exec.Command("podman", "exec", name, "touch", "/tmp/gate").Run()
		s = c.session(id)
		return api.IsFinal(s.Status.Status)
	})
	if strings.Contains(second.out.String(), "adopted leftover machine") {
		assertFinished(t, s)
		if out := transcriptOutput(c, id); !strings.Contains(out, "three") {
			t.Errorf("the adopted session did not run its last step:\n%s", out)
		}
	}
	assertNoContainers(t, state, id)

	// SIGTERM tears a running container down and releases its claim.
	long := createSession(t, c, scriptSession("dockcrash", "long", execStep("sleep 600")))
	waitEvent(t, c, long, "the call to start", func(ev api.Event) bool { return ev.Type == api.EventCall })
	if err := second.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("orchestrator exit after SIGTERM: %v", err)
	}
	var e api.QueueEntry
	if code := c.api("GET", "/v1/queue/"+long, c.admin, nil, &e); code != 200 || e.Status.Phase != api.PhasePending {
		t.Fatalf("entry after SIGTERM: %d %+v", code, e.Status)
	}
	assertNoContainers(t, state, long)
	t.Logf("restarted orchestrator:\n%s", second.out.String())
}

// TestOrchestrateDockerBurstAndFailure creates 8 sessions at once for an
// orchestrator with --max-concurrent 3: never more than 3 containers exist,
// all finish and none is left. Then an orchestrator whose containers cannot
// start releases the claim at once and leaves no container.
func TestOrchestrateDockerBurstAndFailure(t *testing.T) {
	t.Parallel()
	host := podmantest.API(t)
	c := startCluster(t)
	token := setupOutpost(t, c, "dockburst")
	state := t.TempDir()
	sampler := sampleMachines(state)
	o := startDockerOrchestrator(t, c, "dockburst", token, state, host, "--max-concurrent", "3")
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			ids[i] = createSession(t, c, scriptSession("dockburst", fmt.Sprintf("burst %d", i), execStep("sleep 0.2; echo done")))
		})
	}
	wg.Wait()
	for _, id := range ids {
		assertFinished(t, c.waitFinal(id, 180*time.Second))
	}
	most, _ := sampler.finish()
	if most > 3 || most == 0 {
		t.Fatalf("saw %d machines at once, want 1 to 3", most)
	}
	assertNoContainers(t, state, ids...)
	if err := o.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("orchestrator exit after SIGTERM: %v", err)
	}

	// The runtime refuses the container: the claim comes back at once.
	failing := startDockerOrchestrator(t, c, "dockburst", token, t.TempDir(), host,
		"--docker-ulimit", "nofile=4000000000:4000000000", "--retry-after", "5m")
	id := createSession(t, c, scriptSession("dockburst", "cannot start", execStep("echo never")))
	waitfor.Within(t, 30*time.Second, "provisioning to fail", func() bool {
		return strings.Contains(failing.out.String(), "provisioning failed")
	})
	waitfor.Within(t, 10*time.Second, "the entry to be pending again", func() bool {
		var e api.QueueEntry
		return c.api("GET", "/v1/queue/"+id, c.admin, nil, &e) == 200 && e.Status.Phase == api.PhasePending && e.Status.AcceptorID == nil
	})
	if got := podmantest.Containers(t, "sh.outpost.session="+id); len(got) != 0 {
		t.Fatalf("containers left after a failed start: %v", got)
	}
}

// TestOrchestrateDockerUsage: the docker backend needs an image.
func TestOrchestrateDockerUsage(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "orchestrate", "--outpost", "x", "--backend", "docker", "--state-dir", t.TempDir())
	cmd.Env = append(os.Environ(), "OUTPOST_SERVER=http://127.0.0.1:1", "OUTPOST_TOKEN=opt_x")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--docker-image") {
		t.Fatalf("orchestrate --backend docker without an image: %v\n%s", err, out)
	}
}
