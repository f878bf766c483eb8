package queuefeed

import (
	"testing"

	"github.com/outpost-sh/outpost/internal/deptest"
)

// TestQueueFeedImportsNothingAbove: the feed sits below the server, which
// serves the watch route and notifies the feed; an import back up would
// tie the fan-out to the server's state and to the state machine whose
// hooks feed it.
func TestQueueFeedImportsNothingAbove(t *testing.T) {
	t.Parallel()
	deptest.Check(t, "github.com/outpost-sh/outpost/internal/queuefeed",
		deptest.Prefix("github.com/outpost-sh/outpost/internal/server", "the HTTP server serves the watch route and notifies the feed"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/lifecycle", "the state machine's hooks reach the feed through the server"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/gateway", "remote connections have nothing to do with queue watches"),
		deptest.Prefix("net/http", "the server decides a stream's headers and holds its connection"),
		deptest.Prefix("github.com/prometheus", "the server registers the metrics"),
	)
}
