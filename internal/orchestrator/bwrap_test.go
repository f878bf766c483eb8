//go:build linux

package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/machine"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// newTestBwrap returns a bwrap backend; without bwrap the test is skipped,
// unless CI is set (CI installs bubblewrap), where it fails.
func newTestBwrap(t *testing.T, binds ...BwrapBind) *BwrapBackend {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but bwrap is missing (install bubblewrap): %v", err)
		}
		t.Skip("bwrap not installed (apt-get install bubblewrap)")
	}
	b, err := NewBwrapBackend(context.Background(), BwrapOptions{Binds: binds})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func bwrapSpec(t *testing.T, id string, remote ...string) Spec {
	state := t.TempDir()
	return Spec{SessionID: id, Name: MachineName(id), Workspace: filepath.Join(state, machinesDir, MachineName(id)), Platform: "linux",
		Env: []string{"PATH=/usr/bin:/bin", "HOME=/root", "TMPDIR=/var/tmp", "OUTPOST_SESSION_ID=" + id, "OUTPOST_CONNECT_TOKEN=ct_" + id,
			"OUTPOST_STATE_DIR=" + filepath.Join(state, machinesDir, MachineName(id), "state")},
		Remote: remote}
}

func waitFile(t *testing.T, path string, within time.Duration) []byte {
	t.Helper()
	var b []byte
	waitfor.Within(t, within, path+" to be written", func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil && strings.HasSuffix(string(b), "END\n")
	})
	return b
}

// facts parses key=value lines.
func facts(b []byte) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// assertSandboxGone checks that no process of the sandbox is left.
func assertSandboxGone(t *testing.T, sup int, ns string, within time.Duration) {
	t.Helper()
	var left []int
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if !waitfor.Poll(ctx, func() bool {
		left = pidsInNamespace(ns)
		if alive(sup) {
			left = append(left, sup)
		}
		return len(left) == 0
	}) {
		t.Fatalf("sandbox processes left: %v", left)
	}
}

func TestBwrapSandbox(t *testing.T) {
	t.Setenv("OUTPOST_TOKEN", "secret-orchestrator-token")
	extra := t.TempDir()
	if err := os.WriteFile(filepath.Join(extra, "marker"), []byte("extra-bind-ok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := newTestBwrap(t, BwrapBind{Src: extra, Dest: "/extra", ReadOnly: true})
	hostTmpName := "outpost-bwrap-test-" + strconv.Itoa(os.Getpid())
	script := `
exec > /workspace/facts 2>&1
echo "pid=$$"
touch /usr/x 2>/dev/null && echo usr=writable || echo usr=ro
touch /x 2>/dev/null && echo root=writable || echo root=ro
touch /extra/x 2>/dev/null && echo extra=writable || echo extra=ro
echo "extra_marker=$(cat /extra/marker)"
echo private > /tmp/` + hostTmpName + ` && echo tmp=written
echo "tmpdir=$TMPDIR"
echo "home=$HOME"
touch "$HOME/h" && echo home_writable=yes
echo "state=$OUTPOST_STATE_DIR"
touch "$OUTPOST_STATE_DIR/s" && echo state_writable=yes
echo "cwd=$(pwd)"
echo "hostname=$(cat /proc/sys/kernel/hostname)"
echo "procs=$(cd /proc && echo [0-9]* | tr ' ' ',')"
echo "home_dirs=$(ls /home | tr '\n' ',')"
test -e /root/. && echo root_home=visible || echo root_home=hidden
echo "token=${OUTPOST_TOKEN:-none}"
echo "caps=$(grep CapEff /proc/self/status | tr -d ' \t' | cut -d: -f2)"
unshare -U true 2>/dev/null && echo userns=allowed || echo userns=disabled
env | sort > /workspace/env
sleep 300 &
echo END
wait`
	s := bwrapSpec(t, "ses_bw1", "/bin/sh", "-c", script)
	m, err := b.Provision(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	f := facts(waitFile(t, filepath.Join(s.Workspace, "work", "facts"), 20*time.Second))
	t.Logf("facts: %v", f)
	for k, want := range map[string]string{
		"pid": "2", "usr": "ro", "root": "ro", "extra": "ro", "extra_marker": "extra-bind-ok", "tmp": "written",
		"tmpdir": "/tmp", "home": BwrapHome, "home_writable": "yes", "state": BwrapStateDir, "state_writable": "yes",
		"cwd": BwrapWorkDir, "hostname": s.Name, "home_dirs": "outpost,", "root_home": "hidden", "token": "none",
		"caps": "0000000000000000", "userns": "disabled",
	} {
		if f[k] != want {
			t.Errorf("%s = %q, want %q", k, f[k], want)
		}
	}
	// Only the sandbox's own processes: bwrap's init (1), the remote (2)
	// and the few the script ran.
	procs := strings.Split(f["procs"], ",")
	if !slices.Contains(procs, "1") || !slices.Contains(procs, "2") || len(procs) > 6 {
		t.Errorf("sandbox /proc lists %v, want its own few processes", procs)
	}
	// Private /tmp: not the host's, kept in the workspace.
	if _, err := os.Stat(filepath.Join(os.TempDir(), hostTmpName)); !os.IsNotExist(err) {
		t.Errorf("the sandbox's /tmp file is in the host's /tmp: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Workspace, "tmp", hostTmpName)); err != nil {
		t.Errorf("the sandbox's /tmp file is not in the workspace: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Workspace, "home", "h")); err != nil {
		t.Errorf("HOME is not the workspace's home: %v", err)
	}
	// The environment is the spawn contract's, rewritten, and nothing else.
	env, _ := os.ReadFile(filepath.Join(s.Workspace, "work", "env"))
	for _, l := range strings.Split(strings.TrimSpace(string(env)), "\n") {
		k, _, _ := strings.Cut(l, "=")
		switch k {
		case "PATH", "HOME", "TMPDIR", "OUTPOST_SESSION_ID", "OUTPOST_CONNECT_TOKEN", "OUTPOST_STATE_DIR", "PWD":
		case machine.EnvCapabilities:
			// The host's, as the sandbox sees it: its hostname, no sudo.
			if !strings.Contains(l, `"hostname":"`+s.Name+`"`) || !strings.Contains(l, `"passwordless_sudo":false`) {
				t.Errorf("capabilities handed to the sandbox: %s", l)
			}
		default:
			t.Errorf("unexpected variable in the sandbox: %s", l)
		}
	}
	if !strings.Contains(string(env), "OUTPOST_CONNECT_TOKEN=ct_ses_bw1") || strings.Contains(string(env), "secret-orchestrator-token") {
		t.Errorf("sandbox environment:\n%s", env)
	}
	// The connect token is not on any command line.
	st := readBwrapStatus(s.Workspace)
	ns := sandboxNamespace(st)
	sup := readPid(s.Workspace)
	if ns == "" || !isBwrapSupervisor(sup, s.Workspace) {
		t.Fatalf("status %+v, namespace %q, supervisor %d", st, ns, sup)
	}
	for _, p := range append(pidsInNamespace(ns), sup) {
		cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if strings.Contains(string(cl), "ct_ses_bw1") {
			t.Errorf("the connect token is on the command line of %d: %q", p, cl)
		}
		if env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p)); p != sup && strings.Contains(string(env), s.Workspace) {
			t.Errorf("a host path is in the environment of sandbox process %d: %q", p, env)
		}
	}
	if n := len(pidsInNamespace(ns)); n < 3 { // init, remote, sleep
		t.Errorf("%d processes in the sandbox, want at least 3", n)
	}

	// A restarted orchestrator finds the same machine.
	if _, ok := b.Adopt(context.Background(), s); !ok {
		t.Fatal("cannot adopt a running sandbox")
	}
	start := time.Now()
	if err := b.Teardown(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	t.Logf("teardown took %s", time.Since(start))
	select {
	case <-m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the machine is not done after teardown")
	}
	assertSandboxGone(t, sup, ns, time.Second)
	if _, err := os.Stat(s.Workspace); !os.IsNotExist(err) {
		t.Fatalf("workspace left: %v", err)
	}
	if _, ok := b.Adopt(context.Background(), s); ok {
		t.Fatal("adopted a torn-down sandbox")
	}
	if err := b.Teardown(context.Background(), s); err != nil {
		t.Fatalf("second teardown: %v", err)
	}
}

// TestBwrapDiesWithSupervisor kills only the supervisor: bwrap, its init
// and every process of the sandbox die with it (--die-with-parent), while
// the orchestrator (this test) lives on.
func TestBwrapDiesWithSupervisor(t *testing.T) {
	b := newTestBwrap(t)
	s := bwrapSpec(t, "ses_bw2", "sh", "-c", "sleep 300 & sleep 300 & echo END > /workspace/ready; wait")
	m, err := b.Provision(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(s.Workspace, "work", "ready"), 10*time.Second)
	sup, ns := readPid(s.Workspace), sandboxNamespace(readBwrapStatus(s.Workspace))
	if n := len(pidsInNamespace(ns)); n < 4 {
		t.Fatalf("%d processes in the sandbox, want 4", n)
	}
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-m.Done()
	assertSandboxGone(t, sup, ns, 5*time.Second)
	if err := b.Teardown(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// TestBwrapAdoptReportsExit adopts a sandbox as a restarted orchestrator
// would: the adopted machine ends when the remote exits, with its code.
func TestBwrapAdoptReportsExit(t *testing.T) {
	b := newTestBwrap(t)
	gate := filepath.Join(t.TempDir(), "gate")
	s := bwrapSpec(t, "ses_bw3", "sh", "-c", "while [ ! -e /gate/go ]; do sleep 0.05; done; exit 3")
	if err := os.Mkdir(gate, 0o700); err != nil {
		t.Fatal(err)
	}
	b.binds = []BwrapBind{{Src: gate, Dest: "/gate", ReadOnly: true}}
	first, err := b.Provision(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	adopted, ok := (&BwrapBackend{bwrap: b.bwrap}).Adopt(context.Background(), s)
	if !ok {
		t.Fatal("cannot adopt")
	}
	if err := os.WriteFile(filepath.Join(gate, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, m := range []Machine{first, adopted} {
		select {
		case <-m.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the remote's exit was not seen")
		}
		if !strings.Contains(m.Exit(), "exit status 3") {
			t.Errorf("exit %q, want exit status 3", m.Exit())
		}
	}
	if err := b.Teardown(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// TestBwrapProvisionFailure: a remote that cannot start in the sandbox is
// a provisioning error (the claim is released at once), not a remote that
// exited.
func TestBwrapProvisionFailure(t *testing.T) {
	b := newTestBwrap(t)
	s := bwrapSpec(t, "ses_bw4", "no-such-remote-command")
	_, err := b.Provision(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "no-such-remote-command") {
		t.Fatalf("provision of a missing command: %v", err)
	}
	if alive(readPid(s.Workspace)) {
		t.Fatal("the supervisor outlived a failed provisioning")
	}
	if err := b.Teardown(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Workspace); !os.IsNotExist(err) {
		t.Fatalf("workspace left: %v", err)
	}
}

// TestBwrapTeardownReadOnlyTree removes a workspace in which the sandbox
// left read-only directories.
func TestBwrapTeardownReadOnlyTree(t *testing.T) {
	b := newTestBwrap(t)
	s := bwrapSpec(t, "ses_bw5", "sh", "-c", "mkdir -p $HOME/cache/a && touch $HOME/cache/a/f && chmod 0500 $HOME/cache/a $HOME/cache && echo END > ready; sleep 300")
	if _, err := b.Provision(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(s.Workspace, "work", "ready"), 10*time.Second)
	if err := b.Teardown(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Workspace); !os.IsNotExist(err) {
		t.Fatalf("workspace left: %v", err)
	}
}

func TestParseBwrapBind(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		in      string
		want    BwrapBind
		wantErr string
	}{
		{in: dir, want: BwrapBind{Src: dir, Dest: dir}},
		{in: dir + ":/data", want: BwrapBind{Src: dir, Dest: "/data"}},
		{in: "relative:/data", wantErr: "SRC must be an absolute path"},
		{in: dir + ":data", wantErr: "DEST must be an absolute path"},
		{in: dir + ":", wantErr: "want SRC[:DEST]"},
		{in: "", wantErr: "want SRC[:DEST]"},
		{in: dir + ":/", wantErr: "DEST cannot be /"},
		{in: dir + "/missing", wantErr: "no such file"},
	} {
		got, err := ParseBwrapBind(tc.in, false)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %+v %v, want %+v", tc.in, got, err, tc.want)
		}
	}
	if _, err := exec.LookPath("bwrap"); err == nil {
		_, err := NewBwrapBackend(context.Background(), BwrapOptions{Binds: []BwrapBind{{Src: dir, Dest: "/usr/no-such-dir"}}})
		if err == nil || !strings.Contains(err.Error(), "read-only system directory") {
			t.Errorf("bind into /usr: %v", err)
		}
	}
	if _, err := NewBwrapBackend(context.Background(), BwrapOptions{Bwrap: "/nonexistent/bwrap"}); err == nil ||
		!strings.Contains(err.Error(), "bubblewrap") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing bwrap: %v", err)
	}
}

// TestBwrapSystemLayoutHidesStateDir: an orchestrator state dir (or home)
// inside a directory the sandbox sees read-only is covered by a tmpfs.
func TestBwrapSystemLayoutHidesStateDir(t *testing.T) {
	b := &BwrapBackend{mask: []string{"/usr/lib"}}
	args := strings.Join(b.systemArgs([]string{"/usr/share", "/nonexistent/state", "/srv"}), " ")
	for _, want := range []string{"--ro-bind /usr /usr", "--ro-bind /etc /etc", "--tmpfs /usr/lib", "--tmpfs /usr/share"} {
		if !strings.Contains(args, want) {
			t.Errorf("layout lacks %q: %s", want, args)
		}
	}
	for _, bad := range []string{"/nonexistent", "/srv", "/home", "/root", "/var", "/tmp"} {
		if strings.Contains(args, " "+bad) {
			t.Errorf("layout exposes %s: %s", bad, args)
		}
	}
}
