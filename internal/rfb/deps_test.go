package rfb

import (
	"testing"

	"github.com/outpost-sh/outpost/internal/deptest"
)

// TestRFBImportsNothingOfOutpost: the server knows the protocol, a
// listener and images; what the framebuffer shows and where input goes is
// its caller's (the CLI), so it depends on no package of this module.
func TestRFBImportsNothingOfOutpost(t *testing.T) {
	t.Parallel()
	deptest.Check(t, "github.com/outpost-sh/outpost/internal/rfb",
		deptest.Prefix("github.com/outpost-sh/outpost/", "the caller feeds frames and takes input through Options"),
		deptest.Prefix("net/http", "the server listens on a net.Listener it is handed"))
}
