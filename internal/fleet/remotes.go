package fleet

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/dist"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// ResolverOptions say where a consumer finds the remote builds sessions
// pin.
type ResolverOptions struct {
	// BaseURL is where builds are published in the /dist/ layout; empty
	// means Client's server's /dist/.
	BaseURL string
	// Client is the consumer's client, for the default BaseURL.
	Client *client.Client
	// CacheDir holds downloaded builds. Required.
	CacheDir string
	// Pin is the build run for sessions that pin none; empty means the
	// latest published.
	Pin string
	// Self is this build's remote command, run for a build that is this
	// one.
	Self []string
	// CAFile, when set, is trusted for the downloads besides the system's
	// CAs.
	CAFile string
	// Logger receives the resolver's log.
	Logger *slog.Logger
}

// NewResolver returns the resolver of the remote build each session runs
// (Consumer.Resolver): the entry's pin, else o.Pin, else the latest
// published at o.BaseURL; this build runs o.Self.
func NewResolver(o ResolverOptions) (*dist.Resolver, error) {
	base := o.BaseURL
	if base == "" && o.Client != nil {
		base = strings.TrimSuffix(o.Client.BaseURL(), "/") + "/dist/"
	}
	var hc *http.Client
	if o.CAFile != "" {
		tr, err := tlsconfig.Transport(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("remote builds: %w", err)
		}
		hc = &http.Client{Transport: tr}
	}
	return dist.NewResolver(dist.ResolverOptions{
		BaseURL:    base,
		CacheDir:   o.CacheDir,
		Pin:        o.Pin,
		Self:       o.Self,
		HTTPClient: hc,
		Logger:     o.Logger,
	})
}
