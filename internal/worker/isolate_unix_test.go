//go:build unix

package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestUserIsolation runs the remote as a user of the test's own (the
// test must be root): it runs as that user with its own HOME, owns the
// workspace and its state dir, and cannot read the data dir's other
// files. A process the session leaves behind is ended with it, and its
// state dir is deleted.
func TestUserIsolation(t *testing.T) {
	requireUnix(t)
	u := testSessionUser(t)
	t.Parallel()
	ctx, _ := testContext(t)
	var out syncBuffer
	base := sharedTempDir(t) // t.TempDir's parent is closed to the user
	opts := directOptions(t, `echo "uid=$(id -u) home=$HOME user=$USER"
cat "$OUTPOST_STATE_DIR/../../acceptor-id" 2>/dev/null || echo acceptor=unreadable
ls "$OUTPOST_STATE_DIR/../.." 2>/dev/null || echo data=unlistable
touch made-here "$OUTPOST_STATE_DIR/s" && echo writable=yes
setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > leftover.pid
`+holdScript)
	opts.DataDir, opts.Dir = filepath.Join(base, "data"), filepath.Join(base, "work")
	opts.Stdout = &out
	opts.Isolation = IsolationOptions{Mode: IsolationUser, RunAs: u.name}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(opts.DataDir, "acceptor-id"), []byte("w-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(opts.DataDir, "sessions", "sess-d")
	release := runHeld(t, ctx, opts, &out)
	home := filepath.Join(opts.Dir, ".home")
	for _, p := range []string{filepath.Join(opts.Dir, "made-here"), home, stateDir} {
		fi, err := os.Stat(p)
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != u.uid {
			t.Errorf("%s is not %s's: %v", p, u.name, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(stateDir, remoteLogName)); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("the remote's log is not the worker's: %v", err)
	}
	pidText, err := os.ReadFile(filepath.Join(opts.Dir, "leftover.pid"))
	if err != nil {
		t.Fatal(err)
	}
	leftover, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" && !slices.Contains(userProcesses(u.uid), leftover) {
		t.Fatalf("the session's background process %d does not run as %s", leftover, u.name)
	}
	if err := release(); err != nil {
		t.Fatalf("Run = %v\n%s", err, out.String())
	}
	for _, want := range []string{fmt.Sprintf("uid=%d home=%s user=%s", u.uid, home, u.name), "acceptor=unreadable", "data=unlistable", "writable=yes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the remote printed no %q:\n%s", want, out.String())
		}
	}
	if runtime.GOOS == "linux" {
		if left := userProcesses(u.uid); len(left) != 0 {
			t.Errorf("processes of %s still run after the session: %v (the leftover was %d)", u.name, left, leftover)
		}
	}
	if _, err := os.Lstat(stateDir); !os.IsNotExist(err) {
		t.Errorf("the ended session's state dir is still there: %v", err)
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

// TestPrepareSessionReplacesPlants: before a session starts in user
// isolation, the workspace's repos/ and the user's HOME are directories
// of the user again, whatever an earlier session left in their place (a
// symbolic link to a root-only directory, nothing after a clear), and
// nothing a link points to changes owner.
func TestPrepareSessionReplacesPlants(t *testing.T) {
	requireUnix(t)
	u := testSessionUser(t)
	t.Parallel()
	base := sharedTempDir(t)
	work, rootOnly, state := filepath.Join(base, "work"), filepath.Join(base, "root-only"), filepath.Join(base, "state")
	for _, d := range []string{work, rootOnly, state} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	iso := &isolation{mode: IsolationUser, user: u, dir: work, home: filepath.Join(work, ".home")}
	if err := os.Symlink(rootOnly, filepath.Join(work, "repos")); err != nil {
		t.Fatal(err)
	}
	if err := iso.prepareSession(state); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(work, "repos"), iso.home, state} {
		fi, err := os.Lstat(p)
		if err != nil || !fi.IsDir() || fi.Sys().(*syscall.Stat_t).Uid != u.uid {
			t.Errorf("%s is not a directory of %s: %v", p, u.name, err)
		}
	}
	if fi, err := os.Stat(rootOnly); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("the root-only directory changed owner: %v", err)
	}
}
