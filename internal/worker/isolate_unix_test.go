//go:build unix

package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestUserIsolation runs the remote as nobody (the test must be root): it
// runs as that user with its own HOME, owns the workspace and its state
// dir, and cannot read the data dir's other files.
func TestUserIsolation(t *testing.T) {
	requireUnix(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	u, err := lookupSessionUser("nobody")
	if err != nil {
		t.Skip(err)
	}
	t.Parallel()
	ctx, _ := testContext(t)
	var out syncBuffer
	base, err := os.MkdirTemp("", "outpost-user-isolation-") // t.TempDir's parent is closed to nobody
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := directOptions(t, `echo "uid=$(id -u) home=$HOME user=$USER"
cat "$OUTPOST_STATE_DIR/../../acceptor-id" 2>/dev/null || echo acceptor=unreadable
ls "$OUTPOST_STATE_DIR/../.." 2>/dev/null || echo data=unlistable
touch made-here "$OUTPOST_STATE_DIR/s" && echo writable=yes`)
	opts.DataDir, opts.Dir = filepath.Join(base, "data"), filepath.Join(base, "work")
	opts.Stdout = &out
	opts.Isolation = IsolationOptions{Mode: IsolationUser, RunAs: "nobody"}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(opts.DataDir, "acceptor-id"), []byte("w-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Run(ctx, opts); err != nil {
		t.Fatalf("Run = %v\n%s", err, out.String())
	}
	home := filepath.Join(opts.Dir, ".home")
	for _, want := range []string{fmt.Sprintf("uid=%d home=%s user=nobody", u.uid, home), "acceptor=unreadable", "data=unlistable", "writable=yes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the remote printed no %q:\n%s", want, out.String())
		}
	}
	for _, p := range []string{filepath.Join(opts.Dir, "made-here"), home, filepath.Join(opts.DataDir, "sessions", "sess-d")} {
		fi, err := os.Stat(p)
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != u.uid {
			t.Errorf("%s is not nobody's: %v", p, err)
		}
	}
	log := filepath.Join(opts.DataDir, "sessions", "sess-d", remoteLogName)
	if fi, err := os.Stat(log); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("the remote's log is not the worker's: %v", err)
	}
}

// TestOpenRemoteLogRefusesPlants: a remote.log that session code replaced
// with a symlink, a hard link or a FIFO is replaced, never written through
// (the worker may be root, the state dir is the session's).
func TestOpenRemoteLogRefusesPlants(t *testing.T) {
	requireUnix(t)
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, remoteLogName)
	for _, plant := range []func() error{
		func() error { return os.Symlink(target, log) },
		func() error { return os.Link(target, log) },
		func() error { return syscall.Mkfifo(log, 0o600) },
	} {
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		f, err := openRemoteLog(log)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("remote output\n"); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if b, _ := os.ReadFile(target); string(b) != "keep\n" {
			t.Fatalf("wrote through the planted log: %q", b)
		}
		if fi, err := os.Lstat(log); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("remote.log is not a regular file: %v", err)
		}
		if err := os.Remove(log); err != nil {
			t.Fatal(err)
		}
	}
	// An honest log is appended to.
	for range 2 {
		f, err := openRemoteLog(log)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString("line\n")
		f.Close()
	}
	if b, _ := os.ReadFile(log); string(b) != "line\nline\n" {
		t.Errorf("remote.log = %q", b)
	}
}
