package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/dist"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// maxReleaseReason is what the server accepts as a release reason.
const maxReleaseReason = 1000

// newResolver returns the resolver of the remote build each session runs:
// the entry's pin, else opts.RemoteBinarySHA, else the latest published
// at opts.StaticBaseURL (by default the server's /dist/: the client's, or
// in direct-serve mode the gateway's server); this build runs
// opts.RemoteCommand. opts has its defaults applied.
func newResolver(opts Options) (*dist.Resolver, error) {
	base := opts.StaticBaseURL
	switch {
	case base != "":
	case opts.Client != nil:
		base = strings.TrimSuffix(opts.Client.BaseURL(), "/") + "/dist/"
	case opts.RemoteBinarySHA != "":
		// Direct-serve calls nothing but the gateway, unless a pin
		// needs a build from the gateway's server.
		base = distFromGateway(opts.GatewayURL)
	}
	cache := opts.CacheDir
	if cache == "" {
		cache = filepath.Join(opts.DataDir, "cache")
	}
	var hc *http.Client
	if opts.CAFile != "" {
		tr, err := tlsconfig.Transport(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("remote builds: %w", err)
		}
		hc = &http.Client{Transport: tr}
	}
	return dist.NewResolver(dist.ResolverOptions{
		BaseURL:    base,
		CacheDir:   cache,
		Pin:        opts.RemoteBinarySHA,
		Self:       opts.RemoteCommand,
		HTTPClient: hc,
		Logger:     opts.Logger,
	})
}

// remoteCommand returns the command of the remote serving a claimed entry:
// this build's, or the pinned build's, downloaded and verified.
func (w *worker) remoteCommand(ctx context.Context, claim *api.QueueEntry) ([]string, error) {
	pin := ""
	if claim.Spec.RemoteBinarySHA != nil {
		pin = *claim.Spec.RemoteBinarySHA
	}
	return w.remotes.Resolve(ctx, pin)
}

// releaseBecause is release saying why, on the session's status and
// transcript.
func (w *worker) releaseBecause(ctx context.Context, id, reason string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	if len(reason) > maxReleaseReason {
		reason = strings.ToValidUTF8(reason[:maxReleaseReason-3], "") + "..."
	}
	_, err := w.c.Queue.ReleaseWithReason(ctx, id, w.acceptor, reason)
	switch {
	case err == nil:
		log.Info("claim released", "reason", reason)
	case client.IsConflict(err) || client.IsNotFound(err):
		log.Debug("claim already gone", "err", err)
	default:
		log.Warn("cannot release the claim; it lapses at its deadline", "err", err)
	}
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
