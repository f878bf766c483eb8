package client

import (
	"testing"

	"github.com/outpost-sh/outpost/internal/deptest"
)

// TestPublicPackagesLinkNothingInternal: the SDK (client, and the api and
// backoff packages it returns and uses) builds outside this module, which
// cannot import internal packages, so none may depend on one.
func TestPublicPackagesLinkNothingInternal(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{
		"github.com/outpost-sh/outpost/client",
		"github.com/outpost-sh/outpost/api",
		"github.com/outpost-sh/outpost/backoff",
	} {
		deptest.Check(t, pkg, deptest.Prefix("github.com/outpost-sh/outpost/internal",
			"a public package must not depend on internal ones: a module outside this one could not build it"))
	}
}
