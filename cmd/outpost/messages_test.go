package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
)

// testServer is a real Outpost server in this process, on loopback.
type testServer struct {
	url, admin string
	c          *client.Client
}

func startTestServer(t *testing.T) *testServer {
	t.Helper()
	srv := servertest.Start(t, server.Options{})
	return &testServer{url: srv.URL(), admin: srv.AdminToken(), c: srv.Client}
}

func (ts *testServer) token(t *testing.T, outpost string, scopes ...string) string {
	t.Helper()
	tok, err := ts.c.Tokens.Create(t.Context(), api.CreateTokenRequest{Name: "t", Scopes: scopes, Outpost: outpost})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Secret
}

func (ts *testServer) outpost(t *testing.T, name string) {
	t.Helper()
	if _, err := ts.c.Outposts.Create(t.Context(), api.CreateOutpostRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
}

func (ts *testServer) session(t *testing.T, outpost string, kind string) string {
	t.Helper()
	req := api.CreateSessionRequest{Outpost: outpost, Agent: api.Agent{Kind: kind}}
	if kind == api.AgentScript {
		req.Agent.Steps = []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}
	}
	s, err := ts.c.Sessions.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	return s.Metadata.SessionID
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	// Port 1 (tcpmux) is never handed out as an ephemeral port, so no
	// server of a test running in parallel can take it, as it can a port
	// that was free a moment ago.
	c, err := net.DialTimeout("tcp", "127.0.0.1:1", time.Second)
	if err != nil {
		return "127.0.0.1:1"
	}
	c.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestErrorMessages runs commands against a real server (or none, or a web
// server that is not Outpost) and checks the one line each prints: it names
// what went wrong in the CLI's own words.
func TestErrorMessages(t *testing.T) {
	t.Parallel()
	ts := startTestServer(t)
	ctx := t.Context()
	ts.outpost(t, "dev")
	ts.outpost(t, "prod")
	devOnly := ts.token(t, "dev", api.ScopeSessionsWrite)
	devOnlyOrch := ts.token(t, "dev", api.ScopeOrchestrator)
	reader := ts.token(t, "", api.ScopeSessionsRead)
	script := ts.session(t, "dev", api.AgentScript)
	if _, err := ts.c.Queue.Claim(ctx, script, "holder-1"); err != nil {
		t.Fatal(err)
	}

	nginx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/" || r.URL.Path == "/v1/outposts" {
			fmt.Fprint(w, "<html><body>Welcome to nginx!</body></html>")
			return
		}
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "<html><body><h1>404 Not Found</h1></body></html>")
	}))
	t.Cleanup(nginx.Close)

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })

	down := "http://" + closedAddr(t)
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	admin := []string{"--server", ts.url, "--token", ts.admin}
	with := func(token string, args ...string) []string {
		return append([]string{"--server", ts.url, "--token", token}, args...)
	}

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		want []string
		not  []string
	}{
		{name: "server down", args: []string{"outposts", "list", "--server", down}, code: exitError,
			want: []string{"cannot reach the Outpost server at " + down, "connection refused"}},
		{name: "no scheme", args: []string{"outposts", "list", "--server", "127.0.0.1:7420"}, code: exitUsage,
			want: []string{`--server must start with http:// or https:// ("127.0.0.1:7420"); try http://127.0.0.1:7420`}, not: []string{"cannot reach"}},
		{name: "no scheme in the environment", env: map[string]string{"OUTPOST_SERVER": "localhost:7420"}, args: []string{"outposts", "list"},
			code: exitUsage, want: []string{"OUTPOST_SERVER must start with http:// or https://"}},
		{name: "other scheme", args: []string{"sessions", "list", "--server", "ftp://files.example"}, code: exitUsage,
			want: []string{"--server must start with http:// or https://, not ftp://"}},
		{name: "not Outpost, 404 page", args: []string{"outposts", "get", "dev", "--server", nginx.URL}, code: exitError,
			want: []string{nginx.URL + " does not answer like an Outpost server: the server answered 404 Not Found with an HTML page; check --server"},
			not:  []string{"does not exist", "cannot reach", "<html>"}},
		{name: "not Outpost, 200 page", args: []string{"outposts", "list", "--server", nginx.URL}, code: exitError,
			want: []string{"does not answer like an Outpost server: the server answered 200 OK with an HTML page"}, not: []string{"invalid character"}},
		{name: "port in use: server", args: []string{"server", "--listen", busy.Addr().String(), "--data-dir", t.TempDir()}, code: exitError,
			want: []string{"listen " + busy.Addr().String() + ": address already in use — another outpost server? pick --listen"}, not: []string{"cannot reach"}},
		{name: "port in use: up", args: []string{"up", "--listen", busy.Addr().String(), "--dir", t.TempDir(), "--no-demo"}, code: exitError,
			want: []string{"listen " + busy.Addr().String() + ": address already in use — another outpost server? pick --listen"}, not: []string{"cannot reach"}},
		{name: "missing session file", args: append(admin, "sessions", "create", "--outpost", "dev", "--file", missing), code: exitError,
			want: []string{"the session file " + missing + " does not exist (--file)"}},
		{name: "delete refused", args: append(admin, "outposts", "delete", "dev"), code: exitError,
			want: []string{`Outpost "dev" has 1 claimed session; end it first, or delete with --force, which ends it.`}, not: []string{"?force", "force=true"}},
		{name: "scopes as a list", args: append(admin, "tokens", "create", "--scope", "sessions.rite"), code: exitError,
			want: []string{`Scope "sessions.rite" is unknown; scopes are ` + strings.Join(api.Scopes, ", ") + "."}, not: []string{"["}},
		{name: "limited token, other outpost", args: with(devOnly, "outposts", "get", "prod"), code: exitError,
			want: []string{`Outpost "prod" does not exist; this token is limited to outpost "dev" and sees nothing of other outposts.`},
			not:  []string{"scope"}},
		{name: "limited token, no such outpost", args: with(devOnly, "outposts", "get", "nope"), code: exitError,
			want: []string{`Outpost "nope" does not exist; this token is limited to outpost "dev" and sees nothing of other outposts.`}},
		{name: "no such outpost", args: with(reader, "outposts", "get", "nope"), code: exitError,
			want: []string{`Outpost "nope" does not exist.`}, not: []string{"limited"}},
		{name: "limited token, no such session", args: with(devOnly, "sessions", "get", "ses_nope"), code: exitError,
			want: []string{`Session ses_nope does not exist; this token is limited to outpost "dev" and sees nothing of other outposts.`}},
		{name: "limited token, creating outposts", args: with(devOnlyOrch, "outposts", "create", "x"), code: exitError,
			want: []string{"A token limited to one outpost cannot create outposts; use a token not limited to an outpost."}},
		{name: "missing scope", args: with(reader, "outposts", "create", "x"), code: exitError,
			want: []string{"This token lacks the outposts.orchestrator scope; use a token that has it."}},
		{name: "bad token", args: with("opt_bogus", "outposts", "list"), code: exitError,
			want: []string{"The API token is not valid; pass --token, set OUTPOST_TOKEN or run 'outpost login'."}},
		{name: "mcp, no such session", args: append(admin, "mcp", "--session", "ses_nope"), code: exitError,
			want: []string{"Session ses_nope does not exist."}},
		{name: "mcp, not external", args: append(admin, "mcp", "--session", script), code: exitError,
			want: []string{"session " + script + " runs a script agent; outpost mcp serves the tools of external sessions"}},
		{name: "limit out of range", args: append(admin, "sessions", "list", "--limit", "500"), code: exitUsage,
			want: []string{"--limit must be from 1 to 200, not 500"}, not: []string{"first"}},
		{name: "unknown status", args: append(admin, "sessions", "list", "--status", "done"), code: exitUsage,
			want: []string{`--status must be one of new, claimed, running, resuming, suspended, exit, error, not "done"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tf := newTestFactory(t, tc.env)
			code := tf.run(t, tc.args...)
			msg := tf.errOut.String()
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.code, msg)
			}
			if first, _, _ := strings.Cut(msg, "\n"); !strings.HasPrefix(first, "error: ") {
				t.Errorf("stderr does not start with one error line: %q", msg)
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

// TestLoginChecksBeforeSaving: a login that the server refuses, or a
// server that cannot be reached, fails and leaves the saved login as it
// was; a good one is saved.
func TestLoginChecksBeforeSaving(t *testing.T) {
	t.Parallel()
	ts := startTestServer(t)
	down := "http://" + closedAddr(t)
	machineTok := ts.token(t, "", api.ScopeMachine)

	for _, tc := range []struct {
		name   string
		server string
		token  string
		want   string
	}{
		{"bad token", ts.url, "opt_not-a-token", "the server at " + ts.url + " refused the token: The API token is not valid. Nothing was saved"},
		{"unreachable", down, "opt_x", "cannot reach the Outpost server at " + down},
		{"no scheme", "127.0.0.1:7420", "opt_x", "--server must start with http:// or https://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, saved := range []bool{false, true} {
				tf := newTestFactory(t, nil)
				path := filepath.Join(tf.configDir, "outpost", "config.json")
				var before []byte
				if saved {
					if _, err := saveConfig(tf.Factory, config{Server: "http://saved.test", Token: "saved"}); err != nil {
						t.Fatal(err)
					}
					before, _ = os.ReadFile(path)
				}
				code := tf.run(t, "login", "--server", tc.server, "--token", tc.token)
				if code == exitOK || !strings.Contains(tf.errOut.String(), tc.want) {
					t.Errorf("exit %d, stderr %q; want a failure saying %q", code, tf.errOut, tc.want)
				}
				after, err := os.ReadFile(path)
				switch {
				case !saved && !os.IsNotExist(err):
					t.Errorf("a failed login wrote %s: %q %v", path, after, err)
				case saved && string(after) != string(before):
					t.Errorf("a failed login changed %s: %q, was %q", path, after, before)
				}
			}
		})
	}

	// A token with any scope is a good login, even one that may not
	// change anything.
	tf := newTestFactory(t, nil)
	if code := tf.run(t, "login", "--server", ts.url, "--token", machineTok); code != exitOK {
		t.Fatalf("good login: exit %d, %s", code, tf.errOut)
	}
	cfg, err := loadConfig(tf.Factory)
	if err != nil || cfg != (config{Server: ts.url, Token: machineTok}) {
		t.Errorf("saved %+v, %v", cfg, err)
	}
}

// TestFollowExitCodes: following a session that did not finish well exits
// 1, apart from the 3 of other failures.
func TestFollowExitCodes(t *testing.T) {
	t.Parallel()
	ts := startTestServer(t)
	ts.outpost(t, "dev")
	id := ts.session(t, "dev", api.AgentScript)
	if _, err := ts.c.Sessions.Terminate(t.Context(), id, "not needed"); err != nil {
		t.Fatal(err)
	}
	tf := newTestFactory(t, nil)
	code := tf.run(t, "--server", ts.url, "--token", ts.admin, "sessions", "logs", "-f", id)
	if want := "error: session " + id + " was terminated: Terminated by a user: not needed"; code != exitFailed || !strings.Contains(tf.errOut.String(), want) {
		t.Errorf("logs -f of a terminated session: exit %d, stderr %q; want %d and %q", code, tf.errOut, exitFailed, want)
	}
	if !strings.Contains(tf.out.String(), "session ended: exit (user_request): Terminated by a user: not needed") {
		t.Errorf("transcript:\n%s", tf.out)
	}
	tf = newTestFactory(t, nil)
	if code := tf.run(t, "--server", ts.url, "--token", ts.admin, "sessions", "logs", id); code != exitOK {
		t.Errorf("logs without -f: exit %d (%s)", code, tf.errOut)
	}
	tf = newTestFactory(t, nil)
	if code := tf.run(t, "--server", ts.url, "--token", ts.admin, "sessions", "logs", "-f", "ses_nope"); code != exitError {
		t.Errorf("logs -f of no session: exit %d (%s), want %d", code, tf.errOut, exitError)
	}
}

// TestTokensListNamesOutposts shows a limited token's outpost by name.
func TestTokensListNamesOutposts(t *testing.T) {
	t.Parallel()
	ts := startTestServer(t)
	ts.outpost(t, "gpu-h200")
	ts.token(t, "gpu-h200", api.ScopeMachine, api.ScopeSessionsRead)
	tf := newTestFactory(t, nil)
	if code := tf.run(t, "--server", ts.url, "--token", ts.admin, "tokens", "list"); code != exitOK {
		t.Fatalf("exit %d: %s", code, tf.errOut)
	}
	var row string
	for line := range strings.Lines(tf.out.String()) {
		if strings.Contains(line, "gpu-h200") {
			row = line
		}
	}
	if !strings.Contains(row, "outposts.machine, sessions.read") || strings.Contains(row, "outpost_") {
		t.Errorf("tokens list:\n%s", tf.out)
	}
}

func TestMachineText(t *testing.T) {
	t.Parallel()
	c := &api.Capabilities{OS: "linux", Arch: "amd64", Hostname: "box-1", CPUs: 8, MemoryBytes: 16 << 30,
		Git: "git version 2.39.5", FFmpeg: "ffmpeg version 5.1.6-0+deb12u1 Copyright (c) 2000-2024 the FFmpeg developers",
		ChromePath: "/usr/bin/chromium", ChromeVersion: "Chromium 156.0.8078.114 built on Debian GNU/Linux 12 (bookworm)", PasswordlessSudo: true}
	want := "linux/amd64 on box-1, 8 CPUs, 16.0 GiB; git 2.39.5, ffmpeg 5.1.6, chromium 156; passwordless sudo"
	if got := machineText(c); got != want {
		t.Errorf("machineText = %q, want %q", got, want)
	}
	if got := machineText(&api.Capabilities{OS: "linux", Arch: "arm64", CPUs: 2}); !strings.Contains(got, "no git, ffmpeg or browser") {
		t.Errorf("bare machine: %q", got)
	}
	h200 := api.GPU{Vendor: api.GPUVendorNVIDIA, Model: "NVIDIA H200", MemoryBytes: 143771 << 20}
	if got := machineText(&api.Capabilities{OS: "linux", Arch: "amd64", CPUs: 2, GPUs: []api.GPU{h200, h200}}); !strings.Contains(got, ", 2 × NVIDIA H200 (140.4 GiB);") {
		t.Errorf("machine with GPUs: %q", got)
	}
}

// TestSuspendResumeRefused: suspend and resume of a session that is not in
// the state they need fail (exit 2) with the server's sentence.
func TestSuspendResumeRefused(t *testing.T) {
	t.Parallel()
	ts := startTestServer(t)
	ts.outpost(t, "dev")
	id := ts.session(t, "dev", api.AgentScript)
	for _, tc := range []struct{ cmd, want string }{
		{"suspend", "only a running session can be suspended"},
		{"resume", "only a suspended session can be resumed"},
	} {
		tf := newTestFactory(t, nil)
		if code := tf.run(t, "--server", ts.url, "--token", ts.admin, "sessions", tc.cmd, id); code != exitError || !strings.Contains(tf.errOut.String(), tc.want) {
			t.Errorf("sessions %s of a new session: exit %d, stderr %q; want a failure saying %q", tc.cmd, code, tf.errOut, tc.want)
		}
	}
}
