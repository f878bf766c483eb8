package worker

import (
	"net/url"
	"path/filepath"

	"github.com/outpost-sh/outpost/internal/dist"
	"github.com/outpost-sh/outpost/internal/fleet"
)

// newResolver returns the resolver of the remote build each session runs:
// the entry's pin, else opts.RemoteBinarySHA, else the latest published
// at opts.StaticBaseURL (by default the server's /dist/: the client's, or
// in direct-serve mode the gateway's server); this build runs
// opts.RemoteCommand. opts has its defaults applied.
func newResolver(opts Options) (*dist.Resolver, error) {
	base := opts.StaticBaseURL
	if base == "" && opts.Client == nil && opts.RemoteBinarySHA != "" {
		// Direct-serve calls nothing but the gateway, unless a pin
		// needs a build from the gateway's server.
		base = distFromGateway(opts.GatewayURL)
	}
	cache := opts.CacheDir
	if cache == "" {
		cache = filepath.Join(opts.DataDir, "cache")
	}
	return fleet.NewResolver(fleet.ResolverOptions{
		BaseURL:  base,
		Client:   opts.Client,
		CacheDir: cache,
		Pin:      opts.RemoteBinarySHA,
		Self:     opts.RemoteCommand,
		CAFile:   opts.CAFile,
		Logger:   opts.Logger,
	})
}

// distFromGateway returns the /dist/ base URL of the server whose gateway
// is at gatewayURL (ws:// or wss://), or "" when it names no server.
func distFromGateway(gatewayURL string) string {
	u, err := url.Parse(gatewayURL)
	if err != nil || u.Host == "" {
		return ""
	}
	switch u.Scheme {
	case "ws", "http":
		u.Scheme = "http"
	case "wss", "https":
		u.Scheme = "https"
	default:
		return ""
	}
	u.Path, u.RawQuery, u.Fragment = "/dist/", "", ""
	return u.String()
}
