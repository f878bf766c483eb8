package server

import (
	"fmt"
	"net/http"

	"github.com/outpost-sh/outpost/internal/dist"
)

// distPrefix is where remote builds are published, in the public layout
// (package dist): <public-url>/dist/latest_<platform>, …
const distPrefix = "/dist/"

// newDistHandler publishes this executable's build and the builds of
// opts.DistDir, whose files win.
func newDistHandler(opts Options) (http.Handler, error) {
	h, err := dist.NewHandler(dist.HandlerOptions{Dir: opts.DistDir, Logger: opts.Logger.With("component", "dist")})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return h, nil
}

// checkRemoteBinarySHA refuses a pin that is not a version id; "" (no pin)
// is fine.
func checkRemoteBinarySHA(pin string) error {
	if pin != "" && !dist.ValidID(pin) {
		return errBadRequest("remote_binary_sha %q is not a remote version id: use 6 to 40 lower-case hex digits, such as the first 12 of a git commit.", pin)
	}
	return nil
}
