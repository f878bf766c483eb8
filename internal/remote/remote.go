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
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/internal/api"
	"github.com/outpost-sh/outpost/internal/machine"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// Environment variables read by OptionsFromEnv.
const (
	EnvGatewayURL   = "OUTPOST_GATEWAY_URL"
	EnvConnectToken = "OUTPOST_CONNECT_TOKEN"
	EnvSessionID    = "OUTPOST_SESSION_ID"
	EnvStateDir     = "OUTPOST_STATE_DIR"
	// EnvCAFile, optional, is a PEM file of CA certificates trusted
	// besides the system's when dialling a wss:// gateway.
	EnvCAFile = tlsconfig.EnvCAFile
)

// ErrRejected is returned by Serve when the gateway keeps refusing the
// connection with 401, 403 or 404 (the connect token is dead or the claim has
// moved elsewhere), or with an error frame. It is wrapped with the server's
// message.
var ErrRejected = errors.New("gateway rejected the remote")

// ErrVersion is returned by Serve when the gateway speaks another protocol
// version than this remote.
var ErrVersion = errors.New("gateway protocol version mismatch")

// ErrUnreachable is returned by Serve when the gateway could not be reached
// for Options.GiveUpAfter. The claim then lapses and the session moves on.
var ErrUnreachable = errors.New("gateway unreachable")

// Options configure Serve.
type Options struct {
	// GatewayURL is the full ws:// or wss:// gateway endpoint, e.g.
	// ws://127.0.0.1:7420/v1/gateway. Required.
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
}

// OptionsFromEnv builds Options from OUTPOST_GATEWAY_URL,
// OUTPOST_CONNECT_TOKEN and OUTPOST_SESSION_ID (all required),
// OUTPOST_STATE_DIR (default: DefaultStateDir, with a warning),
// OUTPOST_CA_FILE (optional: an HTTPClient trusting its CAs too) and the
// current directory as WorkDir.
func OptionsFromEnv() (Options, error) {
	o := Options{
		// A worker passes what it detected; otherwise the remote probes.
		Capabilities: func() *api.Capabilities { c, _ := machine.FromEnv(os.Getenv); return c }(),
		GatewayURL:   os.Getenv(EnvGatewayURL),
		ConnectToken: os.Getenv(EnvConnectToken),
		SessionID:    os.Getenv(EnvSessionID),
		StateDir:     os.Getenv(EnvStateDir),
	}
	var missing []string
	for _, kv := range [][2]string{{EnvGatewayURL, o.GatewayURL}, {EnvConnectToken, o.ConnectToken}, {EnvSessionID, o.SessionID}} {
		if kv[1] == "" {
			missing = append(missing, kv[0])
		}
	}
	if len(missing) > 0 {
		return Options{}, fmt.Errorf("remote options: %s must be set (%s, %s and %s go together)",
			strings.Join(missing, ", "), EnvGatewayURL, EnvConnectToken, EnvSessionID)
	}
	if err := validSessionID(o.SessionID); err != nil {
		return Options{}, fmt.Errorf("remote options: %s: %w", EnvSessionID, err)
	}
	if o.StateDir == "" {
		dir, err := DefaultStateDir(o.SessionID)
		if err != nil {
			return Options{}, fmt.Errorf("remote options: %w", err)
		}
		slog.Warn("OUTPOST_STATE_DIR is not set; keeping the call journal in the user cache directory", "state_dir", dir)
		o.StateDir = dir
	}
	if ca := os.Getenv(EnvCAFile); ca != "" {
		tr, err := tlsconfig.Transport(ca)
		if err != nil {
			return Options{}, fmt.Errorf("remote options: %s: %w", EnvCAFile, err)
		}
		o.HTTPClient = &http.Client{Transport: tr}
	}
	wd, err := os.Getwd()
	if err != nil {
		return Options{}, fmt.Errorf("remote options: working directory: %w", err)
	}
	o.WorkDir = wd
	return o, nil
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
	if len(missing) > 0 {
		return o, fmt.Errorf("remote options: %s required", strings.Join(missing, ", "))
	}
	if !strings.HasPrefix(o.GatewayURL, "ws://") && !strings.HasPrefix(o.GatewayURL, "wss://") {
		return o, fmt.Errorf("remote options: gateway URL %q must start with ws:// or wss://", o.GatewayURL)
	}
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
