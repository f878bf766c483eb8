package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/worker"
)

// runWorkerStartCmd parses `worker start args` under the global flags with
// env as the environment and returns the resolved options and factory.
func runWorkerStartCmd(t *testing.T, env map[string]string, args ...string) (*WorkerStartOptions, *testFactory, error) {
	t.Helper()
	tf := newTestFactory(t, env)
	var got *WorkerStartOptions
	root := &cobra.Command{Use: "outpost", SilenceErrors: true, SilenceUsage: true}
	addGlobalFlags(root, tf.Factory)
	root.AddCommand(NewCmdWorker(tf.Factory, func(_ context.Context, o *WorkerStartOptions) error { got = o; return nil }))
	root.SetArgs(append([]string{"worker", "start"}, args...))
	err := root.Execute()
	return got, tf, err
}

// TestWorkerStartEnvPrecedence: every worker setting with an environment
// variable takes a flag over its OUTPOST_ name over its public DEVIN_ name.
func TestWorkerStartEnvPrecedence(t *testing.T) {
	t.Parallel()
	for _, s := range []struct {
		flag string
		v    api.EnvVar
		get  func(*WorkerStartOptions, *Factory) string
		def  string // with nothing set
	}{
		{"token", api.EnvToken, func(_ *WorkerStartOptions, f *Factory) string { return f.Token }, ""},
		{"server", api.EnvServer, func(_ *WorkerStartOptions, f *Factory) string { return f.Server }, ""},
		{"acceptor-id", api.EnvAcceptorID, func(o *WorkerStartOptions, _ *Factory) string { return o.AcceptorID }, ""},
		{"gateway-url", api.EnvGatewayURL, func(o *WorkerStartOptions, _ *Factory) string { return o.GatewayURL }, ""},
		{"data-dir", api.EnvWorkerDataDir, func(o *WorkerStartOptions, _ *Factory) string { return o.DataDir }, "(home)"},
		{"pty-bridge-port", api.EnvPTYBridgePort, func(o *WorkerStartOptions, _ *Factory) string { return o.PTYBridgePort }, ""},
	} {
		for _, tc := range []struct {
			name string
			flag bool
			env  []string // which names are set: "outpost", "public"
			want string
		}{
			{name: "nothing", want: s.def},
			{name: "public name", env: []string{"public"}, want: "from-public"},
			{name: "outpost name", env: []string{"outpost"}, want: "from-outpost"},
			{name: "both names", env: []string{"outpost", "public"}, want: "from-outpost"},
			{name: "flag", flag: true, env: []string{"outpost", "public"}, want: "from-flag"},
		} {
			t.Run(s.flag+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				env := map[string]string{}
				for _, which := range tc.env {
					switch {
					case which == "outpost" && s.v.Name != "":
						env[s.v.Name] = "from-outpost"
					case which == "public" && s.v.Public != "":
						env[s.v.Public] = "from-public"
					}
				}
				if len(env) == 0 && len(tc.env) > 0 {
					t.Skipf("%s has no such name", s.flag)
				}
				want := tc.want
				if tc.name == "both names" && s.v.Name == "" {
					want = "from-public"
				}
				args := []string{"--outpost", "dev"}
				if tc.flag {
					args = append(args, "--"+s.flag, "from-flag")
				}
				o, tf, err := runWorkerStartCmd(t, env, args...)
				if err != nil {
					t.Fatal(err)
				}
				if want == "(home)" {
					want = defaultDataDir(t, tf)
				}
				if got := s.get(o, tf.Factory); got != want {
					t.Errorf("%s with %v (flag %v) = %q, want %q", s.flag, tc.env, tc.flag, got, want)
				}
			})
		}
	}
}

// TestWorkerStartPublicSpellings: --api-url is --server, --session-id is
// --session, --poll-interval-secs N is --poll-interval Ns, and the server
// may be given as an origin.
func TestWorkerStartPublicSpellings(t *testing.T) {
	t.Parallel()
	o, tf, err := runWorkerStartCmd(t, nil, "--outpost", "dev", "--api-url", "http://127.0.0.1:7420", "--session-id", "ses_1", "--poll-interval-secs", "7")
	if err != nil {
		t.Fatal(err)
	}
	if tf.Server != "http://127.0.0.1:7420" || o.SessionID != "ses_1" || o.PollInterval != 7*time.Second {
		t.Errorf("server %q, options %+v", tf.Server, o)
	}
	_, tf, err = runWorkerStartCmd(t, map[string]string{"DEVIN_API_URL": "http://127.0.0.1:7420", "DEVIN_OUTPOSTS_TOKEN": "tok"}, "--outpost", "dev")
	if err != nil {
		t.Fatal(err)
	}
	c, err := tf.Client()
	if err != nil || c.BaseURL() != "http://127.0.0.1:7420" {
		t.Errorf("client for the DEVIN_API_URL origin: %v %v", c, err)
	}
	_, _, err = runWorkerStartCmd(t, nil, "--outpost", "dev", "--poll-interval", "2s", "--poll-interval-secs", "3")
	if !isUsage(err) || !strings.Contains(err.Error(), "not both") {
		t.Errorf("both poll intervals: %v", err)
	}
	_, _, err = runWorkerStartCmd(t, nil, "--outpost", "dev", "--poll-interval-secs", "0")
	if !isUsage(err) {
		t.Errorf("--poll-interval-secs 0: %v", err)
	}
}

// TestWorkerStartDirectServe: a connect token in the environment and
// --session select direct-serve mode; its data dir defaults to the cache
// dir's parent; without --session or a gateway URL it is a usage error.
func TestWorkerStartDirectServe(t *testing.T) {
	t.Parallel()
	const gw = "ws://127.0.0.1:7420/v1/gateway"
	base := map[string]string{"DEVIN_REMOTE_SESSION_TOKEN": "ct-public", "DEVIN_OUTPOST_GATEWAY_URL": gw}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}

	o, tf, err := runWorkerStartCmd(t, base, "--session", "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	if o.ConnectToken != "ct-public" || o.GatewayURL != gw || o.SessionID != "ses_1" || o.DataDir != defaultDataDir(t, tf) || tf.Token != "" {
		t.Errorf("direct-serve options %+v, token %q", o, tf.Token)
	}
	o, _, err = runWorkerStartCmd(t, with("OUTPOST_CONNECT_TOKEN", "ct-outpost", "DEVIN_WORKER_CACHE_DIR", "/var/lib/devin-worker/cache/"), "--session", "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	if o.ConnectToken != "ct-outpost" || o.DataDir != "/var/lib/devin-worker" {
		t.Errorf("OUTPOST_CONNECT_TOKEN must win and the data dir be the cache dir's parent: %+v", o)
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{with("DEVIN_WORKER_CACHE_DIR", "/c/cache", "OUTPOST_WORKER_DATA_DIR", "/env/data"), []string{"--session", "s"}, "/env/data"},
		{with("DEVIN_WORKER_CACHE_DIR", "/c/cache"), []string{"--session", "s", "--data-dir", "/flag"}, "/flag"},
	} {
		o, _, err := runWorkerStartCmd(t, tc.env, tc.args...)
		if err != nil || o.DataDir != tc.want {
			t.Errorf("data dir with %v %v = %v %v, want %q", tc.env, tc.args, o, err, tc.want)
		}
	}
	// Outside direct-serve the cache dir does not move the data dir.
	o, tf, err = runWorkerStartCmd(t, map[string]string{"DEVIN_WORKER_CACHE_DIR": "/c/cache"}, "--outpost", "dev")
	if err != nil || o.DataDir != defaultDataDir(t, tf) || o.ConnectToken != "" {
		t.Errorf("queue mode: %+v %v", o, err)
	}

	_, _, err = runWorkerStartCmd(t, base, "--outpost", "dev")
	if !isUsage(err) || !strings.Contains(err.Error(), "--session") || !strings.Contains(err.Error(), "DEVIN_REMOTE_SESSION_TOKEN") {
		t.Errorf("a connect token without --session: %v", err)
	}
	_, _, err = runWorkerStartCmd(t, map[string]string{"DEVIN_REMOTE_SESSION_TOKEN": "ct"}, "--session", "ses_1")
	if !isUsage(err) || !strings.Contains(err.Error(), "DEVIN_OUTPOST_GATEWAY_URL") {
		t.Errorf("a connect token without a gateway URL: %v", err)
	}
	o, _, err = runWorkerStartCmd(t, map[string]string{"DEVIN_REMOTE_SESSION_TOKEN": "ct"}, "--session", "ses_1", "--gateway-url", gw)
	if err != nil || o.GatewayURL != gw {
		t.Errorf("--gateway-url in direct-serve: %+v %v", o, err)
	}
}

// defaultDataDir is the data dir of a worker in tf's current directory.
func defaultDataDir(t *testing.T, tf *testFactory) string {
	t.Helper()
	wd, _ := tf.Getwd()
	dir, err := worker.WorkspaceDataDir(tf.home, wd)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func isUsage(err error) bool {
	var ue usageError
	return errors.As(err, &ue)
}

// TestWorkerStartDataDirPerWorkspace: two workers of one user in two
// directories get two data dirs (and so two acceptor ids) by default, both
// under ~/.outpost/worker; --data-dir and OUTPOST_WORKER_DATA_DIR still
// choose one.
func TestWorkerStartDataDirPerWorkspace(t *testing.T) {
	t.Parallel()
	a, tf, err := runWorkerStartCmd(t, nil, "--outpost", "dev", "--dir", "/srv/box-1")
	if err != nil {
		t.Fatal(err)
	}
	tf2 := newTestFactory(t, nil)
	tf2.home = tf.home
	root := &cobra.Command{Use: "outpost", SilenceErrors: true, SilenceUsage: true}
	addGlobalFlags(root, tf2.Factory)
	var b *WorkerStartOptions
	root.AddCommand(NewCmdWorker(tf2.Factory, func(_ context.Context, o *WorkerStartOptions) error { b = o; return nil }))
	root.SetArgs([]string{"worker", "start", "--outpost", "dev", "--dir", "/srv/box-2"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if a.DataDir == b.DataDir || filepath.Dir(a.DataDir) != filepath.Join(tf.home, ".outpost", "worker") || filepath.Dir(b.DataDir) != filepath.Dir(a.DataDir) {
		t.Errorf("data dirs %q and %q, want two under %s", a.DataDir, b.DataDir, filepath.Join(tf.home, ".outpost", "worker"))
	}
}

// TestWorkerStartToken: --token works and warns that the command line is
// public; --token-file and OUTPOST_TOKEN_FILE read the token from a file,
// --token-file beating the environment; a file others can read is used
// with a warning; an empty or missing file and both flags are errors.
func TestWorkerStartToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	private := filepath.Join(dir, "token")
	if err := os.WriteFile(private, []byte("opt_from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	public := filepath.Join(dir, "public-token")
	if err := os.WriteFile(public, []byte("opt_from-public-file"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	_, tf, err := runWorkerStartCmd(t, nil, "--outpost", "dev", "--token", "opt_on-argv")
	if _, token, _ := tf.Endpoint(); err != nil || token != "opt_on-argv" {
		t.Fatalf("--token: %q %v", token, err)
	}
	if got := tf.errOut.String(); got != tokenFlagWarning+"\n" || !strings.Contains(got, "/proc/PID/cmdline") || !strings.Contains(got, "--token-file") {
		t.Errorf("--token warning = %q", got)
	}

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
		warn string
	}{
		{"flag", nil, []string{"--token-file", private}, "opt_from-file", ""},
		{"flag beats env", map[string]string{"OUTPOST_TOKEN": "opt_env", "DEVIN_OUTPOSTS_TOKEN": "opt_public"}, []string{"--token-file", private}, "opt_from-file", ""},
		{"env file", map[string]string{"OUTPOST_TOKEN_FILE": private}, nil, "opt_from-file", ""},
		{"env token beats env file", map[string]string{"OUTPOST_TOKEN_FILE": private, "OUTPOST_TOKEN": "opt_env"}, nil, "opt_env", ""},
		{"file others can read", nil, []string{"--token-file", public}, "opt_from-public-file", "can be read by other users (mode 0644)"},
	} {
		_, tf, err := runWorkerStartCmd(t, tc.env, append([]string{"--outpost", "dev"}, tc.args...)...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, token, err := tf.Endpoint()
		if err != nil || token != tc.want {
			t.Errorf("%s: token %q %v, want %q", tc.name, token, err, tc.want)
		}
		if got := tf.errOut.String(); tc.warn == "" && got != "" || !strings.Contains(got, tc.warn) {
			t.Errorf("%s: stderr %q, want %q", tc.name, got, tc.warn)
		}
	}

	for _, tc := range []struct{ file, want string }{
		{empty, "is empty"},
		{filepath.Join(dir, "missing"), "does not exist"},
	} {
		_, tf, err := runWorkerStartCmd(t, nil, "--outpost", "dev", "--token-file", tc.file)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := tf.Endpoint(); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.file) {
			t.Errorf("token file %s: %v, want %q", tc.file, err, tc.want)
		}
	}

	tf = newTestFactory(t, nil)
	if code := tf.run(t, "worker", "start", "--outpost", "dev", "--token", "a", "--token-file", private); code != exitUsage ||
		!strings.Contains(tf.errOut.String(), "not both") {
		t.Errorf("--token and --token-file: exit %d, %q", code, tf.errOut)
	}
}

// TestWorkerStartAcceptorIDChecked: an --acceptor-id the server would
// refuse is a usage error before anything starts.
func TestWorkerStartAcceptorIDChecked(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"has space", "ns/pod", "-x", strings.Repeat("a", 201)} {
		_, _, err := runWorkerStartCmd(t, nil, "--outpost", "dev", "--acceptor-id", id)
		if !isUsage(err) || !strings.Contains(err.Error(), "1 to 200 letters") {
			t.Errorf("--acceptor-id %q: %v", id, err)
		}
	}
}

// TestWorkerStartPoolAlias: --pool and DEVIN_OUTPOST_POOL_ID, the public
// CLI's older spellings that published orchestrators still use, name the
// outpost like --outpost and DEVIN_OUTPOST_ID, each with a one-line warning
// naming the new spelling, and no help text offers them.
func TestWorkerStartPoolAlias(t *testing.T) {
	t.Parallel()
	warnings := func(tf *testFactory) []string {
		var out []string
		for _, l := range strings.Split(tf.errOut.String(), "\n") {
			if strings.HasPrefix(l, "warning: ") {
				out = append(out, l)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		env   map[string]string
		args  []string
		want  string
		warns string // in the one warning; "" for none
	}{
		{"--pool", nil, []string{"--pool", "gpu"}, "gpu", "--outpost"},
		{"orchestrator's --session --pool --acceptor-id", nil, []string{"--session", "ses_1", "--pool", "gpu", "--acceptor-id", "orch-7"}, "gpu", "--outpost"},
		{"--pool=", nil, []string{"--pool=gpu"}, "gpu", "--outpost"},
		{"--pool beats the environment", map[string]string{"OUTPOST_OUTPOST": "env", "DEVIN_OUTPOST_ID": "env"}, []string{"--pool", "gpu"}, "gpu", "--outpost"},
		{"--pool and --outpost agreeing", nil, []string{"--pool", "gpu", "--outpost", "gpu"}, "gpu", "--outpost"},
		{"DEVIN_OUTPOST_POOL_ID", map[string]string{"DEVIN_OUTPOST_POOL_ID": "gpu"}, nil, "gpu", "DEVIN_OUTPOST_ID"},
		{"DEVIN_OUTPOST_ID beats DEVIN_OUTPOST_POOL_ID", map[string]string{"DEVIN_OUTPOST_POOL_ID": "old", "DEVIN_OUTPOST_ID": "gpu"}, nil, "gpu", ""},
		{"OUTPOST_OUTPOST beats DEVIN_OUTPOST_POOL_ID", map[string]string{"DEVIN_OUTPOST_POOL_ID": "old", "OUTPOST_OUTPOST": "gpu"}, nil, "gpu", ""},
		{"--outpost beats DEVIN_OUTPOST_POOL_ID", map[string]string{"DEVIN_OUTPOST_POOL_ID": "old"}, []string{"--outpost", "gpu"}, "gpu", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, tf, err := runWorkerStartCmd(t, tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if o.Outpost != tc.want {
				t.Errorf("outpost %q, want %q", o.Outpost, tc.want)
			}
			w := warnings(tf)
			switch {
			case tc.warns == "" && len(w) != 0:
				t.Errorf("warnings %q, want none", w)
			case tc.warns != "" && (len(w) != 1 || !strings.Contains(w[0], "deprecated") || !strings.Contains(w[0], tc.warns)):
				t.Errorf("warnings %q, want one naming %s", w, tc.warns)
			}
		})
	}
	o, _, err := runWorkerStartCmd(t, nil, "--session", "ses_1", "--pool", "gpu", "--acceptor-id", "orch-7")
	if err != nil || o.SessionID != "ses_1" || o.AcceptorID != "orch-7" {
		t.Errorf("--session --pool --acceptor-id: %+v %v", o, err)
	}
	if _, _, err := runWorkerStartCmd(t, nil, "--pool", "old", "--outpost", "gpu"); !isUsage(err) || !strings.Contains(err.Error(), "--pool") {
		t.Errorf("--pool and --outpost disagreeing: %v, want a usage error", err)
	}
	tf := newTestFactory(t, nil)
	if code := tf.run(t, "worker", "start", "--help"); code != 0 {
		t.Fatalf("worker start --help: exit %d", code)
	}
	help := tf.out.String()
	if !strings.Contains(help, "--outpost") || strings.Contains(help, "pool") || strings.Contains(help, api.EnvOutpostPoolID.Public) {
		t.Errorf("the help must offer --outpost and hide --pool and %s:\n%s", api.EnvOutpostPoolID.Public, help)
	}
}

// TestWorkerStartLabels: --label (repeatable) and OUTPOST_WORKER_LABELS
// (KEY=VALUE separated by commas) give the worker its labels, the flag
// over the variable; a bad label is a usage error stating the rule.
func TestWorkerStartLabels(t *testing.T) {
	t.Parallel()
	o, _, err := runWorkerStartCmd(t, nil, "--outpost", "dev", "--label", "gpu=h200", "--label", "region=eu")
	if err != nil || o.Labels["gpu"] != "h200" || o.Labels["region"] != "eu" || len(o.Labels) != 2 {
		t.Fatalf("--label: %v, %v", o, err)
	}
	o, _, err = runWorkerStartCmd(t, map[string]string{"OUTPOST_WORKER_LABELS": "gpu=a100, zone=b"}, "--outpost", "dev")
	if err != nil || o.Labels["gpu"] != "a100" || o.Labels["zone"] != "b" {
		t.Fatalf("OUTPOST_WORKER_LABELS: %v, %v", o, err)
	}
	o, _, err = runWorkerStartCmd(t, map[string]string{"OUTPOST_WORKER_LABELS": "gpu=a100"}, "--outpost", "dev", "--label", "gpu=h200")
	if err != nil || o.Labels["gpu"] != "h200" || len(o.Labels) != 1 {
		t.Fatalf("--label over OUTPOST_WORKER_LABELS: %v, %v", o, err)
	}
	for _, bad := range []string{"gpu", "bad key=x", "gpu=" + strings.Repeat("x", 64)} {
		_, _, err := runWorkerStartCmd(t, nil, "--outpost", "dev", "--label", bad)
		if !isUsage(err) || !strings.Contains(err.Error(), "--label") {
			t.Errorf("--label %q: %v", bad, err)
		}
	}
}
