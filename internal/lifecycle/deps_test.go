package lifecycle

import (
	"slices"
	"testing"

	"github.com/outpost-sh/outpost/internal/deptest"
)

// TestLifecycleImportsNothingAbove: the state machine sits below the
// server and the agent loop, which call it; an import back up would let
// HTTP answers and connections into its decisions again.
func TestLifecycleImportsNothingAbove(t *testing.T) {
	t.Parallel()
	const pkg = "github.com/outpost-sh/outpost/internal/lifecycle"
	deps := deptest.Check(t, pkg,
		deptest.Prefix("github.com/outpost-sh/outpost/internal/server", "the HTTP server calls the state machine"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/agent", "the agent loop ends sessions through the state machine"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/gateway", "remote connections are the server's; the state machine learns of them through its hooks"),
		deptest.Prefix("net/http", "status codes are chosen at the server's edge"),
		deptest.Prefix("github.com/prometheus", "metrics follow a committed change, in the server"),
	)
	if !slices.Contains(deps, "github.com/outpost-sh/outpost/internal/store") {
		t.Errorf("%s does not depend on internal/store: the dependency list is not the state machine's", pkg)
	}
}
