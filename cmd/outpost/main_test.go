package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// testFactory is a Factory with captured output, a fake environment and
// temporary config and home directories.
type testFactory struct {
	*Factory
	out, errOut *bytes.Buffer
	configDir   string
	home        string
}

func newTestFactory(t *testing.T, env map[string]string) *testFactory {
	t.Helper()
	tf := &testFactory{out: new(bytes.Buffer), errOut: new(bytes.Buffer), configDir: t.TempDir(), home: t.TempDir()}
	tf.Factory = &Factory{
		IO:            IOStreams{In: strings.NewReader(""), Out: tf.out, ErrOut: tf.errOut},
		Getenv:        func(k string) string { return env[k] },
		UserConfigDir: func() (string, error) { return tf.configDir, nil },
		UserHomeDir:   func() (string, error) { return tf.home, nil },
		Getwd:         func() (string, error) { return "/work/here", nil },
	}
	return tf
}

func (tf *testFactory) run(t *testing.T, args ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return Main(ctx, args, tf.Factory)
}

func TestEndpointPrecedence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		flagServer, flag string
		env              map[string]string
		saved            *config
		wantServer, want string
	}{
		{name: "defaults", wantServer: DefaultServer},
		{name: "saved login", saved: &config{Server: "http://saved", Token: "saved-tok"}, wantServer: "http://saved", want: "saved-tok"},
		{name: "env beats saved", env: map[string]string{"OUTPOST_SERVER": "http://env", "OUTPOST_TOKEN": "env-tok"},
			saved: &config{Server: "http://saved", Token: "saved-tok"}, wantServer: "http://env", want: "env-tok"},
		{name: "flag beats env", flagServer: "http://flag", flag: "flag-tok",
			env: map[string]string{"OUTPOST_SERVER": "http://env", "OUTPOST_TOKEN": "env-tok"}, wantServer: "http://flag", want: "flag-tok"},
		{name: "saved token only for its server", flagServer: "http://other",
			saved: &config{Server: "http://saved", Token: "saved-tok"}, wantServer: "http://other"},
		{name: "saved token for the same server", flagServer: "http://saved/",
			saved: &config{Server: "http://saved", Token: "saved-tok"}, wantServer: "http://saved/", want: "saved-tok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tf := newTestFactory(t, tc.env)
			if tc.saved != nil {
				if _, err := saveConfig(tf.Factory, *tc.saved); err != nil {
					t.Fatal(err)
				}
			}
			tf.Server, tf.Token = tc.flagServer, tc.flag
			server, token, err := tf.Endpoint()
			if err != nil || server != tc.wantServer || token != tc.want {
				t.Errorf("Endpoint() = %q, %q, %v; want %q, %q", server, token, err, tc.wantServer, tc.want)
			}
		})
	}
}

func TestServerOptionsPrecedence(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"OUTPOST_LISTEN": "0.0.0.0:9000", "OUTPOST_DATA_DIR": "/env/data", "OUTPOST_PUBLIC_URL": "https://env.example",
		"OUTPOST_CLAIM_TTL": "120", "OUTPOST_ADMIN_TOKEN": "adm",
	}
	var got *ServerOptions
	capture := func(_ context.Context, o *ServerOptions) error { got = o; return nil }
	var home string
	runServerCmd := func(env map[string]string, args ...string) *ServerOptions {
		tf := newTestFactory(t, env)
		home = tf.home
		cmd := NewCmdServer(tf.Factory, capture)
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("server %v: %v", args, err)
		}
		return got
	}

	o := runServerCmd(env)
	if o.Listen != "0.0.0.0:9000" || o.DataDir != "/env/data" || o.PublicURL != "https://env.example" ||
		o.ClaimTTL != 120*time.Second || o.AdminToken != "adm" {
		t.Errorf("from env: %+v", o)
	}
	o = runServerCmd(env, "--listen", "127.0.0.1:1", "--data-dir", "/flag", "--public-url", "http://flag", "--claim-ttl", "1m")
	if o.Listen != "127.0.0.1:1" || o.DataDir != "/flag" || o.PublicURL != "http://flag" || o.ClaimTTL != time.Minute {
		t.Errorf("flags must beat env: %+v", o)
	}
	o = runServerCmd(map[string]string{"XDG_DATA_HOME": "/xdg"})
	if o.Listen != "127.0.0.1:7420" || o.DataDir != filepath.Join("/xdg", "outpost") || o.ClaimTTL != 300*time.Second || o.PublicURL != "" {
		t.Errorf("defaults: %+v", o)
	}
	o = runServerCmd(nil)
	if want := filepath.Join(home, ".local", "share", "outpost"); o.DataDir != want {
		t.Errorf("data dir without XDG_DATA_HOME = %q, want %q", o.DataDir, want)
	}
}

func TestWorkerStartOptions(t *testing.T) {
	t.Parallel()
	var got *WorkerStartOptions
	capture := func(_ context.Context, o *WorkerStartOptions) error { got = o; return nil }
	env := map[string]string{"OUTPOST_WORKER_ACCEPTOR_ID": "env-acceptor", "OUTPOST_WORKER_DATA_DIR": "/env/worker"}

	tf := newTestFactory(t, env)
	cmd := NewCmdWorker(tf.Factory, capture)
	cmd.SetArgs([]string{"start", "--outpost", "dev", "--session-id", "sess-1", "--once", "--poll-interval", "2s"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.Outpost != "dev" || got.SessionID != "sess-1" || !got.Once || got.AcceptorID != "env-acceptor" ||
		got.DataDir != "/env/worker" || got.Dir != "/work/here" || got.PollInterval != 2*time.Second || got.GracePeriod != 30*time.Second {
		t.Errorf("options = %+v", got)
	}

	tf = newTestFactory(t, env)
	cmd = NewCmdWorker(tf.Factory, capture)
	cmd.SetArgs([]string{"start", "--outpost", "dev", "--acceptor-id", "flag-acceptor", "--data-dir", "/flag", "--dir", "/ws"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.AcceptorID != "flag-acceptor" || got.DataDir != "/flag" || got.Dir != "/ws" {
		t.Errorf("flags must beat env: %+v", got)
	}

	tf = newTestFactory(t, nil)
	cmd = NewCmdWorker(tf.Factory, capture)
	cmd.SetArgs([]string{"start", "--outpost", "dev"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.DataDir != defaultDataDir(t, tf) {
		t.Errorf("default data dir = %q", got.DataDir)
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		code    int
		errText string
	}{
		{[]string{"version"}, exitOK, ""},
		{[]string{"nope"}, exitUsage, "unknown command"},
		{[]string{"version", "--bogus"}, exitUsage, "unknown flag"},
		{[]string{"version", "-o", "yaml"}, exitUsage, "--output must be"},
		{[]string{"sessions", "get"}, exitUsage, "needs a session id"},
		{[]string{"worker", "start"}, exitUsage, "needs --outpost"},
		{[]string{"tokens", "create"}, exitUsage, "at least one --scope"},
		{[]string{"outposts", "list", "--server", "http://127.0.0.1:1"}, exitError, "cannot reach the Outpost server at http://127.0.0.1:1"},
	} {
		tf := newTestFactory(t, nil)
		if code := tf.run(t, tc.args...); code != tc.code || !strings.Contains(tf.errOut.String(), tc.errText) {
			t.Errorf("outpost %v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, tf.errOut, tc.code, tc.errText)
		}
	}
}

func TestVersionJSON(t *testing.T) {
	t.Parallel()
	tf := newTestFactory(t, nil)
	if code := tf.run(t, "version", "-o", "json"); code != 0 {
		t.Fatalf("exit %d: %s", code, tf.errOut)
	}
	var v map[string]string
	if err := json.Unmarshal(tf.out.Bytes(), &v); err != nil || v["version"] != "dev" || v["os"] != runtime.GOOS {
		t.Errorf("version -o json = %s (%v)", tf.out, err)
	}
}

func TestLoginSavesConfig(t *testing.T) {
	t.Parallel()
	ts := startTestServer(t)
	tf := newTestFactory(t, nil)
	if code := tf.run(t, "login", "--server", ts.url, "--token", ts.admin); code != 0 {
		t.Fatalf("exit %d: %s", code, tf.errOut)
	}
	path := filepath.Join(tf.configDir, "outpost", "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg config
	if err := json.Unmarshal(b, &cfg); err != nil || cfg != (config{Server: ts.url, Token: ts.admin}) {
		t.Errorf("config.json = %s", b)
	}
	if runtime.GOOS != "windows" {
		fi, _ := os.Stat(path)
		di, _ := os.Stat(filepath.Dir(path))
		if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
			t.Errorf("modes: file %v, dir %v", fi.Mode().Perm(), di.Mode().Perm())
		}
	}
	// Without a token login asks the server for a device login; a server
	// that cannot be reached is an error, and nothing is saved.
	tf2 := newTestFactory(t, nil)
	if code := tf2.run(t, "login", "--server", "http://127.0.0.1:1", "--no-browser"); code != exitError {
		t.Errorf("device login with no server: exit %d: %s", code, tf2.errOut)
	}
	if _, err := os.Stat(filepath.Join(tf2.configDir, "outpost", "config.json")); err == nil {
		t.Errorf("a failed device login saved a config")
	}
}
