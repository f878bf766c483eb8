// Package remote implements `outpost remote serve`: the per-session process
// that runs on a user's machine, dials the control plane's gateway over a
// WebSocket and executes the session's tool calls there.
//
// Calls run concurrently and survive reconnects. Every call is journaled
// under StateDir before it runs and its result after, so a result is never
// lost and a call is never run twice, even across a restart of the remote.
// Secrets received from the gateway never leave the remote: output and
// results are redacted on the way out.
package remote

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/machine"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// EnvCAFile, optional, is a PEM file of CA certificates trusted besides
// the system's when dialling a wss:// gateway.
const EnvCAFile = tlsconfig.EnvCAFile

// ErrRejected is returned by Serve when the gateway keeps refusing the
// connection with 401, 403 or 404 (the connect token is dead or the claim has
// moved elsewhere), or with an error frame. It is wrapped with the server's
// message.
var ErrRejected = errors.New("gateway rejected the remote")

// ErrVersion is returned by Serve when the gateway does not accept the
// protocol version this remote speaks (and speaks none the remote can step
// down to), or answers in another one. Unlike ErrRejected it does not mean
// another remote serves the session: `outpost remote serve` exits 3, so its
// claimer releases the claim with the remote's output as the reason.
var ErrVersion = errors.New("gateway protocol version mismatch")

// ErrUnreachable is returned by Serve when the gateway could not be reached
// for Options.GiveUpAfter. The claim then lapses and the session moves on.
var ErrUnreachable = errors.New("gateway unreachable")

// Options configure Serve.
type Options struct {
	// GatewayURL is the ws:// or wss:// gateway endpoint, e.g.
	// ws://127.0.0.1:7420/v1/gateway; a URL without a path means its
	// /v1/gateway. Required.
	GatewayURL string
	// ConnectToken is sent as `Authorization: Bearer <token>`. Required.
	ConnectToken string
	// SessionID is the session this remote serves. Required.
	SessionID string
	// StateDir holds the call journal. Zero means a per-session directory
	// under the user cache directory (see DefaultStateDir).
	StateDir string
	// WorkDir is the workspace relative paths are resolved against. Zero
	// means the current directory.
	WorkDir string
	// Logger receives the remote's logs. Nil means slog.Default().
	Logger *slog.Logger
	// HTTPClient dials the gateway. Nil means http.DefaultClient.
	HTTPClient *http.Client
	// Capabilities are reported in hello. Nil means machine.Detect.
	Capabilities *api.Capabilities
	// GiveUpAfter is how long the remote keeps trying to reach the
	// gateway, counted from its start or from the loss of its last
	// welcomed connection, before it gives up with ErrUnreachable. Zero
	// means 10 minutes.
	GiveUpAfter time.Duration
	// ProtocolVersion is the gateway protocol version the remote speaks
	// (see api.ProtocolVersion), from api.MinProtocolVersion to
	// api.CurrentProtocolVersion. Zero means api.CurrentProtocolVersion;
	// an older one lets a test play a remote of an earlier release.
	ProtocolVersion api.ProtocolVersion
	// Clock times the waits between reconnect attempts and GiveUpAfter.
	// Nil means the real clock.
	Clock clockwork.Clock
	// Desktop, when set, gives the session a desktop: the computer tool,
	// and $DISPLAY for its programs. Nil means none (OptionsFromEnv sets
	// it from api.EnvDesktop).
	Desktop *DesktopOptions
}

// OptionsFromEnv builds Options from the spawn contract's variables
// (api.SpawnEnv), each under its Outpost name (OUTPOST_…) or its public one
// (DEVIN_…), the Outpost name winning when both are set: the gateway URL,
// connect token and session id (all three required), the state dir
// (default: DefaultStateDir, with a warning), and the current directory as
// WorkDir; OUTPOST_CA_FILE (optional) gives an HTTPClient trusting its
// CAs too.
func OptionsFromEnv() (Options, error) { return optionsFromEnv(os.Getenv, os.Getwd) }

func optionsFromEnv(getenv func(string) string, getwd func() (string, error)) (Options, error) {
	o := Options{
		// A worker passes what it detected; otherwise the remote probes.
		Capabilities: func() *api.Capabilities { c, _ := machine.FromEnv(getenv); return c }(),
		GatewayURL:   api.EnvGatewayURL.Get(getenv),
		ConnectToken: api.EnvConnectToken.Get(getenv),
		SessionID:    api.EnvSessionID.Get(getenv),
		StateDir:     api.EnvStateDir.Get(getenv),
		Desktop:      desktopFromEnv(getenv),
	}
	if err := missingSpawnVars(getenv); err != nil {
		return Options{}, err
	}
	if err := validSessionID(o.SessionID); err != nil {
		return Options{}, fmt.Errorf("remote options: %s: %w", api.EnvSessionID, err)
	}
	if o.StateDir == "" {
		dir, err := DefaultStateDir(o.SessionID)
		if err != nil {
			return Options{}, fmt.Errorf("remote options: %w", err)
		}
		slog.Warn("no state dir set ("+api.EnvStateDir.String()+"); keeping the call journal in the user cache directory", "state_dir", dir)
		o.StateDir = dir
	}
	if ca := getenv(EnvCAFile); ca != "" {
		tr, err := tlsconfig.Transport(ca)
		if err != nil {
			return Options{}, fmt.Errorf("remote options: %s: %w", EnvCAFile, err)
		}
		o.HTTPClient = &http.Client{Transport: tr}
	}
	wd, err := getwd()
	if err != nil {
		return Options{}, fmt.Errorf("remote options: working directory: %w", err)
	}
	o.WorkDir = wd
	return o, nil
}

// missingSpawnVars says which of the three required variables are not set.
// It names them as the caller does: by their public names when only public
// names of the three are set.
func missingSpawnVars(getenv func(string) string) error {
	required := []api.EnvVar{api.EnvGatewayURL, api.EnvConnectToken, api.EnvSessionID}
	public := false
	for _, v := range required {
		_, name := v.Lookup(getenv)
		if name == v.Name {
			public = false
			break
		}
		public = public || name == v.Public
	}
	var missing, used, other []string
	for _, v := range required {
		n, o := v.Name, v.Public
		if public {
			n, o = o, n
		}
		used, other = append(used, n), append(other, o)
		if v.Get(getenv) == "" {
			missing = append(missing, n)
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("remote options: %s is not set: %s must be set together (%s work too)",
			missing[0], andList(used), andList(other))
	}
	return fmt.Errorf("remote options: %s are not set: %s must be set together (%s work too)",
		andList(missing), andList(used), andList(other))
}

// andList joins "a", "b" and "c" as "a, b and c".
func andList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// DefaultStateDir is the state directory used when none is given:
// <user cache dir>/outpost/sessions/<session id>.
func DefaultStateDir(sessionID string) (string, error) {
	if err := validSessionID(sessionID); err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("default state dir: %w", err)
	}
	return filepath.Join(cache, "outpost", "sessions", sessionID), nil
}

func validSessionID(id string) error {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, `/\`) {
		return fmt.Errorf("session id %q is not a valid directory name", id)
	}
	return nil
}

// withDefaults validates o and fills in its zero fields.
func (o Options) withDefaults() (Options, error) {
	var missing []string
	if o.GatewayURL == "" {
		missing = append(missing, "GatewayURL")
	}
	if o.ConnectToken == "" {
		missing = append(missing, "ConnectToken")
	}
	if o.SessionID == "" {
		missing = append(missing, "SessionID")
	}
	if o.GiveUpAfter <= 0 {
		o.GiveUpAfter = 10 * time.Minute
	}
	if o.ProtocolVersion == 0 {
		o.ProtocolVersion = api.CurrentProtocolVersion
	}
	if !o.ProtocolVersion.Supported() {
		return o, fmt.Errorf("remote options: protocol version %d: this remote speaks versions %d to %d", o.ProtocolVersion, api.MinProtocolVersion, api.CurrentProtocolVersion)
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if len(missing) > 0 {
		return o, fmt.Errorf("remote options: %s required", strings.Join(missing, ", "))
	}
	gw, err := gatewayEndpoint(o.GatewayURL)
	if err != nil {
		return o, fmt.Errorf("remote options: %w", err)
	}
	o.GatewayURL = gw
	if err := validSessionID(o.SessionID); err != nil {
		return o, fmt.Errorf("remote options: %w", err)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	if o.StateDir == "" {
		dir, err := DefaultStateDir(o.SessionID)
		if err != nil {
			return o, fmt.Errorf("remote options: %w", err)
		}
		o.StateDir = dir
	}
	if o.WorkDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return o, fmt.Errorf("remote options: working directory: %w", err)
		}
		o.WorkDir = wd
	}
	wd, err := filepath.Abs(o.WorkDir)
	if err != nil {
		return o, fmt.Errorf("remote options: work dir: %w", err)
	}
	o.WorkDir = wd
	return o, nil
}

// gatewayEndpoint returns the gateway endpoint of raw: raw itself, or its
// api.GatewayPath when raw has no path, as the public contract's base URLs
// (wss://gateway.example) have none.
func gatewayEndpoint(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "ws" && u.Scheme != "wss" || u.Host == "" {
		return "", fmt.Errorf("gateway URL %q must be a ws:// or wss:// URL", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = api.GatewayPath
		return u.String(), nil
	}
	return raw, nil
}
