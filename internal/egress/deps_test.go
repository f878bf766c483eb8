package egress

import (
	"testing"

	"github.com/outpost-sh/outpost/internal/deptest"
)

// TestEgressImportsNothingOfOutpost: the engine is a network component the
// worker and orchestrators wire in; it takes its policy through the Policy
// interface and reports through a callback, so it links no policy model,
// wire type, store or server.
func TestEgressImportsNothingOfOutpost(t *testing.T) {
	t.Parallel()
	deptest.Check(t, "github.com/outpost-sh/outpost/internal/egress",
		deptest.Prefix("github.com/outpost-sh/outpost/internal/netpolicy", "the policy arrives as an egress.Policy"),
		deptest.Prefix("github.com/outpost-sh/outpost/api", "decisions leave as egress.Decision; the caller turns them into events"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/server", "the control plane is not on the worker's enforcement path"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/store", "the engine keeps no durable state"),
		deptest.Prefix("github.com/prometheus", "the caller turns Stats into metrics"),
	)
}
