//go:build unix

package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outpost-sh/outpost/internal/sandbox"
)

// lookupSessionUser finds the run-as user by name or uid.
func lookupSessionUser(name string) (*sessionUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		var uerr error
		if u, uerr = user.LookupId(name); uerr != nil {
			return nil, fmt.Errorf("--run-as %s: %w", name, err)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("--run-as %s: %w", name, err)
	}
	switch {
	case uid == 0:
		return nil, fmt.Errorf("--run-as %s: sessions running as root keep nothing from session code; name an unprivileged user", name)
	case int(uid) == os.Geteuid():
		return nil, fmt.Errorf("--run-as %s is the worker's own user, which keeps nothing from session code; name another user (and run the worker as root)", name)
	}
	su := &sessionUser{name: u.Username, uid: uint32(uid), gid: uint32(gid), home: u.HomeDir}
	ids, _ := u.GroupIds()
	for _, g := range ids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			su.groups = append(su.groups, uint32(n))
		}
	}
	return su, nil
}

// sysProcAttr starts a process as u; nil when u is nil.
func (u *sessionUser) sysProcAttr() *syscall.SysProcAttr {
	if u == nil {
		return nil
	}
	return &syscall.SysProcAttr{Credential: u.credential()}
}

func (u *sessionUser) credential() *syscall.Credential {
	return &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}
}

// setCredential makes cmd start as u.
func setCredential(cmd *exec.Cmd, u *sessionUser) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = u.credential()
}

// prepareUser makes what sessions need the run-as user's: the workspace
// (and its repos) and a way into the data dir's sessions
// directory (mode 0711: the user can reach its own state dir by name, and
// list or read nothing else of the data dir). It then checks, as the user,
// that it can work there and run the remote's executable; this also shows
// that the worker may switch users.
func (iso *isolation) prepareUser(ctx context.Context, dataDir, remote string) error {
	u := iso.user
	sessions := filepath.Join(dataDir, "sessions")
	for _, d := range []string{dataDir, sessions} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return fmt.Errorf("let the run-as user reach its state dirs: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(iso.dir, "repos"), 0o755); err != nil {
		return fmt.Errorf("create workspace: %w", err)
	}
	if err := iso.chownTree(iso.dir); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if p, err := exec.LookPath(remote); err == nil {
		remote = p
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", `test -w "$1" && test -w "$2" && test -x "$3" && test -x "$4"`,
		"sh", iso.dir, filepath.Join(iso.dir, "repos"), sessions, remote)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = u.sysProcAttr()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return fmt.Errorf("--run-as %s: the user cannot write the workspace %s, reach %s or run %s (is a parent directory closed to it, like /root? choose a --dir, --data-dir and outpost binary it can reach): %s %s",
			u.name, iso.dir, sessions, remote, ee.ProcessState, strings.TrimSpace(string(out)))
	case err != nil:
		return fmt.Errorf("--run-as %s: cannot start a process as that user (the worker needs root, or CAP_SETUID and CAP_SETGID): %w", u.name, err)
	}
	return nil
}

// prepareHome creates the run-as user's HOME of user mode.
func (iso *isolation) prepareHome() error {
	if sandbox.Under(iso.home, iso.hide...) {
		return fmt.Errorf("--run-as-home %s is inside a directory hidden from sessions (the data dir)", iso.home)
	}
	if err := os.MkdirAll(iso.home, 0o700); err != nil {
		return fmt.Errorf("create the run-as user's home: %w", err)
	}
	return iso.chownTree(iso.home)
}

// prepareSession gives the session's state dir to the run-as user, and
// the workspace's top again in case something replaced it; in user mode
// it makes the user's HOME again when the workspace was cleared with it.
// The remote's log stays the worker's.
func (iso *isolation) prepareSession(stateDir string) error {
	if err := os.MkdirAll(iso.dir, 0o755); err != nil {
		return fmt.Errorf("create workspace: %w", err)
	}
	if err := chownDir(iso.dir, iso.user); err != nil {
		return err
	}
	if err := userDir(filepath.Join(iso.dir, "repos"), 0o755, iso.user); err != nil {
		return fmt.Errorf("create workspace: %w", err)
	}
	if iso.mode == IsolationUser {
		if err := userDir(iso.home, 0o700, iso.user); err != nil {
			return fmt.Errorf("create the run-as user's home: %w", err)
		}
	}
	return iso.chownTree(stateDir)
}

// userDir makes path, whose parent is the worker's or the user's, a
// directory of u: what an earlier session left there in its place (a
// symbolic link, a file) is deleted first, never followed.
func userDir(path string, perm os.FileMode, u *sessionUser) error {
	if fi, err := os.Lstat(path); err == nil && !fi.IsDir() {
		if err := os.Remove(path); err != nil {
			return err
		}
	}
	if err := os.Mkdir(path, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return chownDir(path, u)
}

// passwordlessSudo reports whether `sudo -n true` succeeds as u.
func (u *sessionUser) passwordlessSudo(ctx context.Context) bool {
	path, err := exec.LookPath("sudo")
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-n", "true")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/", "USER=" + u.name}
	cmd.Dir = "/"
	cmd.SysProcAttr = u.sysProcAttr()
	cmd.WaitDelay = time.Second
	return cmd.Run() == nil
}

// terminate asks the remote to stop. In a bwrap sandbox that is the
// command under the sandbox's init: a signal to bwrap would kill the
// sandbox at once.
func (iso *isolation) terminate(cmd *exec.Cmd) error {
	if iso != nil && iso.mode == IsolationBwrap {
		if pids := sandbox.CommandPids(cmd.Process.Pid); len(pids) > 0 {
			var errs []error
			for _, p := range pids {
				errs = append(errs, syscall.Kill(p, syscall.SIGTERM))
			}
			return errors.Join(errs...)
		}
	}
	return terminate(cmd)
}

// openRemoteLog opens (creating it) a session's remote.log for appending.
// The state dir it lies in is writable by session code, so it opens
// neither a symlink nor a FIFO, and replaces whatever is not a regular
// file of the worker's own with one link: the worker never writes through
// a path session code planted.
func openRemoteLog(path string) (*os.File, error) {
	const flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND | syscall.O_NOFOLLOW | syscall.O_NONBLOCK
	f, err := os.OpenFile(path, flags, 0o600)
	if err == nil {
		fi, serr := f.Stat()
		st, ok := fi.Sys().(*syscall.Stat_t)
		if serr == nil && ok && fi.Mode().IsRegular() && st.Nlink == 1 && int(st.Uid) == os.Geteuid() {
			return f, nil
		}
		f.Close()
	}
	if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		return nil, fmt.Errorf("replace %s: %w", path, rerr)
	}
	return os.OpenFile(path, flags|os.O_EXCL, 0o600)
}

// ancestorOf returns the nearest directory above path (path itself left
// out) that u owns, or "" when none does. Such a directory lets u rename
// what it holds away and put its own in its place.
func (u *sessionUser) ancestorOf(path string) string {
	for p := filepath.Dir(path); ; p = filepath.Dir(p) {
		if fi, err := os.Lstat(p); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == u.uid {
				return p
			}
		}
		if p == filepath.Dir(p) {
			return ""
		}
	}
}
