package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/backoff"
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
	// LatestMaxAge is dist.ResolverOptions.LatestMaxAge.
	LatestMaxAge time.Duration
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
		BaseURL:      base,
		CacheDir:     o.CacheDir,
		Pin:          o.Pin,
		Self:         o.Self,
		HTTPClient:   hc,
		Logger:       o.Logger,
		LatestMaxAge: o.LatestMaxAge,
	})
}

// EntryPin is the remote build a queue entry pins (its
// spec.remote_binary_sha), or "" when it pins none.
func EntryPin(e *api.QueueEntry) string {
	if e.Spec.RemoteBinarySHA == nil {
		return ""
	}
	return *e.Spec.RemoteBinarySHA
}

// RemoteOf is the command of the remote that serves the session of entry e,
// the one place where every claimer (worker, direct-serve, orchestrator)
// turns a queue entry into the build it runs: the entry's pin, downloaded,
// verified and cached by r (or this build, when it is the pinned one). For
// an entry that pins nothing it is unpinned when that is set, else r's
// default (its Pin, else the latest published).
func RemoteOf(ctx context.Context, r *dist.Resolver, e *api.QueueEntry, unpinned []string) ([]string, error) {
	pin := EntryPin(e)
	if pin == "" && len(unpinned) > 0 {
		return unpinned, nil
	}
	return r.Resolve(ctx, pin)
}

// ErrNoSessionPin says the server answers no api.GatewaySessionPath (it is
// older than that endpoint): it cannot say which build a session pins.
var ErrNoSessionPin = errors.New("the server does not say which remote build a session pins (it predates that request)")

// Bounds of SessionPin's asking.
const (
	sessionPinTimeout  = 15 * time.Second
	sessionPinAttempts = 5
)

// sessionPinBackoff spaces SessionPin's attempts: a server restarting or a
// load balancer between replicas answers again within seconds.
var sessionPinBackoff = backoff.Policy{Base: 500 * time.Millisecond, Max: 4 * time.Second, Jitter: 0.5}

// SessionPin asks the server of the gateway at gatewayURL which remote build
// the session of a claim's connect token pins (GET api.GatewaySessionPath,
// with the connect token and the session as the remote sends them): the
// entry's spec.remote_binary_sha, or "" when it pins none. It is for a
// machine that holds nothing but the connect token (direct-serve) and whose
// claimer did not pass the pin. Connection failures and 5xx answers are
// tried again a few times; a token the server refuses, an answer for
// another session or a pin that is no version id is an error, and a server
// without the endpoint is ErrNoSessionPin. caFile, when set, is trusted
// besides the system's CAs.
func SessionPin(ctx context.Context, gatewayURL, sessionID, connectToken, caFile string) (string, error) {
	u, err := api.GatewayHTTPURL(gatewayURL, api.GatewaySessionPath)
	if err != nil {
		return "", err
	}
	hc := &http.Client{Timeout: sessionPinTimeout}
	if caFile != "" {
		tr, err := tlsconfig.Transport(caFile)
		if err != nil {
			return "", fmt.Errorf("ask the server for the session's remote build: %w", err)
		}
		hc.Transport = tr
	}
	for attempt := 1; ; attempt++ {
		pin, retry, err := askSessionPin(ctx, hc, u, sessionID, connectToken)
		if !retry || attempt == sessionPinAttempts {
			return pin, err
		}
		if werr := sessionPinBackoff.Wait(ctx, nil, attempt); werr != nil {
			return "", err
		}
	}
}

// askSessionPin is one attempt of SessionPin; retry says another may
// answer.
func askSessionPin(ctx context.Context, hc *http.Client, u, sessionID, connectToken string) (pin string, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", false, err
	}
	req.Header.Set("Authorization", "Bearer "+connectToken)
	req.Header.Set(api.HeaderSessionID, sessionID)
	resp, err := hc.Do(req)
	if err != nil {
		return "", ctx.Err() == nil, fmt.Errorf("ask the server which remote build session %s pins: GET %s: %w", sessionID, u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case err != nil:
		return "", true, fmt.Errorf("ask the server which remote build session %s pins: GET %s: %w", sessionID, u, err)
	case resp.StatusCode == http.StatusNotFound:
		return "", false, ErrNoSessionPin
	case resp.StatusCode >= 500:
		return "", true, fmt.Errorf("ask the server which remote build session %s pins: GET %s: %s", sessionID, u, resp.Status)
	case resp.StatusCode != http.StatusOK:
		msg := resp.Status
		var e api.ErrorResponse
		if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
			msg += ": " + e.Error.Message
		}
		return "", false, fmt.Errorf("ask the server which remote build session %s pins: GET %s: %s", sessionID, u, msg)
	}
	var gs api.GatewaySession
	if err := json.Unmarshal(body, &gs); err != nil {
		return "", false, fmt.Errorf("ask the server which remote build session %s pins: GET %s: %w", sessionID, u, err)
	}
	if gs.SessionID != sessionID {
		return "", false, fmt.Errorf("ask the server which remote build session %s pins: GET %s answered for session %q", sessionID, u, gs.SessionID)
	}
	if gs.RemoteBinarySHA == nil {
		return "", false, nil
	}
	if err := dist.CheckID(*gs.RemoteBinarySHA); err != nil {
		return "", false, fmt.Errorf("the server says session %s pins remote build %q: %w", sessionID, *gs.RemoteBinarySHA, err)
	}
	return *gs.RemoteBinarySHA, false, nil
}
