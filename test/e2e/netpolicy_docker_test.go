package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
