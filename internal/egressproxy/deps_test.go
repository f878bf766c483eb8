package egressproxy

import (
	"testing"

	"github.com/outpost-sh/outpost/internal/deptest"
)

// TestEgressProxyImportsNoOperator: the proxy is a network component the
// operator wires in through Options (sessions, reports); it links no
// Kubernetes library, server, store or metrics, so it can be tested and
// reused on its own.
func TestEgressProxyImportsNoOperator(t *testing.T) {
	t.Parallel()
	deptest.Check(t, "github.com/outpost-sh/outpost/internal/egressproxy",
		deptest.Prefix("k8s.io", "the operator turns pools and Secrets into Options"),
		deptest.Prefix("sigs.k8s.io", "the operator turns pools and Secrets into Options"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/operator", "the operator wires the proxy in, not the other way"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/server", "the control plane is not on the proxy's path"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/store", "the proxy keeps no durable state"),
		deptest.Prefix("github.com/prometheus", "decisions leave through Options.Report; the caller counts them"),
	)
}
