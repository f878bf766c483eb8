package suspend

import (
	"testing"

	"github.com/outpost-sh/outpost/internal/deptest"
)

// TestSuspendImportsNothingAbove: the exchange sits below the server, which
// answers its errors over HTTP and drives it from its routes and loops; an
// import back up would let the server's handlers into the exchange again.
func TestSuspendImportsNothingAbove(t *testing.T) {
	t.Parallel()
	deptest.Check(t, "github.com/outpost-sh/outpost/internal/suspend",
		deptest.Prefix("github.com/outpost-sh/outpost/internal/server", "the HTTP server drives the exchange and answers its errors"),
	)
}
