package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/internal/server"
)

// setting is one flag with an environment variable: how to give it each
// way, and how to read the resolved value.
type setting[O any] struct {
	flag, env string
	// file, env and flag values, all different from the default.
	fileVal, envVal, flagVal string
	// want* are the resolved values for each source; "" means the
	// source's value as given.
	wantFile, wantEnv, wantFlag string
	def                         string // the resolved value with nothing set
	get                         func(O, *Factory) string
}

// precedenceCases runs the four layers of every setting through parse:
// default, file, env over file, flag over env and file.
func precedenceCases[O any](t *testing.T, settings []setting[O], extraArgs []string,
	parse func(t *testing.T, env map[string]string, args ...string) (O, *Factory, error)) {
	t.Helper()
	or := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	for _, s := range settings {
		for _, tc := range []struct {
			name            string
			file, env, flag bool
			want            string
		}{
			{name: "default", want: s.def},
			{name: "file", file: true, want: or(s.wantFile, s.fileVal)},
			{name: "env beats file", file: true, env: true, want: or(s.wantEnv, s.envVal)},
			{name: "flag beats env and file", file: true, env: true, flag: true, want: or(s.wantFlag, s.flagVal)},
			{name: "flag beats file", file: true, flag: true, want: or(s.wantFlag, s.flagVal)},
		} {
			t.Run(s.flag+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				env := map[string]string{}
				args := slices.Clone(extraArgs)
				if tc.file {
					path := filepath.Join(t.TempDir(), "outpost.yaml")
					if err := os.WriteFile(path, []byte(fmt.Sprintf("%s: %q\n", s.flag, s.fileVal)), 0o600); err != nil {
						t.Fatal(err)
					}
					args = append(args, "--config", path)
				}
				if tc.env {
					env[s.env] = s.envVal
				}
				if tc.flag {
					args = append(args, "--"+s.flag, s.flagVal)
				}
				o, f, err := parse(t, env, args...)
				if err != nil {
					t.Fatal(err)
				}
				if got := s.get(o, f); got != tc.want {
					t.Errorf("%s (file %v, env %v, flag %v) = %q, want %q", s.flag, tc.file, tc.env, tc.flag, got, tc.want)
				}
			})
		}
	}
}

func parseServer(t *testing.T, env map[string]string, args ...string) (*ServerOptions, *Factory, error) {
	t.Helper()
	tf := newTestFactory(t, env)
	var got *ServerOptions
	cmd := NewCmdServer(tf.Factory, func(_ context.Context, o *ServerOptions) error { got = o; return nil })
	cmd.SetArgs(args)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	return got, tf.Factory, cmd.Execute()
}

// TestServerConfigPrecedence: every server setting with an environment
// variable takes the flag over the variable over the config file over the
// default.
func TestServerConfigPrecedence(t *testing.T) {
	t.Parallel()
	str := func(get func(*ServerOptions) string) func(*ServerOptions, *Factory) string {
		return func(o *ServerOptions, _ *Factory) string { return get(o) }
	}
	dur := func(get func(*ServerOptions) time.Duration) func(*ServerOptions, *Factory) string {
		return func(o *ServerOptions, _ *Factory) string { return get(o).String() }
	}
	settings := []setting[*ServerOptions]{
		{flag: "listen", env: "OUTPOST_LISTEN", fileVal: "0.0.0.0:7420", envVal: "127.0.0.1:7421", flagVal: "127.0.0.1:7422",
			def: "127.0.0.1:7420", get: str(func(o *ServerOptions) string { return o.Listen })},
		{flag: "data-dir", env: "OUTPOST_DATA_DIR", fileVal: "/file/data", envVal: "/env/data", flagVal: "/flag/data",
			def: "(home)", get: str(func(o *ServerOptions) string { return o.DataDir })},
		{flag: "public-url", env: "OUTPOST_PUBLIC_URL", fileVal: "https://file.example", envVal: "https://env.example", flagVal: "https://flag.example",
			get: str(func(o *ServerOptions) string { return o.PublicURL })},
		{flag: "database", env: "OUTPOST_DATABASE_URL", fileVal: "postgres://file/db", envVal: "postgres://env/db", flagVal: "postgres://flag/db",
			get: str(func(o *ServerOptions) string { return o.DatabaseURL })},
		{flag: "blob-store", env: "OUTPOST_BLOB_STORE", fileVal: "fs", envVal: "fs", flagVal: "fs",
			get: str(func(o *ServerOptions) string { return o.BlobStore })},
		{flag: "dist-dir", env: "OUTPOST_DIST_DIR", fileVal: "/file/dist", envVal: "/env/dist", flagVal: "/flag/dist",
			get: str(func(o *ServerOptions) string { return o.DistDir })},
		{flag: "secret-key-file", env: "OUTPOST_SECRET_KEY_FILE", fileVal: "/file/key", envVal: "/env/key", flagVal: "/flag/key",
			get: str(func(o *ServerOptions) string { return o.SecretKeyFile })},
		{flag: "replica-id", env: "OUTPOST_REPLICA_ID", fileVal: "file-1", envVal: "env-1", flagVal: "flag-1",
			get: str(func(o *ServerOptions) string { return o.ReplicaID })},
		{flag: "replica-url", env: "OUTPOST_REPLICA_URL", fileVal: "http://file:7420", envVal: "http://env:7420", flagVal: "http://flag:7420",
			get: str(func(o *ServerOptions) string { return o.ReplicaURL })},
		{flag: "claim-ttl", env: "OUTPOST_CLAIM_TTL", fileVal: "90s", envVal: "120", flagVal: "3m",
			wantFile: "1m30s", wantEnv: "2m0s", wantFlag: "3m0s", def: "5m0s", get: dur(func(o *ServerOptions) time.Duration { return o.ClaimTTL })},
		{flag: "reconnect-grace", env: "OUTPOST_RECONNECT_GRACE", fileVal: "10s", envVal: "20s", flagVal: "30s",
			def: "1m0s", get: dur(func(o *ServerOptions) time.Duration { return o.ReconnectGrace })},
		{flag: "artifact-retention", env: "OUTPOST_ARTIFACT_RETENTION", fileVal: "1h", envVal: "2h", flagVal: "3h",
			wantFile: "1h0m0s", wantEnv: "2h0m0s", wantFlag: "3h0m0s", def: "720h0m0s",
			get: dur(func(o *ServerOptions) time.Duration { return o.ArtifactRetention })},
		{flag: "snapshot-interval", env: "OUTPOST_SNAPSHOT_INTERVAL", fileVal: "1m", envVal: "2m", flagVal: "3m",
			wantFile: "1m0s", wantEnv: "2m0s", wantFlag: "3m0s", def: "0s",
			get: dur(func(o *ServerOptions) time.Duration { return o.SnapshotInterval })},
		{flag: "max-call-output-bytes", env: "OUTPOST_MAX_CALL_OUTPUT_BYTES", fileVal: "100", envVal: "200", flagVal: "300",
			def: fmt.Sprint(server.DefaultMaxCallOutputBytes), get: str(func(o *ServerOptions) string { return fmt.Sprint(o.MaxCallOutputBytes) })},
		{flag: "max-session-output-bytes", env: "OUTPOST_MAX_SESSION_OUTPUT_BYTES", fileVal: "100", envVal: "0", flagVal: "300",
			def: fmt.Sprint(server.DefaultMaxSessionOutputBytes), get: str(func(o *ServerOptions) string { return fmt.Sprint(o.MaxSessionOutputBytes) })},
		{flag: "ended-entry-retention", env: "OUTPOST_ENDED_ENTRY_RETENTION", fileVal: "1m", envVal: "2m", flagVal: "0s",
			wantFile: "1m0s", wantEnv: "2m0s", wantFlag: "0s", def: "10m0s",
			get: dur(func(o *ServerOptions) time.Duration { return o.EndedEntryRetention })},
		{flag: "llm-provider", env: "OUTPOST_LLM_PROVIDER", fileVal: "openai", envVal: "anthropic", flagVal: "openai-flag",
			get: str(func(o *ServerOptions) string { return o.LLM.Provider })},
		{flag: "llm-base-url", env: "OUTPOST_LLM_BASE_URL", fileVal: "http://file/v1", envVal: "http://env/v1", flagVal: "http://flag/v1",
			get: str(func(o *ServerOptions) string { return o.LLM.BaseURL })},
		{flag: "llm-model", env: "OUTPOST_LLM_MODEL", fileVal: "file-model", envVal: "env-model", flagVal: "flag-model",
			get: str(func(o *ServerOptions) string { return o.LLM.Model })},
		{flag: "log-level", env: "OUTPOST_LOG_LEVEL", fileVal: "debug", envVal: "warn", flagVal: "error",
			def: "info", get: str(func(o *ServerOptions) string { return o.LogLevel })},
		{flag: "log-format", env: "OUTPOST_LOG_FORMAT", fileVal: "json", envVal: "text", flagVal: "json",
			def: "text", get: str(func(o *ServerOptions) string { return o.LogFormat })},
	}
	// The default data dir is under the test's home; every other check
	// compares strings.
	parse := func(t *testing.T, env map[string]string, args ...string) (*ServerOptions, *Factory, error) {
		o, f, err := parseServer(t, env, args...)
		if err == nil && o.DataDir == filepath.Join(must(f.UserHomeDir()), ".local", "share", "outpost") {
			o.DataDir = "(home)"
		}
		return o, f, err
	}
	precedenceCases(t, settings, nil, parse)
}

// TestServerConfigTLSPair: the TLS files come from the file, the
// environment or flags, each of the pair on its own.
func TestServerConfigTLSPair(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "server.yaml")
	if err := os.WriteFile(path, []byte("tls-cert: /file/tls.crt\ntls-key: /file/tls.key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, _, err := parseServer(t, map[string]string{"OUTPOST_TLS_KEY": "/env/tls.key"}, "--config", path)
	if err != nil || o.TLSCertFile != "/file/tls.crt" || o.TLSKeyFile != "/env/tls.key" {
		t.Errorf("cert %q key %q err %v", o.TLSCertFile, o.TLSKeyFile, err)
	}
}

// TestWorkerConfigPrecedence: every worker setting with an environment
// variable, the global --server and --token too, takes the flag over the
// variable (either name) over the config file over the default.
func TestWorkerConfigPrecedence(t *testing.T) {
	t.Parallel()
	str := func(get func(*WorkerStartOptions) string) func(*WorkerStartOptions, *Factory) string {
		return func(o *WorkerStartOptions, _ *Factory) string { return get(o) }
	}
	settings := []setting[*WorkerStartOptions]{
		{flag: "outpost", env: "OUTPOST_OUTPOST", fileVal: "gpu-h200", envVal: "env-outpost", flagVal: "flag-outpost",
			get: str(func(o *WorkerStartOptions) string { return o.Outpost })},
		{flag: "token", env: "OUTPOST_TOKEN", fileVal: "file-token", envVal: "env-token", flagVal: "flag-token",
			get: func(_ *WorkerStartOptions, f *Factory) string { return f.Token }},
		{flag: "server", env: "DEVIN_API_URL", fileVal: "https://file.example", envVal: "https://env.example", flagVal: "https://flag.example",
			get: func(_ *WorkerStartOptions, f *Factory) string { return f.Server }},
		{flag: "ca-file", env: "OUTPOST_CA_FILE", fileVal: "/file/ca.pem", envVal: "/env/ca.pem", flagVal: "/flag/ca.pem",
			get: func(_ *WorkerStartOptions, f *Factory) string { return f.CAFile }},
		{flag: "acceptor-id", env: "DEVIN_WORKER_ACCEPTOR_ID", fileVal: "file-acceptor", envVal: "env-acceptor", flagVal: "flag-acceptor",
			get: str(func(o *WorkerStartOptions) string { return o.AcceptorID })},
		{flag: "data-dir", env: "OUTPOST_WORKER_DATA_DIR", fileVal: "/file/data", envVal: "/env/data", flagVal: "/flag/data",
			def: "(home)", get: str(func(o *WorkerStartOptions) string { return o.DataDir })},
		{flag: "gateway-url", env: "OUTPOST_GATEWAY_URL", fileVal: "wss://file/v1/gateway", envVal: "wss://env/v1/gateway", flagVal: "wss://flag/v1/gateway",
			get: str(func(o *WorkerStartOptions) string { return o.GatewayURL })},
		{flag: "cache-dir", env: "OUTPOST_WORKER_CACHE_DIR", fileVal: "/file/cache", envVal: "/env/cache", flagVal: "/flag/cache",
			get: str(func(o *WorkerStartOptions) string { return o.CacheDir })},
		{flag: "static-base-url", env: "DEVIN_WORKER_STATIC_BASE_URL", fileVal: "https://file/dist/", envVal: "https://env/dist/", flagVal: "https://flag/dist/",
			get: str(func(o *WorkerStartOptions) string { return o.StaticBaseURL })},
		{flag: "remote-binary-sha", env: "OUTPOST_WORKER_REMOTE_SHA", fileVal: "aaaaaa1", envVal: "bbbbbb2", flagVal: "cccccc3",
			get: str(func(o *WorkerStartOptions) string { return o.RemoteBinarySHA })},
		{flag: "isolation", env: "OUTPOST_WORKER_ISOLATION", fileVal: "bwrap", envVal: "none", flagVal: "auto",
			def: "auto", get: str(func(o *WorkerStartOptions) string { return string(o.Isolation.Mode) })},
		{flag: "log-level", env: "OUTPOST_LOG_LEVEL", fileVal: "debug", envVal: "warn", flagVal: "error",
			def: "info", get: str(func(o *WorkerStartOptions) string { return o.LogLevel })},
		{flag: "log-format", env: "OUTPOST_LOG_FORMAT", fileVal: "json", envVal: "text", flagVal: "json",
			def: "text", get: str(func(o *WorkerStartOptions) string { return o.LogFormat })},
	}
	parse := func(t *testing.T, env map[string]string, args ...string) (*WorkerStartOptions, *Factory, error) {
		o, tf, err := runWorkerStartCmd(t, env, args...)
		if err == nil && strings.HasPrefix(o.DataDir, tf.home+"/") {
			o.DataDir = "(home)"
		}
		var f *Factory
		if tf != nil {
			f = tf.Factory
		}
		return o, f, err
	}
	// --session: a worker needs an outpost or a session, and the outpost
	// is one of the settings.
	precedenceCases(t, settings, []string{"--session", "ses_1"}, parse)
}

// TestWorkerConfigFileKeys: repeatable flags take lists, the public
// spellings work as keys, the file counts as giving a flag, and the file
// is hidden from sessions.
func TestWorkerConfigFileKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "worker.yaml")
	body := fmt.Sprintf(`outpost: gpu-h200
api-url: https://outpost.example.com
poll-interval-secs: 7
grace-period: 45s
once: true
bwrap-ro-bind:
  - %[1]s
  - %[1]s:/srv/tools
`, dir)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	o, tf, err := runWorkerStartCmd(t, nil, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	if o.Outpost != "gpu-h200" || tf.Server != "https://outpost.example.com" || o.PollInterval != 7*time.Second ||
		o.GracePeriod != 45*time.Second || !o.Once || len(o.Isolation.Binds) != 2 {
		t.Errorf("options %+v, server %q", o, tf.Server)
	}
	if !slices.Contains(o.Isolation.Hide, path) || !slices.Contains(o.Isolation.Hide, systemConfigDir) {
		t.Errorf("hidden from sessions: %q; want the config file and %s", o.Isolation.Hide, systemConfigDir)
	}
	if len(o.overridden) != 0 {
		t.Errorf("nothing is overridden: %q", o.overridden)
	}

	// The file gives poll-interval-secs, so a --poll-interval is the same
	// contradiction as on the command line.
	_, _, err = runWorkerStartCmd(t, nil, "--config", path, "--poll-interval", "3s")
	if !isUsage(err) || !strings.Contains(err.Error(), "not both") {
		t.Errorf("poll interval in both spellings: %v", err)
	}

	// The environment overriding a file key is remembered, for a warning.
	o, _, err = runWorkerStartCmd(t, map[string]string{"OUTPOST_OUTPOST": "other"}, "--config", path)
	if err != nil || o.Outpost != "other" || !slices.Equal(o.overridden, []string{"outpost"}) {
		t.Errorf("overridden by the environment: %+v %v", o, err)
	}
}

// TestConfigFileErrors: mistakes in the file are usage errors (exit 2)
// that name the file and the key, before anything starts.
func TestConfigFileErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd  []string
		body string
		want []string
	}{
		{[]string{"server"}, "listen: 0.0.0.0:7420\nclaim-tll: 300s\n", []string{`unknown key "claim-tll"`, `did you mean "claim-ttl"?`}},
		{[]string{"server"}, "claim-ttl: 300\n", []string{"claim-ttl", "300s"}},
		{[]string{"worker", "start"}, "outpost: dev\nisolaton: bwrap\n", []string{`unknown key "isolaton"`, `did you mean "isolation"?`}},
		{[]string{"worker", "start"}, "outpost: dev\ngrace-period: [1s]\n", []string{"grace-period", "a list"}},
		{[]string{"worker", "start"}, "outpost: dev\nlisten: 0.0.0.0:7420\n", []string{`unknown key "listen"`}},
		{[]string{"orchestrate"}, "outpost: dev\nmax-concurent: 4\n", []string{`unknown key "max-concurent"`, `did you mean "max-concurrent"?`}},
	} {
		tf := newTestFactory(t, nil)
		path := filepath.Join(t.TempDir(), "outpost.yaml")
		if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		code := tf.run(t, append(tc.cmd, "--config", path)...)
		if code != exitUsage {
			t.Errorf("%v with %q: exit %d, want %d (stderr %q)", tc.cmd, tc.body, code, exitUsage, tf.errOut)
		}
		for _, w := range append(tc.want, path) {
			if !strings.Contains(tf.errOut.String(), w) {
				t.Errorf("%v with %q: stderr %q does not contain %q", tc.cmd, tc.body, tf.errOut, w)
			}
		}
	}
}

// TestOrchestrateConfig: the orchestrator takes its settings from a file,
// and the outpost, token and server from the public orchestrators'
// variables too.
func TestOrchestrateConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "orchestrate.yaml")
	if err := os.WriteFile(path, []byte("outpost: file-outpost\nbackend: exec\nmax-concurrent: 4\nprovision-cmd: ./p.sh\nteardown-cmd: ./t.sh\nserver: https://file.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	parse := func(env map[string]string, args ...string) (*OrchestrateOptions, *Factory, error) {
		tf := newTestFactory(t, env)
		var got *OrchestrateOptions
		root := &cobra.Command{Use: "outpost", SilenceErrors: true, SilenceUsage: true}
		addGlobalFlags(root, tf.Factory)
		root.AddCommand(NewCmdOrchestrate(tf.Factory, func(_ context.Context, o *OrchestrateOptions) error { got = o; return nil }))
		root.SetArgs(append([]string{"orchestrate"}, args...))
		err := root.Execute()
		return got, tf.Factory, err
	}
	o, f, err := parse(nil, "--config", path)
	if err != nil || o.Outpost != "file-outpost" || o.BackendName != "exec" || o.MaxConcurrent != 4 || f.Server != "https://file.example" {
		t.Fatalf("from the file: %+v %v", o, err)
	}
	o, f, err = parse(map[string]string{"DEVIN_OUTPOST_ID": "env-outpost", "DEVIN_API_URL": "https://env.example", "DEVIN_OUTPOSTS_TOKEN": "env-token"}, "--config", path)
	if err != nil || o.Outpost != "env-outpost" || f.Server != "https://env.example" || f.Token != "env-token" {
		t.Errorf("the environment over the file: %+v %+v %v", o, f, err)
	}
	o, _, err = parse(map[string]string{"OUTPOST_OUTPOST": "env-outpost"}, "--config", path, "--outpost", "flag-outpost")
	if err != nil || o.Outpost != "flag-outpost" {
		t.Errorf("the flag over the environment: %+v %v", o, err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
