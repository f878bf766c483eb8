package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/sandbox"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

func TestChooseIsolation(t *testing.T) {
	t.Parallel()
	noBwrap := errors.New("bwrap not found")
	for _, tc := range []struct {
		want     Isolation
		bwrapErr error
		runAs    bool
		binds    bool
		got      Isolation
		errHas   string
	}{
		{want: IsolationAuto, got: IsolationBwrap},
		{want: IsolationAuto, runAs: true, got: IsolationBwrap},
		{want: IsolationAuto, bwrapErr: noBwrap, runAs: true, got: IsolationUser},
		{want: IsolationAuto, bwrapErr: noBwrap, got: IsolationNone},
		{want: IsolationBwrap, got: IsolationBwrap},
		{want: IsolationBwrap, runAs: true, got: IsolationBwrap},
		{want: IsolationBwrap, bwrapErr: noBwrap, errHas: "bwrap not found"},
		{want: IsolationUser, runAs: true, got: IsolationUser},
		{want: IsolationUser, bwrapErr: noBwrap, runAs: true, got: IsolationUser},
		{want: IsolationUser, errHas: "needs --run-as"},
		{want: IsolationNone, got: IsolationNone},
		{want: IsolationNone, bwrapErr: noBwrap, got: IsolationNone},
		{want: IsolationNone, runAs: true, errHas: "--run-as needs"},
		{want: IsolationAuto, binds: true, got: IsolationBwrap},
		{want: IsolationAuto, bwrapErr: noBwrap, binds: true, errHas: "need a bubblewrap sandbox, which cannot be made here: bwrap not found"},
		{want: IsolationUser, runAs: true, binds: true, errHas: "not user"},
		{want: IsolationNone, binds: true, errHas: "not none"},
		{want: "chroot", errHas: `unknown isolation "chroot"`},
	} {
		got, err := chooseIsolation(tc.want, tc.bwrapErr, tc.runAs, tc.binds)
		name := fmt.Sprintf("%s/bwrap=%v/runAs=%v/binds=%v", tc.want, tc.bwrapErr == nil, tc.runAs, tc.binds)
		switch {
		case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
			t.Errorf("%s: error %v, want %q", name, err, tc.errHas)
		case tc.errHas == "" && (err != nil || got != tc.got):
			t.Errorf("%s: %q %v, want %q", name, got, err, tc.got)
		}
	}
}

func TestSandboxHome(t *testing.T) {
	t.Parallel()
	for home, want := range map[string]string{
		"/root": "/root", "/home/alice/": "/home/alice", "/var/lib/outpost": "/var/lib/outpost", "/nonexistent": "/nonexistent",
		"": sandboxHomeFallback, "relative": sandboxHomeFallback, "/": sandboxHomeFallback, "/usr": sandboxHomeFallback, "/etc": sandboxHomeFallback,
	} {
		if got := sandboxHome(home); got != want {
			t.Errorf("sandboxHome(%q) = %q, want %q", home, got, want)
		}
	}
}

// mount is one mount of a sandbox's arguments.
type mount struct{ op, src, dest string }

// mounts lists the mounts in bwrap arguments, in order, and the
// environment they set.
func mounts(args []string) (ms []mount, env map[string]string) {
	env = map[string]string{}
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--bind", "--ro-bind", "--dev-bind", "--symlink":
			ms = append(ms, mount{args[i], args[i+1], args[i+2]})
			i += 2
		case "--tmpfs", "--remount-ro", "--proc", "--dev":
			ms = append(ms, mount{op: args[i], dest: args[i+1]})
			i++
		case "--setenv":
			env[args[i+1]] = args[i+2]
			i += 2
		case "--hostname", "--chdir", "--cap-drop":
			i++
		}
	}
	return ms, env
}

func indexOf(ms []mount, m mount) int { return slices.Index(ms, m) }

// TestSandboxArgs is what a remote's bwrap sandbox mounts and hides, for
// the layouts a worker meets: a plain one, a workspace holding the data
// dir and HOME (the operator's pods), a workspace that is the worker's
// home with its saved login and token file, and the extras (browser, CA
// file, git mirrors, display, a remote binary cached in the data dir,
// operator binds, made parents first so none hides another).
func TestSandboxArgs(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mk := func(parts ...string) string {
		p := filepath.Join(append([]string{root}, parts...)...)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := func(parts ...string) string {
		p := filepath.Join(append([]string{root}, parts...)...)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exe := file("bin", "outpost")
	chromeReal := file("chrome-linux", "chrome")
	chromeLink := filepath.Join(mk("links"), "chrome")
	if err := os.Symlink(chromeReal, chromeLink); err != nil {
		t.Fatal(err)
	}
	ca := file("tls", "ca.pem")
	xauth := file("xauth", ".Xauthority")
	mirrors := mk("mirrors")
	tools := mk("tools")
	toolsSecret := file("tools", "secret")

	type want struct {
		present []mount
		absent  []string // no mount's source is (or is under) one of these
		before  [][2]mount
		env     map[string]string
	}
	for _, tc := range []struct {
		name string
		spec func() sandboxSpec
		want func(s sandboxSpec) want
	}{{
		name: "plain",
		spec: func() sandboxSpec {
			data := mk("plain", "data")
			return sandboxSpec{hostname: "box", home: filepath.Join(root, "plain", "home"), workspace: mk("plain", "ws"),
				stateDir: mk("plain", "data", "sessions", "s1"), remote: exe, hide: []string{data, mk("plain", "home", ".config", "outpost")},
				env: []string{"PATH=/usr/bin:/bin", "HOME=/elsewhere", "OUTPOST_CONNECT_TOKEN=ct-1", "TMPDIR=/var/tmp"}}
		},
		want: func(s sandboxSpec) want {
			return want{
				present: []mount{
					{"--ro-bind", "/usr", "/usr"}, {"--ro-bind", "/etc", "/etc"}, {op: "--proc", dest: "/proc"}, {op: "--dev", dest: "/dev"},
					{"--bind", s.workspace, s.workspace}, {"--bind", s.stateDir, s.stateDir},
					{"--bind", filepath.Join(s.stateDir, "tmp"), "/tmp"}, {"--bind", filepath.Join(s.stateDir, "home"), s.home},
					{"--ro-bind", exe, exe}, {op: "--remount-ro", dest: "/"},
				},
				absent: []string{"/home", "/root", "/var", "/srv", "/run", "/mnt", filepath.Join(root, "plain", "home"), "/sys"},
				env:    map[string]string{"HOME": s.home, "TMPDIR": "/tmp", "OUTPOST_CONNECT_TOKEN": "ct-1", "PATH": "/usr/bin:/bin"},
			}
		},
	}, {
		name: "pod: data dir and HOME in the workspace",
		spec: func() sandboxSpec {
			ws := mk("pod", "work")
			data := mk("pod", "work", "worker")
			cache := file("pod", "work", "worker", "cache", "outpost")
			return sandboxSpec{hostname: "pod", home: ws, workspace: ws, stateDir: mk("pod", "work", "worker", "sessions", "s1"),
				remote: cache, hide: []string{data}, env: []string{"HOME=" + ws}}
		},
		want: func(s sandboxSpec) want {
			data := filepath.Join(s.workspace, "worker")
			ws := mount{"--bind", s.workspace, s.workspace}
			mask := mount{op: "--tmpfs", dest: data}
			return want{
				present: []mount{ws, mask, {"--ro-bind", s.remote, s.remote}, {"--bind", s.stateDir, s.stateDir}, {op: "--remount-ro", dest: data}},
				before: [][2]mount{
					{{"--bind", filepath.Join(s.stateDir, "home"), s.home}, ws}, // HOME is the workspace: the workspace wins
					{ws, mask}, {mask, {"--ro-bind", s.remote, s.remote}}, {mask, {"--bind", s.stateDir, s.stateDir}},
					{{"--bind", s.stateDir, s.stateDir}, {op: "--remount-ro", dest: data}},
				},
			}
		},
	}, {
		name: "workspace is the worker's home",
		spec: func() sandboxSpec {
			ws := mk("homews")
			return sandboxSpec{hostname: "box", home: filepath.Join(ws, "private"), workspace: ws, stateDir: mk("homews-data", "sessions", "s1"),
				remote: "/usr/bin/true", hide: []string{mk("homews-data"), mk("homews", ".config", "outpost"), file("homews", ".outpost-token")}}
		},
		want: func(s sandboxSpec) want {
			ws := mount{"--bind", s.workspace, s.workspace}
			return want{
				present: []mount{ws, {op: "--tmpfs", dest: filepath.Join(s.workspace, ".config", "outpost")},
					{"--ro-bind", os.DevNull, filepath.Join(s.workspace, ".outpost-token")}},
				absent: []string{"/usr/bin/true"},                                               // in the system dirs already
				before: [][2]mount{{ws, {"--bind", filepath.Join(s.stateDir, "home"), s.home}}}, // a HOME inside the workspace covers it
			}
		},
	}, {
		name: "extra binds around the workspace and into HOME",
		spec: func() sandboxSpec {
			return sandboxSpec{hostname: "box", home: "/home/outpost", workspace: mk("around", "srv", "ws"), stateDir: mk("around", "state"),
				remote: exe, binds: []sandbox.Bind{{Src: mk("around", "srv"), Dest: filepath.Join(root, "around", "srv"), ReadOnly: true},
					{Src: tools, Dest: "/home/outpost/go"}}}
		},
		want: func(s sandboxSpec) want {
			ws := mount{"--bind", s.workspace, s.workspace}
			return want{
				present: []mount{ws},
				before: [][2]mount{
					{{"--ro-bind", filepath.Join(root, "around", "srv"), filepath.Join(root, "around", "srv")}, ws}, // the workspace stays writable
					{{"--bind", filepath.Join(s.stateDir, "home"), "/home/outpost"}, {"--bind", tools, "/home/outpost/go"}},
				},
			}
		},
	}, {
		name: "extras",
		spec: func() sandboxSpec {
			return sandboxSpec{hostname: "box", home: "/home/outpost", workspace: mk("x", "ws"), stateDir: mk("x", "state"), remote: exe,
				chrome: chromeLink, devices: []string{"/dev/null"}, hide: []string{toolsSecret},
				binds: []sandbox.Bind{{Src: tools, Dest: "/tools", ReadOnly: true}},
				env:   []string{"OUTPOST_GIT_MIRRORS=" + mirrors, "OUTPOST_CA_FILE=" + ca, "XAUTHORITY=" + xauth, "DISPLAY=:0"}}
		},
		want: func(s sandboxSpec) want {
			return want{
				present: []mount{
					{"--ro-bind", tools, "/tools"}, {"--ro-bind", os.DevNull, "/tools/secret"},
					{"--ro-bind", filepath.Dir(chromeReal), filepath.Dir(chromeReal)}, {"--ro-bind", chromeReal, chromeLink},
					{"--ro-bind", ca, ca}, {"--ro-bind", xauth, xauth}, {"--ro-bind", mirrors, mirrors},
					{"--dev-bind", "/dev/null", "/dev/null"}, {"--ro-bind", "/sys", "/sys"},
				},
				env: map[string]string{"OUTPOST_GIT_MIRRORS": mirrors, "DISPLAY": ":0"},
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.spec()
			w := tc.want(s)
			args := s.args()
			ms, env := mounts(args)
			for _, m := range w.present {
				if indexOf(ms, m) < 0 {
					t.Errorf("no %v in\n%q", m, args)
				}
			}
			for _, p := range append(w.absent, s.hide...) {
				for _, m := range ms {
					if m.src != "" && m.src != os.DevNull && sandbox.Under(m.src, p) && !sandbox.Under(m.src, s.stateDir) && m.src != s.remote {
						t.Errorf("%v shows %s", m, p)
					}
				}
			}
			for _, b := range w.before {
				if i, j := indexOf(ms, b[0]), indexOf(ms, b[1]); i < 0 || j < 0 || i > j {
					t.Errorf("%v must come before %v (%d, %d)", b[0], b[1], i, j)
				}
			}
			for k, v := range w.env {
				if env[k] != v {
					t.Errorf("env %s = %q, want %q", k, env[k], v)
				}
			}
			if i := slices.Index(args, "--clearenv"); i < 0 || slices.Index(args, "--setenv") >= 0 && slices.Index(args, "--setenv") < i {
				t.Errorf("the environment is not cleared first: %q", args)
			}
			for _, flag := range []string{"--unshare-all", "--share-net", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"} {
				if !slices.Contains(args, flag) {
					t.Errorf("no %s", flag)
				}
			}
		})
	}
}

// requireBwrap skips without a working bwrap, unless CI is set (CI
// installs bubblewrap), where it fails.
func requireBwrap(t *testing.T) string {
	t.Helper()
	path, err := sandbox.Find("")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but bwrap is missing: %v", err)
		}
		t.Skip(err)
	}
	return path
}

// TestServeDirectInBwrap serves a session in a real bubblewrap sandbox:
// the remote sees its own processes only, the workspace and its state dir
// read-write at their own paths, a private HOME and /tmp, nothing of the
// data dir but its state dir, nothing of the hidden paths, and its
// environment holds the connect token and not the worker's.
func TestServeDirectInBwrap(t *testing.T) {
	requireBwrap(t)
	t.Setenv("OUTPOST_TOKEN", "worker-secret-token")
	ctx, _ := testContext(t)
	var out syncBuffer
	secretDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(secretDir, "login"), []byte("worker-secret-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := directOptions(t, `
echo "pid=$$ init=$(cat /proc/1/comm) procs=$(ls -d /proc/[0-9]* | wc -l)"
echo "home=$HOME tmp=$TMPDIR cwd=$(pwd)"
touch "$HOME/h" "$TMPDIR/t" "$OUTPOST_STATE_DIR/s" made-here && echo writable=yes
ls -A "$(dirname "$(dirname "$OUTPOST_STATE_DIR")")" | tr '\n' ' ' | sed 's/^/data=/'; echo
cat "$SECRET_DIR/login" 2>/dev/null || echo secret=hidden
cat /proc/*/environ 2>/dev/null | tr '\0' '\n' | grep -c worker-secret-token | sed 's/^/token_hits=/'
echo "connect=$OUTPOST_CONNECT_TOKEN"
`+holdScript)
	opts.RemoteCommand = []string{"sh", "-c", strings.ReplaceAll(opts.RemoteCommand[2], "$SECRET_DIR", secretDir)}
	opts.Stdout = &out
	opts.Isolation = IsolationOptions{Mode: IsolationBwrap, Hide: []string{secretDir},
		Binds: []sandbox.Bind{{Src: secretDir, Dest: secretDir, ReadOnly: true}}}
	if err := os.WriteFile(filepath.Join(opts.DataDir, "acceptor-id"), []byte("w-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(opts.DataDir, "sessions", "sess-d")
	release := runHeld(t, ctx, opts, &out)
	for _, p := range []string{filepath.Join(opts.Dir, "made-here"), filepath.Join(stateDir, "s"), filepath.Join(stateDir, "home", "h"), filepath.Join(stateDir, "tmp", "t")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the worker does not see what the sandbox wrote: %v", err)
		}
	}
	if err := release(); err != nil {
		t.Fatalf("Run = %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"pid=2 init=bwrap procs=", "home=" + sandboxHome(os.Getenv("HOME")) + " tmp=/tmp cwd=" + opts.Dir, "writable=yes",
		"data=sessions \n", "secret=hidden", "token_hits=0", "connect=ct-direct",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the sandboxed remote printed no %q:\n%s", want, got)
		}
	}
	if _, err := os.Lstat(stateDir); !os.IsNotExist(err) {
		t.Errorf("the ended session's state dir (its HOME and /tmp) is still there: %v", err)
	}
}

// holdScript ends a test remote's script: it says "holding" and waits
// (boundedly) for the file go-on in the workspace, so that the test can
// look at the machine while the session runs (runHeld).
const holdScript = `echo holding
i=0; while [ ! -e go-on ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
`

// runHeld starts Run with opts, whose remote ends with holdScript and
// writes to out, and returns once the remote holds. Calling the returned
// function lets the remote go on and returns Run's error.
func runHeld(t *testing.T, ctx context.Context, opts Options, out *syncBuffer) func() error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts) }()
	waitfor.Until(ctx, t, "the remote to hold", func() bool {
		select {
		case err := <-done:
			done <- err
			return true
		default:
			return strings.Contains(out.String(), "holding")
		}
	})
	return func() error {
		if err := os.WriteFile(filepath.Join(opts.Dir, "go-on"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return <-done
	}
}

// TestBwrapStopReachesTheRemote: stopping a sandboxed remote sends SIGTERM
// to the remote itself (bwrap would die of it at once and take the sandbox
// with it), so the remote can end cleanly.
func TestBwrapStopReachesTheRemote(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	ctx, cancel := testContext(t)
	var out syncBuffer
	opts := directOptions(t, `trap 'echo got-term; exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
	opts.Stdout, opts.GracePeriod = &out, 50*time.Millisecond
	opts.Isolation.Mode = IsolationBwrap
	done := make(chan error, 1)
	go func() { done <- ServeDirect(ctx, opts) }()
	wctx, wcancel := context.WithTimeout(ctx, testTimeout/2)
	defer wcancel()
	if !waitfor.Poll(wctx, func() bool { return strings.Contains(out.String(), "ready") }) {
		t.Fatalf("the remote did not start; output: %q", out.String())
	}
	cancel()
	if err := <-done; err != nil || !strings.Contains(out.String(), "got-term") {
		t.Fatalf("ServeDirect = %v; the remote got no SIGTERM: %q", err, out.String())
	}
}

// TestIsolationNoneIsToday: the zero Options run the remote as before, as
// the worker's own user, outside any sandbox.
func TestIsolationNoneIsToday(t *testing.T) {
	requireUnix(t)
	t.Parallel()
	ctx, _ := testContext(t)
	var out syncBuffer
	opts := directOptions(t, `echo "init=$(cat /proc/1/comm 2>/dev/null) uid=$(id -u)"`)
	opts.Stdout = &out
	if err := Run(ctx, opts); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("uid=%d", os.Geteuid()); !strings.Contains(out.String(), want) || strings.Contains(out.String(), "init=bwrap") {
		t.Errorf("remote output %q, want %q outside a sandbox", out.String(), want)
	}
}
