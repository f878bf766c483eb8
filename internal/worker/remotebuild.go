package worker

import (
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/dist"
	"github.com/outpost-sh/outpost/internal/fleet"
)

// newResolver returns the resolver of the remote build each session runs:
// the entry's pin, else opts.RemoteBinarySHA, else the latest published
// at opts.StaticBaseURL (by default the client's server's /dist/); this
// build runs opts.RemoteCommand. opts has its defaults applied.
func newResolver(opts Options) (*dist.Resolver, error) {
	cache := opts.CacheDir
	if cache == "" {
		cache = filepath.Join(opts.DataDir, "cache")
	}
	return fleet.NewResolver(fleet.ResolverOptions{
		BaseURL:  opts.StaticBaseURL,
		Client:   opts.Client,
		CacheDir: cache,
		Pin:      opts.RemoteBinarySHA,
		Self:     opts.RemoteCommand,
		CAFile:   opts.CAFile,
		Logger:   opts.Logger,
		// Read again while the worker is idle (prestarter.afterSession),
		// so that a claim does not wait for the read.
		LatestMaxAge: latestMaxAge,
	})
}

// latestMaxAge is how long a worker runs the latest published remote
// build it read before reading which one is latest again. A build
// published meanwhile serves the sessions claimed after that.
const latestMaxAge = 10 * time.Second

// directBaseURL is where direct-serve downloads a pinned build from when
// no static base URL is set: the /dist/ of the server given (ServerURL),
// else of the gateway's server.
func directBaseURL(opts Options) (string, error) {
	if opts.ServerURL != "" {
		return strings.TrimSuffix(opts.ServerURL, "/") + "/dist/", nil
	}
	return api.GatewayHTTPURL(opts.GatewayURL, "/dist/")
}
