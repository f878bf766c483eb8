// Package sandbox builds bubblewrap (bwrap) sandboxes for session code:
// the host's system directories read-only, the session's own directories
// read-write, private pid, ipc, uts, mount and user namespaces, no
// capabilities, no nested user namespaces, the host's network, a new
// terminal session, and an environment of the caller's choosing only.
//
// It holds what the orchestrator's bwrap backend and the worker's bwrap
// isolation share: the mount layout (Layout), which never shows the host
// paths it is told to hide, the namespace flags (NamespaceArgs), the
// environment (EnvArgs), handing bwrap its arguments off the command line
// (ArgsFile), the check that bwrap works here (Probe), and the processes
// of a running sandbox (CommandPids, Status).
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Package is the distribution package that provides bwrap.
const Package = "bubblewrap"

// probeTimeout bounds Probe's test sandbox.
const probeTimeout = 30 * time.Second

// SystemDirs are the host directories a sandbox sees, read-only: an
// allow-list, so /home, /root, /srv, /var, /mnt, /run, /tmp and everything
// else stay out of it. Top-level symlinks (merged /usr: /bin -> usr/bin)
// are recreated as symlinks.
var SystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"}

// Find returns the path of the bwrap executable name (empty: "bwrap" from
// PATH), or an error saying how to install it.
func Find(name string) (string, error) {
	if name == "" {
		name = "bwrap"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found (install the %s package: apt-get install %s): %w", name, Package, Package, err)
	}
	return path, nil
}

// NamespaceArgs are the isolation flags of every sandbox: new namespaces
// of every kind but the network's, a user namespace that cannot make
// another, no capabilities, death with bwrap's parent, a new terminal
// session (no TIOCSTI into the caller's terminal) and the given hostname.
func NamespaceArgs(hostname string) []string {
	return []string{"--unshare-all", "--share-net", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
		"--die-with-parent", "--new-session", "--hostname", hostname}
}

// EnvArgs clear the sandbox's environment and set env (KEY=VALUE pairs)
// in it. They belong in an ArgsFile: the values may hold secrets.
func EnvArgs(env []string) []string {
	args := []string{"--clearenv"}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}
	return args
}

// HostSystemDirs lists the SystemDirs that are directories on this host.
func HostSystemDirs() []string {
	var out []string
	for _, d := range SystemDirs {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// Under reports whether path is one of dirs or inside one.
func Under(path string, dirs ...string) bool {
	for _, d := range dirs {
		if d == "/" || path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// InSystemDirs reports whether path, as given or with its symlinks
// resolved, lies in a directory every sandbox sees.
func InSystemDirs(path string) bool {
	dirs := HostSystemDirs()
	if !Under(filepath.Clean(path), dirs...) {
		return false
	}
	real, err := filepath.EvalSymlinks(path)
	return err != nil || Under(real, dirs...)
}

// Probe runs `/bin/sh -c 'exit 0'` in a sandbox made of args, the way a
// real one will be made, to check that bwrap works on this host
// (unprivileged user namespaces may be disabled, bwrap may be too old for
// --disable-userns, a bind may be wrong). attr, when set, is how bwrap is
// started (the user it runs as).
func Probe(ctx context.Context, bwrap string, args []string, attr *syscall.SysProcAttr) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	full := append(append(append([]string{}, args...), "--clearenv", "--"), "/bin/sh", "-c", "exit 0")
	cmd := exec.CommandContext(ctx, bwrap, full...)
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = attr
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(string(out))
	if msg == "" {
		msg = "no output"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("bwrap (%s) cannot create a sandbox on this host (are unprivileged user namespaces disabled? is bwrap older than 0.8? is a bind wrong?): %s: %s",
			bwrap, ee.ProcessState, msg)
	}
	return fmt.Errorf("run bwrap (%s): %w: %s", bwrap, err, msg)
}
