package remote

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestOptionsFromEnvNames resolves the spawn contract under either name:
// the public DEVIN_* names alone, the OUTPOST_* names alone, both (OUTPOST_*
// wins), and a partial set (an error naming what is missing, as the caller
// spells it).
func TestOptionsFromEnvNames(t *testing.T) {
	t.Parallel()
	const gw = "ws://127.0.0.1:7420/v1/gateway"
	public := map[string]string{
		"DEVIN_OUTPOST_GATEWAY_URL":   gw,
		"DEVIN_OUTPOST_CONNECT_TOKEN": "public-token",
		"DEVIN_OUTPOST_SESSION_ID":    "ses_public",
		"DEVIN_REMOTE_STATE_DIR":      "/state/public",
	}
	outpost := map[string]string{
		"OUTPOST_GATEWAY_URL":   gw,
		"OUTPOST_CONNECT_TOKEN": "outpost-token",
		"OUTPOST_SESSION_ID":    "ses_outpost",
		"OUTPOST_STATE_DIR":     "/state/outpost",
	}
	both := map[string]string{}
	for _, m := range []map[string]string{public, outpost} {
		for k, v := range m {
			both[k] = v
		}
	}
	without := func(m map[string]string, keys ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for _, k := range keys {
			delete(out, k)
		}
		return out
	}
	with := func(m map[string]string, k, v string) map[string]string {
		out := without(m)
		out[k] = v
		return out
	}
	for _, tc := range []struct {
		name                     string
		env                      map[string]string
		token, session, stateDir string
		errHas                   []string // all of these in the error
		errHasNot                []string
	}{
		{name: "public names only", env: public, token: "public-token", session: "ses_public", stateDir: "/state/public"},
		{name: "outpost names only", env: outpost, token: "outpost-token", session: "ses_outpost", stateDir: "/state/outpost"},
		{name: "both: outpost wins", env: both, token: "outpost-token", session: "ses_outpost", stateDir: "/state/outpost"},
		{name: "outpost state dir over a public contract", env: without(both, "OUTPOST_CONNECT_TOKEN", "OUTPOST_SESSION_ID", "OUTPOST_GATEWAY_URL"),
			token: "public-token", session: "ses_public", stateDir: "/state/outpost"},
		{name: "public names, session id missing", env: without(public, "DEVIN_OUTPOST_SESSION_ID"),
			errHas:    []string{"DEVIN_OUTPOST_SESSION_ID is not set", "DEVIN_OUTPOST_GATEWAY_URL, DEVIN_OUTPOST_CONNECT_TOKEN and DEVIN_OUTPOST_SESSION_ID must be set together"},
			errHasNot: []string{"DEVIN_OUTPOST_CONNECT_TOKEN is", "public-token"}},
		{name: "public names, two missing", env: without(public, "DEVIN_OUTPOST_SESSION_ID", "DEVIN_OUTPOST_GATEWAY_URL"),
			errHas: []string{"DEVIN_OUTPOST_GATEWAY_URL and DEVIN_OUTPOST_SESSION_ID are not set"}},
		{name: "outpost names, token missing", env: without(outpost, "OUTPOST_CONNECT_TOKEN"),
			errHas: []string{"OUTPOST_CONNECT_TOKEN is not set", "DEVIN_OUTPOST_GATEWAY_URL, DEVIN_OUTPOST_CONNECT_TOKEN and DEVIN_OUTPOST_SESSION_ID work too"}},
		{name: "nothing set", env: map[string]string{},
			errHas: []string{"OUTPOST_GATEWAY_URL, OUTPOST_CONNECT_TOKEN and OUTPOST_SESSION_ID are not set"}},
		{name: "a session id that escapes", env: with(public, "DEVIN_OUTPOST_SESSION_ID", "../escape"), errHas: []string{"not a valid directory name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := tc.env
			getwd := func() (string, error) { return "/work/here", nil }
			o, err := optionsFromEnv(func(k string) string { return env[k] }, getwd)
			if tc.errHas != nil {
				if err == nil {
					t.Fatalf("options = %+v, want an error", o)
				}
				for _, want := range tc.errHas {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q lacks %q", err, want)
					}
				}
				for _, bad := range tc.errHasNot {
					if strings.Contains(err.Error(), bad) {
						t.Errorf("error %q has %q", err, bad)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.GatewayURL != gw || o.ConnectToken != tc.token || o.SessionID != tc.session || o.StateDir != tc.stateDir || o.WorkDir != "/work/here" {
				t.Errorf("options = %+v", o)
			}
		})
	}
}

// TestOptionsFromEnvDefaultStateDir: without either state dir name the
// journal goes to the user cache directory.
func TestOptionsFromEnvDefaultStateDir(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	env := map[string]string{
		"DEVIN_OUTPOST_GATEWAY_URL": "wss://gateway.example", "DEVIN_OUTPOST_CONNECT_TOKEN": "t", "DEVIN_OUTPOST_SESSION_ID": "s1",
	}
	o, err := optionsFromEnv(func(k string) string { return env[k] }, func() (string, error) { return "/w", nil })
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cache, "outpost", "sessions", "s1"); o.StateDir != want {
		t.Errorf("state dir = %q, want %q", o.StateDir, want)
	}
	// A working directory that cannot be found is an error, not "".
	_, err = optionsFromEnv(func(k string) string { return env[k] }, func() (string, error) { return "", errors.New("gone") })
	if err == nil || !strings.Contains(err.Error(), "working directory") {
		t.Errorf("err = %v", err)
	}
}

// TestGatewayEndpoint: the claim's full endpoint is kept; a base URL as the
// public contract gives one (no path) means its /v1/gateway; other schemes
// are refused.
func TestGatewayEndpoint(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"ws://127.0.0.1:7420/v1/gateway":   "ws://127.0.0.1:7420/v1/gateway",
		"wss://gateway.example":            "wss://gateway.example" + api.GatewayPath,
		"wss://gateway.example/":           "wss://gateway.example" + api.GatewayPath,
		"wss://outpost.example/prefix/gw":  "wss://outpost.example/prefix/gw",
		"http://127.0.0.1:7420/v1/gateway": "",
		"ws://":                            "",
		"not a url":                        "",
	} {
		got, err := gatewayEndpoint(in)
		if want == "" {
			if err == nil || !strings.Contains(err.Error(), "ws:// or wss://") {
				t.Errorf("gatewayEndpoint(%q) = %q, %v; want an error", in, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("gatewayEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
