package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/internal/api"
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
					want = filepath.Join(tf.home, ".outpost", "worker")
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
	if o.ConnectToken != "ct-public" || o.GatewayURL != gw || o.SessionID != "ses_1" || o.DataDir != filepath.Join(tf.home, ".outpost", "worker") || tf.Token != "" {
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
	if err != nil || o.DataDir != filepath.Join(tf.home, ".outpost", "worker") || o.ConnectToken != "" {
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

func isUsage(err error) bool {
	var ue usageError
	return errors.As(err, &ue)
}
