package remote

import (
	"slices"
	"testing"

	"github.com/outpost-sh/outpost/internal/deptest"
)

// TestRemoteLinksNoControlPlane: the remote runs on every session's machine
// and needs only the gateway, the tools and the api types; the control
// plane's server, stores, model providers and metrics, the Docker client
// of orchestrators and the operator's Kubernetes client, stay out of its binary's graph.
func TestRemoteLinksNoControlPlane(t *testing.T) {
	t.Parallel()
	const pkg = "github.com/outpost-sh/outpost/internal/remote"
	deps := deptest.Check(t, pkg,
		deptest.Prefix("github.com/outpost-sh/outpost/internal/server", "the control plane's HTTP server"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/store", "the control plane's stores"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/llm", "the model providers run in the control plane"),
		deptest.Prefix("github.com/docker", "the Docker client belongs to orchestrators"),
		deptest.Prefix("github.com/jackc/pgx", "PostgreSQL is the control plane's store"),
		deptest.Prefix("modernc.org/sqlite", "SQLite is the control plane's store"),
		deptest.Prefix("github.com/prometheus", "metrics are the control plane's"),
		deptest.Contains("anthropic", "model SDKs run in the control plane"),
		deptest.Contains("openai", "model SDKs run in the control plane"),
		deptest.Prefix("k8s.io/", "the Kubernetes client belongs to the operator"),
		deptest.Prefix("sigs.k8s.io/", "controller-runtime belongs to the operator"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/operator", "the Kubernetes operator"),
	)
	// The guard looks at the real graph: the remote does link the gateway
	// client and the wire types.
	for _, want := range []string{"github.com/coder/websocket", "github.com/outpost-sh/outpost/api"} {
		if !slices.Contains(deps, want) {
			t.Errorf("%s does not depend on %s: the dependency list is not the remote's", pkg, want)
		}
	}
}
