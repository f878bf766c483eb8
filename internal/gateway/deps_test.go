package gateway

import (
	"slices"
	"testing"

	"github.com/outpost-sh/outpost/internal/deptest"
)

// TestGatewayImportsNothingAbove: the gateway sits below the server, which
// mounts it and answers its Handler; an import back up would let the
// server's state into the connections' code again, and the state machine
// is the server's to drive, not the gateway's.
func TestGatewayImportsNothingAbove(t *testing.T) {
	t.Parallel()
	const pkg = "github.com/outpost-sh/outpost/internal/gateway"
	deps := deptest.Check(t, pkg,
		deptest.Prefix("github.com/outpost-sh/outpost/internal/server", "the HTTP server mounts the gateway and implements its Handler"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/lifecycle", "the server moves sessions through the state machine when the gateway reports"),
		deptest.Prefix("github.com/prometheus", "the server counts remotes in its Handler"),
	)
	if !slices.Contains(deps, "github.com/coder/websocket") {
		t.Errorf("%s does not depend on github.com/coder/websocket: the dependency list is not the gateway's", pkg)
	}
}
