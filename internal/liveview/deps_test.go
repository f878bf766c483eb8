package liveview

import (
	"slices"
	"testing"

	"github.com/outpost-sh/outpost/internal/deptest"
)

// TestLiveViewImportsNoServer: the fan-out knows viewers and a remote's
// Send, not HTTP, the gateway's connections or the store; the server
// wires those in through Options.
func TestLiveViewImportsNoServer(t *testing.T) {
	t.Parallel()
	const pkg = "github.com/outpost-sh/outpost/internal/liveview"
	deps := deptest.Check(t, pkg,
		deptest.Prefix("net/http", "the server serves the WebSocket and drives a Viewer"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/server", "the server mounts the hub"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/gateway", "the server hands the hub the remote's connection as a Remote"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/store", "the server records takeovers through Options.Record"),
	)
	if !slices.Contains(deps, "github.com/outpost-sh/outpost/api") {
		t.Errorf("%s does not depend on the api package: the dependency list is not the hub's", pkg)
	}
}
