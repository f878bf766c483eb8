package main

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// parseOptions runs the command newCmd makes, under a root with the global
// flags, with args and the environment env, and returns the Options its
// runF saw; nil when the run was not reached (a usage error, say).
func parseOptions[O any](t *testing.T, env map[string]string, newCmd func(*Factory, func(context.Context, *O) error) *cobra.Command, args ...string) (*O, *testFactory, error) {
	t.Helper()
	tf := newTestFactory(t, env)
	var got *O
	sub := newCmd(tf.Factory, func(_ context.Context, o *O) error { got = o; return nil })
	root := &cobra.Command{Use: "outpost", SilenceErrors: true, SilenceUsage: true}
	addGlobalFlags(root, tf.Factory)
	root.AddCommand(sub)
	root.SetArgs(append([]string{sub.Name()}, args...))
	root.SetOut(tf.out)
	root.SetErr(tf.errOut)
	err := root.ExecuteContext(t.Context())
	return got, tf, err
}

// mustParse is parseOptions for a command line that must reach the run.
func mustParse[O any](t *testing.T, env map[string]string, newCmd func(*Factory, func(context.Context, *O) error) *cobra.Command, args ...string) (*O, *testFactory) {
	t.Helper()
	got, tf, err := parseOptions(t, env, newCmd, args...)
	if err != nil || got == nil {
		t.Fatalf("%v: run reached %v, err %v", args, got != nil, err)
	}
	if f := reflect.ValueOf(got).Elem().FieldByName("f"); !f.IsValid() || f.Pointer() != reflect.ValueOf(tf.Factory).Pointer() {
		t.Errorf("%v: the options do not carry the command's Factory", args)
	}
	return got, tf
}

// mustRefuse is parseOptions for a command line that is a usage error.
func mustRefuse[O any](t *testing.T, env map[string]string, newCmd func(*Factory, func(context.Context, *O) error) *cobra.Command, args ...string) {
	t.Helper()
	got, _, err := parseOptions(t, env, newCmd, args...)
	if !isUsage(err) || got != nil {
		t.Errorf("%v: err %v, run reached %v; want a usage error before the run", args, err, got != nil)
	}
}

func TestOutpostsOptions(t *testing.T) {
	t.Parallel()
	c, _ := mustParse(t, nil, NewCmdOutpostsCreate, "gpu", "--platform", "macos", "--description", "Mac minis", "--remote-binary-sha", "1a2b3c4d5e6f")
	if r := c.Request; r.Name != "gpu" || r.Platform != "macos" || r.Description != "Mac minis" || r.RemoteBinarySHA != "1a2b3c4d5e6f" {
		t.Errorf("create: %+v", r)
	}
	c, _ = mustParse(t, nil, NewCmdOutpostsCreate, "gpu", "--max-running", "3", "--max-attempts", "5")
	if r := c.Request; r.MaxRunning != 3 || r.MaxAttempts != 5 {
		t.Errorf("create --max-running 3 --max-attempts 5: %+v", r)
	}
	mustRefuse(t, nil, NewCmdOutpostsCreate, "gpu", "--max-running", "three")
	c, _ = mustParse(t, nil, NewCmdOutpostsCreate, "ci", "--max-snapshot-bytes", "2147483648")
	if r := c.Request; r.MaxSnapshotBytes != 2<<30 {
		t.Errorf("create --max-snapshot-bytes 2147483648: %+v", r)
	}
	mustRefuse(t, nil, NewCmdOutpostsCreate, "ci", "--max-snapshot-bytes", "2GiB")
	c, _ = mustParse(t, nil, NewCmdOutpostsCreate, "dev")
	if r := c.Request; r.Name != "dev" || r.Platform != "" || r.Description != "" || r.MaxRunning != 0 || r.MaxAttempts != 0 || r.MaxSnapshotBytes != 0 {
		t.Errorf("create defaults: %+v", r)
	}
	mustRefuse(t, nil, NewCmdOutpostsCreate)
	d, _ := mustParse(t, nil, NewCmdOutpostsDelete, "dev", "--force")
	if d.Outpost != "dev" || !d.Force {
		t.Errorf("delete --force: %+v", d)
	}
	if d, _ = mustParse(t, nil, NewCmdOutpostsDelete, "dev"); d.Force {
		t.Errorf("delete forces by default")
	}
	if g, _ := mustParse(t, nil, NewCmdOutpostsGet, "out_1"); g.Outpost != "out_1" {
		t.Errorf("get: %+v", g)
	}
	mustParse(t, nil, NewCmdOutpostsList)
	mustRefuse(t, nil, NewCmdOutpostsList, "extra")
}

func TestSessionsOptions(t *testing.T) {
	t.Parallel()
	l, _ := mustParse(t, nil, NewCmdSessionsList, "--outpost", "dev", "--status", "running", "--limit", "10")
	if l.Filter.Outpost != "dev" || l.Filter.Status != "running" || l.Filter.First != 10 {
		t.Errorf("list: %+v", l.Filter)
	}
	if l, _ = mustParse(t, nil, NewCmdSessionsList); l.Filter.First != 0 || l.Filter.Status != "" {
		t.Errorf("list defaults: %+v", l.Filter)
	}
	mustRefuse(t, nil, NewCmdSessionsList, "--limit", "201")
	mustRefuse(t, nil, NewCmdSessionsList, "--status", "sleeping")

	if g, _ := mustParse(t, nil, NewCmdSessionsGet, "ses_1"); g.ID != "ses_1" {
		t.Errorf("get: %+v", g)
	}
	mustRefuse(t, nil, NewCmdSessionsGet)
	if tm, _ := mustParse(t, nil, NewCmdSessionsTerminate, "ses_1", "--reason", "wrong branch"); tm.ID != "ses_1" || tm.Reason != "wrong branch" {
		t.Errorf("terminate: %+v", tm)
	}
	if s, _ := mustParse(t, nil, NewCmdSessionsSuspend, "ses_1"); s.ID != "ses_1" {
		t.Errorf("suspend: %+v", s)
	}
	mustRefuse(t, nil, NewCmdSessionsSuspend)
	if s, _ := mustParse(t, nil, NewCmdSessionsSuspend, "ses_1", "--wait", "30s", "--interrupt", "--no-wait"); s.Wait != 30*time.Second || !s.Interrupt || !s.NoWait {
		t.Errorf("suspend --wait 30s --interrupt --no-wait: %+v", s)
	}
	if s, _ := mustParse(t, nil, NewCmdSessionsSuspend, "ses_1", "--wait", "10m"); s.Wait != 10*time.Minute || s.Interrupt || s.NoWait {
		t.Errorf("suspend --wait 10m: %+v", s)
	}
	mustRefuse(t, nil, NewCmdSessionsSuspend, "ses_1", "--wait", "11m")
	mustRefuse(t, nil, NewCmdSessionsSuspend, "ses_1", "--wait", "-1s")
	mustRefuse(t, nil, NewCmdSessionsSuspend, "ses_1", "--wait", "soon")
	if r, _ := mustParse(t, nil, NewCmdSessionsResume, "ses_1"); r.ID != "ses_1" {
		t.Errorf("resume: %+v", r)
	}
	mustRefuse(t, nil, NewCmdSessionsResume, "ses_1", "ses_2")
	if s, _ := mustParse(t, nil, NewCmdSessionsSend, "ses_1", "hello there"); s.ID != "ses_1" || s.Text != "hello there" {
		t.Errorf("send: %+v", s)
	}
	mustRefuse(t, nil, NewCmdSessionsSend, "ses_1")
	if lg, _ := mustParse(t, nil, NewCmdSessionsLogs, "-f", "ses_1"); lg.ID != "ses_1" || !lg.Follow {
		t.Errorf("logs -f: %+v", lg)
	}
	if lg, _ := mustParse(t, nil, NewCmdSessionsLogs, "ses_1"); lg.Follow {
		t.Errorf("logs follows by default")
	}
	a, _ := mustParse(t, nil, NewCmdSessionsArtifacts, "ses_1", "--get", "report.pdf", "--out", "-")
	if a.ID != "ses_1" || a.Get != "report.pdf" || a.Out != "-" {
		t.Errorf("artifacts: %+v", a)
	}
	if got, _, err := parseOptions(t, nil, NewCmdSessionsArtifacts, "ses_1", "--out", "x"); err == nil || got != nil {
		t.Errorf("artifacts --out without --get: err %v, run reached %v", err, got != nil)
	}
}

func TestTokensOptions(t *testing.T) {
	t.Parallel()
	c, _ := mustParse(t, nil, NewCmdTokensCreate, "--scope", "outposts.machine", "--scope", "sessions.read",
		"--outpost", "dev", "--name", "dev-workers", "--expires-in", "24h")
	if r := c.Request; !slices.Equal(r.Scopes, []string{"outposts.machine", "sessions.read"}) || r.Outpost != "dev" ||
		r.Name != "dev-workers" || r.ExpiresInS != 86400 || c.ExpiresIn != 24*time.Hour {
		t.Errorf("create: %+v", c)
	}
	if c, _ = mustParse(t, nil, NewCmdTokensCreate, "--scope", "admin"); c.Request.ExpiresInS != 0 {
		t.Errorf("create expires by default: %+v", c.Request)
	}
	mustRefuse(t, nil, NewCmdTokensCreate)
	mustRefuse(t, nil, NewCmdTokensCreate, "--scope", "admin", "--expires-in", "-1h")
	if r, _ := mustParse(t, nil, NewCmdTokensRevoke, "tok_1"); r.ID != "tok_1" {
		t.Errorf("revoke: %+v", r)
	}
	mustParse(t, nil, NewCmdTokensList)
}

func TestLoginOptions(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OUTPOST_SERVER": "http://env:7420", "OUTPOST_TOKEN": "env-tok"}
	if o, _ := mustParse(t, env, NewCmdLogin); o.Server != "http://env:7420" || o.Token != "env-tok" {
		t.Errorf("from env: %+v", o)
	}
	if o, _ := mustParse(t, env, NewCmdLogin, "--server", "https://flag", "--token", "flag-tok"); o.Server != "https://flag" || o.Token != "flag-tok" {
		t.Errorf("flags must beat env: %+v", o)
	}
	if o, _ := mustParse(t, map[string]string{"OUTPOST_TOKEN": "t"}, NewCmdLogin); o.Server != DefaultServer {
		t.Errorf("default server: %+v", o)
	}
	// No token: a device login, which reaches the run.
	if o, _ := mustParse(t, nil, NewCmdLogin, "--server", "http://x", "--no-browser"); o.Token != "" || !o.NoBrowser {
		t.Errorf("device login: %+v", o)
	}
	mustRefuse(t, nil, NewCmdLogin, "--server", "x:7420", "--token", "t")
}

func TestVersionAndMCPOptions(t *testing.T) {
	t.Parallel()
	mustParse(t, nil, NewCmdVersion)
	mustRefuse(t, nil, NewCmdVersion, "extra")
	if o, _ := mustParse(t, nil, NewCmdMCP, "--session", "ses_1"); o.Session != "ses_1" {
		t.Errorf("mcp: %+v", o)
	}
	mustRefuse(t, nil, NewCmdMCP)
}

func TestDoctorOptions(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OUTPOST_WORKER_DATA_DIR": "/env/data", "DEVIN_OUTPOSTS_TOKEN": "pub-tok", "DEVIN_API_URL": "https://pub"}
	o, tf := mustParse(t, env, NewCmdDoctor, "--dir", "/w", "--outpost", "dev")
	if o.Dir != "/w" || o.Outpost != "dev" || o.DataDir != "/env/data" {
		t.Errorf("doctor: %+v", o)
	}
	if tf.Token != "pub-tok" || tf.Server != "https://pub" {
		t.Errorf("doctor reads the public names of the token and server: %q, %q", tf.Token, tf.Server)
	}
	if o, _ = mustParse(t, env, NewCmdDoctor, "--data-dir", "/flag"); o.DataDir != "/flag" || o.Dir != "" {
		t.Errorf("--data-dir must beat the env: %+v", o)
	}
}

func TestUpAndRemoteServeOptions(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OUTPOST_LISTEN": "127.0.0.1:9999", "OUTPOST_LOG_LEVEL": "debug"}
	u, _ := mustParse(t, env, NewCmdUp, "--no-demo")
	if u.Listen != "127.0.0.1:9999" || u.Dir != ".outpost" || !u.NoDemo || u.LogLevel != "debug" || u.LogFormat != logFormatText {
		t.Errorf("up: %+v", u)
	}
	if u, _ = mustParse(t, env, NewCmdUp, "--listen", "127.0.0.1:1", "--dir", "/d"); u.Listen != "127.0.0.1:1" || u.Dir != "/d" || u.NoDemo {
		t.Errorf("up flags: %+v", u)
	}
	mustRefuse(t, map[string]string{"OUTPOST_LOG_FORMAT": "xml"}, NewCmdUp)

	r, _ := mustParse(t, map[string]string{"OUTPOST_LOG_FORMAT": "json"}, NewCmdRemoteServe, "--log-level", "warn")
	if r.LogLevel != "warn" || r.LogFormat != logFormatJSON {
		t.Errorf("remote serve: %+v", r)
	}
	mustRefuse(t, nil, NewCmdRemoteServe, "--log-level", "loud")
	// A worker hands a session to another build with --then-exec; it takes
	// the session from standard input and a command, and nothing else takes
	// arguments.
	if r, _ = mustParse(t, nil, NewCmdRemoteServe, "--session-from-stdin", "--then-exec", "--", "/cache/remote", "remote", "serve"); !slices.Equal(r.ThenExec, []string{"/cache/remote", "remote", "serve"}) {
		t.Errorf("remote serve --then-exec: %+v", r)
	}
	mustRefuse(t, nil, NewCmdRemoteServe, "--then-exec", "--", "/cache/remote")
	mustRefuse(t, nil, NewCmdRemoteServe, "--session-from-stdin", "--then-exec")
	mustRefuse(t, nil, NewCmdRemoteServe, "extra")
}

func TestWorkerInstallOptions(t *testing.T) {
	t.Parallel()
	exe := filepath.Join(t.TempDir(), "outpost")
	i, _ := mustParse(t, nil, NewCmdWorkerInstall, "--outpost", "gpu", "--user-unit", "--dry-run", "--executable", exe, "--dir", "/srv/w")
	if i.Outpost != "gpu" || !i.UserUnit || !i.DryRun || i.Executable != exe || i.Dir != "/srv/w" || i.User != "" {
		t.Errorf("install: %+v", i)
	}
	if i, _ = mustParse(t, nil, NewCmdWorkerInstall, "--outpost", "gpu", "--user-unit"); !filepath.IsAbs(i.Executable) || i.DryRun || i.TokenFile != "" {
		t.Errorf("install defaults: this executable, no dry run, the token of --token: %+v", i)
	}
	mustRefuse(t, nil, NewCmdWorkerInstall, "--dry-run")
	mustRefuse(t, nil, NewCmdWorkerInstall, "--outpost", "gpu", "--dry-run", "--dir", "relative")
	u, _ := mustParse(t, nil, NewCmdWorkerUninstall, "--outpost", "gpu", "--user-unit")
	if u.Outpost != "gpu" || !u.UserUnit || u.DryRun {
		t.Errorf("uninstall: %+v", u)
	}
	mustRefuse(t, nil, NewCmdWorkerUninstall, "--outpost", "no/slash", "--user-unit")
}

func TestServerBackupRestoreOptions(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OUTPOST_DATA_DIR": "/env/data", "OUTPOST_SECRET_KEY_FILE": "/env/key"}
	b, _ := mustParse(t, env, NewCmdServerBackup, "/b.tar.gz", "--exclude-files")
	if b.File != "/b.tar.gz" || b.DataDir != "/env/data" || b.SecretKeyFile != "/env/key" || !b.ExcludeFiles || b.ExcludeSecretKey {
		t.Errorf("backup: %+v", b)
	}
	b, _ = mustParse(t, env, NewCmdServerBackup, "/b.tar.gz", "--data-dir", "/flag", "--secret-key-file", "/flag-key", "--exclude-secret-key")
	if b.DataDir != "/flag" || b.SecretKeyFile != "/flag-key" || !b.ExcludeSecretKey {
		t.Errorf("backup flags must beat env: %+v", b)
	}
	b, tf := mustParse(t, map[string]string{"XDG_DATA_HOME": ""}, NewCmdServerBackup, "/b.tar.gz")
	if want := filepath.Join(tf.home, ".local", "share", "outpost"); b.DataDir != want {
		t.Errorf("backup default data dir %q, want %q", b.DataDir, want)
	}
	mustRefuse(t, nil, NewCmdServerBackup)
	r, _ := mustParse(t, env, NewCmdServerRestore, "/b.tar.gz", "--force")
	if r.File != "/b.tar.gz" || r.DataDir != "/env/data" || !r.Force {
		t.Errorf("restore: %+v", r)
	}
}
