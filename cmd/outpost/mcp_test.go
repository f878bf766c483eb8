package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestMCPNeverFallsBack: outpost mcp uses the server and token it is given,
// or the saved login whole, never a mix of the two or the default server;
// each refusal names the server it asked, or says what to set.
func TestMCPNeverFallsBack(t *testing.T) {
	t.Parallel()
	ts := startTestServer(t)
	ts.outpost(t, "dev")
	ext := ts.session(t, "dev", api.AgentExternal)
	down := "http://" + closedAddr(t)
	for _, tc := range []struct {
		name  string
		env   map[string]string
		saved *config
		args  []string
		want  []string
		not   []string
	}{
		{name: "token without a server, a login saved", env: map[string]string{"OUTPOST_TOKEN": ts.admin},
			saved: &config{Server: ts.url, Token: ts.admin},
			want:  []string{"a token is given but no server: set OUTPOST_SERVER"}},
		{name: "nothing given, nothing saved",
			want: []string{"no server to ask: set OUTPOST_SERVER and OUTPOST_TOKEN"}, not: []string{DefaultServer}},
		{name: "server without a token, a login for another saved", env: map[string]string{"OUTPOST_SERVER": ts.url},
			saved: &config{Server: down, Token: ts.admin},
			want:  []string{"no token for " + ts.url + ": set OUTPOST_TOKEN"}},
		{name: "token rejected", env: map[string]string{"OUTPOST_SERVER": ts.url, "OUTPOST_TOKEN": "opt_bogus"},
			saved: &config{Server: ts.url, Token: ts.admin},
			want:  []string{"server " + ts.url + ": The API token is not valid"}},
		{name: "server down", args: []string{"--server", down, "--token", ts.admin},
			saved: &config{Server: ts.url, Token: ts.admin},
			want:  []string{"cannot reach the Outpost server at " + down}},
		{name: "no such session", env: map[string]string{"OUTPOST_SERVER": ts.url, "OUTPOST_TOKEN": ts.admin},
			args: []string{"--session-override"},
			want: []string{"server " + ts.url + ": Session ses_nope does not exist."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tf := newTestFactory(t, tc.env)
			if tc.saved != nil {
				b, _ := json.Marshal(tc.saved)
				path := filepath.Join(tf.configDir, "outpost", "config.json")
				if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			session := ext
			args := tc.args
			if len(args) == 1 && args[0] == "--session-override" {
				session, args = "ses_nope", nil
			}
			code := tf.run(t, append([]string{"mcp", "--session", session}, args...)...)
			msg := tf.errOut.String()
			if code != exitError {
				t.Errorf("exit %d, want %d; stderr %q", code, exitError, msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr %q lacks %q", msg, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(msg, n) {
					t.Errorf("stderr %q has %q", msg, n)
				}
			}
		})
	}
}

// TestTokensCreateSession: tokens create --session makes a token that
// reaches that session only.
func TestTokensCreateSession(t *testing.T) {
	t.Parallel()
	ts := startTestServer(t)
	ts.outpost(t, "dev")
	ext := ts.session(t, "dev", api.AgentExternal)
	other := ts.session(t, "dev", api.AgentExternal)
	writer := ts.token(t, "dev", api.ScopeSessionsWrite)
	tf := newTestFactory(t, nil)
	if code := tf.run(t, "--server", ts.url, "--token", writer, "tokens", "create", "--session", ext); code != 0 {
		t.Fatalf("tokens create --session: exit %d: %s", code, tf.errOut)
	}
	if !strings.Contains(tf.errOut.String(), "limited to session "+ext) {
		t.Errorf("stderr %q does not say the token is limited to the session", tf.errOut)
	}
	secret := strings.TrimSpace(tf.out.String())
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"sessions", "get", ext}, 0},
		{[]string{"sessions", "get", other}, exitError},
		{[]string{"sessions", "list"}, exitError},
		{[]string{"tokens", "create", "--scope", "sessions.read"}, exitError},
	} {
		tf := newTestFactory(t, nil)
		if code := tf.run(t, append([]string{"--server", ts.url, "--token", secret}, c.args...)...); code != c.code {
			t.Errorf("%v with the session's token: exit %d, want %d: %s", c.args, code, c.code, tf.errOut)
		}
	}
	tf = newTestFactory(t, nil)
	if code := tf.run(t, "--server", ts.url, "--token", writer, "tokens", "create", "--session", ext, "--role", "viewer"); code != exitUsage {
		t.Errorf("--session with --role: exit %d, want %d", code, exitUsage)
	}
}
