package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestArgsOfRemoteName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		argv []string
		want []string
	}{
		{[]string{"/usr/bin/outpost", "server"}, []string{"server"}},
		{[]string{"devin-remote", "serve"}, []string{"remote", "serve"}},
		{[]string{"/cache/remote/1a2b3c4d5e6f_linux_x64/devin-remote", "serve"}, []string{"remote", "serve"}},
		{[]string{`C:\cache\devin-remote.exe`, "serve", "--log-level", "debug"}, []string{"remote", "serve", "--log-level", "debug"}},
		{[]string{"./devin-remote_1a2b3c4d5e6f_linux_arm64", "--help"}, []string{"remote", "--help"}},
		{[]string{"outpost-devin-remote", "version"}, []string{"version"}},
		{nil, nil},
	} {
		if got := argsOf(tc.argv); !slices.Equal(got, tc.want) {
			t.Errorf("argsOf(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
}

func TestWorkerRemoteBuildOptions(t *testing.T) {
	t.Parallel()
	var got *WorkerStartOptions
	capture := func(_ context.Context, o *WorkerStartOptions) error { got = o; return nil }
	// refused runs the whole command, which must stop at its options.
	refused := func(env map[string]string, args ...string) (int, string) {
		tf := newTestFactory(t, env)
		code := tf.run(t, append([]string{"worker", "start", "--outpost", "dev"}, args...)...)
		return code, tf.errOut.String()
	}
	devin := map[string]string{
		"DEVIN_WORKER_STATIC_BASE_URL": "https://devin.example/dist/", "DEVIN_WORKER_CACHE_DIR": "/devin/cache", "DEVIN_WORKER_REMOTE_SHA": "dddddd",
	}
	both := map[string]string{
		"OUTPOST_WORKER_STATIC_BASE_URL": "https://outpost.example/dist/", "OUTPOST_WORKER_CACHE_DIR": "/outpost/cache", "OUTPOST_WORKER_REMOTE_SHA": "aaaaaa",
	}
	for k, v := range devin {
		both[k] = v
	}
	for _, tc := range []struct {
		name            string
		env             map[string]string
		args            []string
		base, cache, id string
	}{
		{"defaults", nil, nil, "", "", ""},
		{"DEVIN_* env", devin, nil, "https://devin.example/dist/", "/devin/cache", "dddddd"},
		{"OUTPOST_* beats DEVIN_*", both, nil, "https://outpost.example/dist/", "/outpost/cache", "aaaaaa"},
		{"flags beat env", both, []string{"--static-base-url", "http://127.0.0.1:7420/dist/", "--cache-dir", "/flag", "--remote-binary-sha", "ffffff"},
			"http://127.0.0.1:7420/dist/", "/flag", "ffffff"},
	} {
		o := runWorkerCapture(t, tc.env, capture, &got, tc.args...)
		if o.StaticBaseURL != tc.base || o.CacheDir != tc.cache || o.RemoteBinarySHA != tc.id {
			t.Errorf("%s: static %q cache %q sha %q; want %q %q %q", tc.name, o.StaticBaseURL, o.CacheDir, o.RemoteBinarySHA, tc.base, tc.cache, tc.id)
		}
	}
	for _, bad := range [][]string{{"--remote-binary-sha", "v1.2.3"}, {"--static-base-url", "static.example/dist"}} {
		if code, errOut := refused(nil, bad...); code != exitUsage || !strings.Contains(errOut, bad[0]) {
			t.Errorf("%q: exit %d, %q; want a usage error", bad, code, errOut)
		}
	}
	if code, errOut := refused(map[string]string{"DEVIN_WORKER_REMOTE_SHA": "NOPE"}); code != exitUsage || !strings.Contains(errOut, `"NOPE"`) {
		t.Errorf("bad env sha: exit %d, %q", code, errOut)
	}
}

// runWorkerCapture runs `worker start --outpost dev args…` and returns the
// options it resolved.
func runWorkerCapture(t *testing.T, env map[string]string, capture func(context.Context, *WorkerStartOptions) error, got **WorkerStartOptions, args ...string) *WorkerStartOptions {
	t.Helper()
	tf := newTestFactory(t, env)
	cmd := NewCmdWorker(tf.Factory, capture)
	cmd.SetArgs(append([]string{"start", "--outpost", "dev"}, args...))
	if err := cmd.Execute(); err != nil {
		t.Fatalf("worker start %q: %v", args, err)
	}
	return *got
}

func TestSessionAndOutpostPinFlags(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(path, []byte("outpost: dev\nremote_binary_sha: abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got *SessionsCreateOptions
	capture := func(_ context.Context, o *SessionsCreateOptions) error { got = o; return nil }
	for args, want := range map[string]string{"": "abcdef", "--remote-binary-sha 123456": "123456"} {
		tf := newTestFactory(t, nil)
		cmd := NewCmdSessionsCreate(tf.Factory, capture)
		cmd.SetArgs(append([]string{"--file", path}, strings.Fields(args)...))
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if got.Request.RemoteBinarySHA != want {
			t.Errorf("%q: request pin %q, want %q", args, got.Request.RemoteBinarySHA, want)
		}
	}
	var sopts *ServerOptions
	tf := newTestFactory(t, map[string]string{"OUTPOST_DIST_DIR": "/env/dist"})
	cmd := NewCmdServer(tf.Factory, func(_ context.Context, o *ServerOptions) error { sopts = o; return nil })
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil || sopts.DistDir != "/env/dist" {
		t.Errorf("server dist dir from env = %+v, %v", sopts, err)
	}
	cmd = NewCmdServer(tf.Factory, func(_ context.Context, o *ServerOptions) error { sopts = o; return nil })
	cmd.SetArgs([]string{"--dist-dir", "dist"})
	if err := cmd.Execute(); err != nil || sopts.DistDir != "dist" {
		t.Errorf("server --dist-dir = %+v, %v", sopts, err)
	}
}

// TestRemoteVersion: setup scripts check the remote with `devin-remote
// --version` (outpost remote --version): it prints the build's version and
// exits 0, as `remote serve --version` does.
func TestRemoteVersion(t *testing.T) {
	t.Parallel()
	for _, argv := range [][]string{
		{"outpost", "remote", "--version"},
		{"/cache/remote/1a2b3c4d5e6f_linux_x64/devin-remote", "--version"},
		{"devin-remote", "serve", "--version"},
	} {
		tf := newTestFactory(t, nil)
		if code := tf.run(t, argsOf(argv)...); code != 0 {
			t.Errorf("%q: exit %d: %s", argv, code, tf.errOut.String())
		}
		if got, want := tf.out.String(), versionLine()+"\n"; got != want || !strings.Contains(got, version) {
			t.Errorf("%q printed %q, want %q", argv, got, want)
		}
	}
}
