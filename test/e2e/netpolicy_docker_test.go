//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/orchestrator/podmantest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// bashFetch fetches with bash's /dev/tcp: the test image has no curl.
func bashFetch(host, port string, secs int) string {
	return fmt.Sprintf(`timeout %d bash -c 'exec 3<>/dev/tcp/%s/%s && printf "GET / HTTP/1.0\r\nHost: %s\r\n\r\n" >&3 && tail -n1 <&3 | grep .'`,
		secs, host, port, host)
}

// dockerEnforcer is `outpost orchestrate --backend docker` on the Podman
// service: it must say it enforces network policies (no warning at start),
// and leave neither the session's container nor its namespace's holder.
func dockerEnforcer(t *testing.T) enforcer {
	host := podmantest.API(t)
	state := t.TempDir()
	return enforcer{name: "docker", fetch: bashFetch,
		start: func(t *testing.T, c *cluster, outpost, token string) *proc {
			p := startDockerOrchestrator(t, c, outpost, token, state, host)
			waitfor.Within(t, 60*time.Second, "the docker orchestrator to start", func() bool {
				return strings.Contains(p.out.String(), "orchestrator ready")
			})
			if strings.Contains(p.out.String(), "left to other orchestrators") {
				t.Fatalf("the docker backend does not enforce network policies here:\n%s", p.out.String())
			}
			return p
		},
		after: func(t *testing.T, id string) { assertNoContainers(t, state, id) },
	}
}

// TestNetworkPolicyDockerRestart kills `outpost orchestrate --backend
// docker` with SIGKILL while a restricted session runs in a container:
// the session's enforcement point died with it, so the restarted
// orchestrator adopts nothing, removes the container and its namespace's
// holder, and the session runs again on a fresh machine behind a fresh
// enforcement point, ending with nothing left.
func TestNetworkPolicyDockerRestart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: restricted sessions need network namespaces")
	}
	t.Parallel()
	host := podmantest.API(t)
	c := startCluster(t)
	token := setupOutpost(t, c, "netdockcrash")
	state := t.TempDir()
	first := startDockerOrchestrator(t, c, "netdockcrash", token, state, host)
	req := scriptSession("netdockcrash", "restricted orchestrator crash",
		execStep("echo one"),
		execStep("while [ ! -e /tmp/gate ]; do sleep 0.05; done; echo two"))
	req.NetworkPolicy = &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "allowed.test"}}}
	id := createSession(t, c, req)
	waitEvent(t, c, id, "the second call to start", func(ev api.Event) bool { return ev.Type == api.EventCall && ev.CallSeq == 2 })
	if strings.Contains(first.out.String(), "left to other orchestrators") {
		t.Fatalf("the docker backend does not enforce network policies here:\n%s", first.out.String())
	}

	first.kill9()
	name := "outpost-" + id
	got := podmantest.Containers(t, "sh.outpost.session="+id)
	slices.Sort(got)
	if want := []string{name, name + "-netns"}; !slices.Equal(got, want) {
		t.Fatalf("containers after the crash: %v, want %v", got, want)
	}
	second := startDockerOrchestrator(t, c, "netdockcrash", token, state, host)
	waitfor.Within(t, 60*time.Second, "the restarted orchestrator to remove the restricted machine", func() bool {
		return strings.Contains(second.out.String(), "removing the leftover machine of a restricted session")
	})
	var s api.Session
	waitfor.Within(t, 120*time.Second, "the session to end on a fresh machine", func() bool {
		_ = exec.Command("podman", "exec", name, "touch", "/tmp/gate").Run()
		s = c.session(id)
		return api.IsFinal(s.Status.Status)
	})
	if strings.Contains(second.out.String(), "adopted leftover machine") {
		t.Errorf("the restarted orchestrator adopted a restricted session's machine:\n%s", second.out.String())
	}
	if !strings.Contains(transcriptOutput(c, id), "two") {
		t.Errorf("the session did not run again to its end (%s/%s: %s):\n%s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason, transcriptOutput(c, id))
	}
	assertNoContainers(t, state, id)
	if t.Failed() {
		t.Logf("restarted orchestrator:\n%s", tail(second.out.String(), 6000))
	}
}
