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
	"sync"
	"syscall"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/atomicfile"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/internal/machine"
	"github.com/outpost-sh/outpost/internal/netguard"
	"github.com/outpost-sh/outpost/internal/sandbox"
)

// Paths inside a bwrap sandbox. The host side of each is a directory of the
// machine's workspace (Spec.Workspace/state, work, home and tmp).
const (
	BwrapWorkDir  = "/workspace"      // Workspace/work, the remote's working directory
	BwrapStateDir = "/outpost/state"  // Workspace/state, OUTPOST_STATE_DIR
	BwrapHome     = "/home/outpost"   // Workspace/home, HOME
	BwrapTmp      = "/tmp"            // Workspace/tmp, TMPDIR
	BwrapBinDir   = "/outpost/bin"    // the outpost binary, read-only
	BwrapCAFile   = "/outpost/ca.pem" // OUTPOST_CA_FILE, read-only, when the spec has one
)

const (
	// bwrapStatusFile holds bwrap's --json-status-fd output: the host pid
	// of the sandbox's init, its pid namespace and, at the end, the exit
	// code. It is outside every bind, so the sandbox cannot forge it.
	bwrapStatusFile = "bwrap.json"
	// bwrapStartTimeout bounds the wait for the remote to be exec'd in the
	// sandbox.
	bwrapStartTimeout = 15 * time.Second
)

// BwrapBind is an extra bind mount of every sandbox.
type BwrapBind = sandbox.Bind

// ParseBwrapBind parses SRC[:DEST] (DEST defaults to SRC): both must be
// absolute and SRC must exist.
func ParseBwrapBind(spec string, readOnly bool) (BwrapBind, error) {
	return sandbox.ParseBind(spec, readOnly)
}

// BwrapOptions configure a BwrapBackend.
type BwrapOptions struct {
	// Bwrap is the bwrap executable; empty means bwrap from PATH.
	Bwrap string
	// Binds are extra bind mounts of every sandbox, after the standard
	// layout (so they may cover part of it).
	Binds []BwrapBind
}

// BwrapBackend runs each remote in a bubblewrap sandbox: the host's system
// directories read-only, private /tmp and HOME, the workspace read-write,
// its own pid, ipc, uts, mount and user namespaces (no capabilities, no
// nested user namespaces), the host's network (the remote dials the
// gateway), a new terminal session and an environment of the spawn contract
// only.
//
// bwrap runs with --die-with-parent under a small supervisor, `sh -c
// '"$@"; exit $?' WORKSPACE bwrap ...`, started in a session of
// its own: the supervisor, not the orchestrator, is bwrap's parent, so the
// sandbox outlives an orchestrator crash and can be adopted, while killing
// the supervisor (its pid is the machine's pid file) by any means kills
// bwrap, then the sandbox's init, and with it the whole pid namespace.
type BwrapBackend struct {
	bwrap string
	binds []BwrapBind
	mask  []string // host paths hidden behind a tmpfs
	// netErr is why restricted sessions cannot run here (no network
	// namespaces: not root, not Linux); nil when they can.
	netErr error
}

// EnforcesNetwork says whether sandboxes can start in a restricted
// session's network namespace here.
func (b *BwrapBackend) EnforcesNetwork() error { return b.netErr }

// NewBwrapBackend finds bwrap and checks that it can create a sandbox here
// (unprivileged user namespaces may be disabled).
func NewBwrapBackend(ctx context.Context, opts BwrapOptions) (*BwrapBackend, error) {
	path, err := sandbox.Find(opts.Bwrap)
	if err != nil {
		return nil, fmt.Errorf("the bwrap backend needs bubblewrap: %w", err)
	}
	if err := sandbox.CheckBinds(opts.Binds); err != nil {
		return nil, err
	}
	b := &BwrapBackend{bwrap: path, binds: opts.Binds}
	if home, err := os.UserHomeDir(); err == nil {
		b.mask = append(b.mask, home)
	}
	probe := append(sandbox.NamespaceArgs("outpost-probe"), sandbox.ProbeIdentityArgs(os.Geteuid())...)
	probe = append(probe, b.systemArgs(nil)...)
	probe = append(probe, "--proc", "/proc", "--dev", "/dev")
	probe = append(probe, b.bindArgs()...)
	probe = append(probe, "--remount-ro", "/")
	if err := sandbox.Probe(ctx, path, probe, nil); err != nil {
		return nil, err
	}
	if err := netguard.Check(ctx); err != nil {
		b.netErr = fmt.Errorf("the orchestrator cannot make a network namespace for a sandbox here (%w)", err)
	}
	return b, nil
}

func (b *BwrapBackend) Name() string { return "bwrap" }

// systemArgs binds the host's system directories read-only and hides the
// paths in mask (the orchestrator's home and state dir) when they lie
// inside one of them.
func (b *BwrapBackend) systemArgs(mask []string) []string {
	return sandbox.NewLayout(append(slices.Clone(b.mask), mask...)...).System().Args()
}

// sandboxEnv is Spec.Env with HOME, TMPDIR, OUTPOST_STATE_DIR and
// OUTPOST_CA_FILE moved to the sandbox's paths and the outpost binary's
// directory first in PATH.
func sandboxEnv(env []string) []string {
	out := make([]string, 0, len(env)+4)
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "TMPDIR", api.EnvStateDir.Name:
			continue
		case fleet.EnvCAFile:
			if v != "" {
				out = append(out, fleet.EnvCAFile+"="+BwrapCAFile)
			}
			continue
		case "PATH":
			path = v
			continue
		}
		out = append(out, kv)
	}
	return append(out, "HOME="+BwrapHome, "TMPDIR="+BwrapTmp, api.EnvStateDir.Name+"="+BwrapStateDir, "PATH="+BwrapBinDir+":"+path)
}

// args returns bwrap's arguments (given with --args, so that the
// environment, with the connect token, is not on a command line that ps
// shows) and the command to run in the sandbox.
func (b *BwrapBackend) args(s Spec) (args, command []string, err error) {
	if len(s.Remote) == 0 {
		return nil, nil, errors.New("no remote command")
	}
	stateDir := filepath.Dir(filepath.Dir(s.Workspace)) // STATE_DIR/machines/NAME
	args = append(sandbox.NamespaceArgs(s.Name), b.systemArgs([]string{stateDir})...)
	args = append(args,
		"--proc", "/proc", "--dev", "/dev",
		"--bind", filepath.Join(s.Workspace, "tmp"), BwrapTmp,
		"--bind", filepath.Join(s.Workspace, "home"), BwrapHome,
		"--bind", filepath.Join(s.Workspace, "state"), BwrapStateDir,
		"--bind", filepath.Join(s.Workspace, "work"), BwrapWorkDir)
	command = append([]string{}, s.Remote...)
	if strings.ContainsRune(s.Remote[0], '/') {
		bin, err := filepath.Abs(s.Remote[0])
		if err == nil {
			bin, err = filepath.EvalSymlinks(bin)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("find the remote binary: %w", err)
		}
		command[0] = BwrapBinDir + "/" + filepath.Base(bin)
		args = append(args, "--ro-bind", bin, command[0])
	}
	if ca := envValue(s.Env, fleet.EnvCAFile); ca != "" {
		// The sandbox hides the host's home and most of its tree: the CA
		// file is bound where OUTPOST_CA_FILE says (see sandboxEnv).
		src, err := filepath.EvalSymlinks(ca)
		if err != nil {
			return nil, nil, fmt.Errorf("the CA file for the sandbox (%s): %w", fleet.EnvCAFile, err)
		}
		args = append(args, "--ro-bind", src, BwrapCAFile)
	}
	args = append(args, b.bindArgs()...)
	if s.ResolvConf != "" {
		// The namespace's: the engine answers DNS, whatever the host's
		// resolver is.
		args = append(args, "--ro-bind", s.ResolvConf, "/etc/resolv.conf")
	}
	// An orchestrator that runs as root gives session code an
	// unprivileged uid in the sandbox (see sandbox.SessionUID for why);
	// its account files lie outside every directory the sandbox writes.
	etc := filepath.Join(s.Workspace, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return nil, nil, fmt.Errorf("create the sandbox's account files: %w", err)
	}
	id, err := sandbox.IdentityFor(os.Geteuid(), etc, BwrapHome)
	if err != nil {
		return nil, nil, err
	}
	args = append(args, id.Args...)
	for _, b := range id.Binds {
		args = append(args, "--ro-bind", b.Src, b.Dest)
	}
	args = append(args, "--remount-ro", "/", "--chdir", BwrapWorkDir, "--json-status-fd", "4")
	env := sandboxEnv(s.Env)
	if id.User != "" {
		// USER and LOGNAME, where the spawn environment names a user,
		// name the sandbox's.
		for i, kv := range env {
			if k, _, _ := strings.Cut(kv, "="); k == "USER" || k == "LOGNAME" {
				env[i] = k + "=" + id.User
			}
		}
	}
	args = append(args, sandbox.EnvArgs(env)...)
	if caps := sandboxCapabilities(detectHost(), s.Name); caps != "" {
		args = append(args, "--setenv", machine.EnvCapabilities, caps)
	}
	return args, command, nil
}

// sandboxCapabilities are the host's capabilities as a sandbox named
// hostname sees them: no sudo (no capabilities, no setuid), and no browser
// the sandbox cannot see.
func sandboxCapabilities(host api.Capabilities, hostname string) string {
	c := host
	c.Hostname, c.PasswordlessSudo = hostname, false
	if c.ChromePath != "" && !sandbox.Under(c.ChromePath, sandbox.HostSystemDirs()...) {
		c.ChromePath, c.ChromeVersion = "", ""
	}
	return capabilitiesJSON(c)
}

// bindArgs are the extra binds' arguments.
func (b *BwrapBackend) bindArgs() []string {
	var args []string
	for _, bd := range b.binds {
		flag := "--bind"
		if bd.ReadOnly {
			flag = "--ro-bind"
		}
		args = append(args, flag, bd.Src, bd.Dest)
	}
	return args
}

// bwrapSupervisor is the script of the supervisor: it runs bwrap as a
// child (not exec'd: it must stay bwrap's parent) and exits with its code.
const bwrapSupervisor = `"$@"; exit $?`

type bwrapMachine struct {
	done chan struct{}
	mu   sync.Mutex
	exit string
}

func (m *bwrapMachine) Done() <-chan struct{} { return m.done }
func (m *bwrapMachine) Exit() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.exit
}

func (m *bwrapMachine) finish(exit string) {
	m.mu.Lock()
	m.exit = exit
	m.mu.Unlock()
	close(m.done)
}

func (b *BwrapBackend) Provision(ctx context.Context, s Spec) (Machine, error) {
	for _, d := range []string{"state", filepath.Join("work", "repos"), "home", "tmp"} {
		if err := os.MkdirAll(filepath.Join(s.Workspace, d), 0o700); err != nil {
			return nil, fmt.Errorf("create workspace: %w", err)
		}
	}
	args, command, err := b.args(s)
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(s.Workspace, "remote.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open remote log: %w", err)
	}
	defer logf.Close()
	statusf, err := os.OpenFile(filepath.Join(s.Workspace, bwrapStatusFile), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open bwrap status file: %w", err)
	}
	defer statusf.Close()
	// In memory, never on disk or a command line: they hold the connect token.
	argsF, err := sandbox.ArgsFile(args)
	if err != nil {
		return nil, err
	}
	defer argsF.Close()
	sup := append([]string{"-c", bwrapSupervisor, s.Workspace, b.bwrap, "--args", "3", "--"}, command...)
	cmd := exec.Command("/bin/sh", sup...)
	cmd.Env = []string{}                // bwrap gets the sandbox's environment from --args
	cmd.Dir = "/"                       // sh exports PWD, which bwrap's init keeps: no host path
	cmd.Stdout, cmd.Stderr = logf, logf // a file: the sandbox outlives a crashed orchestrator
	cmd.ExtraFiles = []*os.File{argsF, statusf}
	// A session of its own: no terminal, no signal sent to the
	// orchestrator's process group reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	start := cmd.Start
	if s.Network != nil {
		start = func() error { return s.Network.Start(cmd) }
	}
	if err := start(); err != nil {
		return nil, fmt.Errorf("start bwrap: %w", err)
	}
	argsF.Close()
	m := &bwrapMachine{done: make(chan struct{})}
	go func() { m.finish(fleet.ExitString(cmd.Wait())) }()
	fail := func(err error) (Machine, error) {
		killGroup(cmd.Process.Pid, syscall.SIGKILL)
		<-m.done
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(s.Workspace, pidFile), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		return fail(fmt.Errorf("write pid file: %w", err))
	}
	if err := waitSandboxStarted(ctx, s.Workspace, m.done); err != nil {
		return fail(fmt.Errorf("%w; %s", err, logTail(filepath.Join(s.Workspace, "remote.log"))))
	}
	return m, nil
}

// waitSandboxStarted waits until the sandbox's init has a child that is no
// longer bwrap, i.e. the remote command was exec'd: the sandbox is set up.
func waitSandboxStarted(ctx context.Context, ws string, exited <-chan struct{}) error {
	timeout := time.NewTimer(bwrapStartTimeout)
	defer timeout.Stop()
	tick := time.NewTicker(2 * time.Millisecond) // bwrap itself takes ~4 ms
	defer tick.Stop()
	for {
		if st := readBwrapStatus(ws); st.ChildPid > 0 {
			for _, c := range sandbox.ChildPids(st.ChildPid) {
				if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c)); err == nil && strings.TrimSpace(string(comm)) != "bwrap" {
					return nil
				}
			}
		}
		select {
		case <-exited:
			return errors.New("bwrap exited while setting the sandbox up")
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout.C:
			return fmt.Errorf("the sandbox did not start within %s", bwrapStartTimeout)
		case <-tick.C:
		}
	}
}

func logTail(path string) string {
	b, _ := os.ReadFile(path)
	msg := strings.TrimSpace(string(b))
	if len(msg) > 500 {
		msg = msg[len(msg)-500:]
	}
	if msg == "" {
		return "no output"
	}
	return "output: " + msg
}

func (b *BwrapBackend) Adopt(ctx context.Context, s Spec) (Machine, bool) {
	pid := readPid(s.Workspace)
	if !isBwrapSupervisor(pid, s.Workspace) {
		return nil, false
	}
	m := &bwrapMachine{done: make(chan struct{})}
	go func() { // not our child: poll
		for isBwrapSupervisor(pid, s.Workspace) {
			time.Sleep(300 * time.Millisecond)
		}
		exit := "exited (adopted sandbox, code unknown)"
		if st := readBwrapStatus(s.Workspace); st.ExitCode != nil {
			exit = fmt.Sprintf("exit status %d (adopted sandbox)", *st.ExitCode)
		}
		m.finish(exit)
	}()
	return m, true
}

// Teardown asks the remote to stop (SIGTERM), kills the
// supervisor's process group and the sandbox's init after killDelay (which
// kills the whole pid namespace), waits until no process of the sandbox is
// left and removes the workspace.
func (b *BwrapBackend) Teardown(ctx context.Context, s Spec) error {
	sup := readPid(s.Workspace)
	if !isBwrapSupervisor(sup, s.Workspace) {
		// Gone, or the pid was reused (never signal it), or a crash came
		// before the pid file was written: look for it by its workspace.
		sup = findBwrapSupervisor(s.Workspace)
	}
	st := readBwrapStatus(s.Workspace)
	ns := sandboxNamespace(st)
	if ns != "" {
		// Only the remote (init's child), as the process backend signals
		// only the remote's group: the agent's commands are the remote's
		// to stop, and a command killed first would fail the session
		// instead of leaving it to resume.
		for _, p := range sandbox.ChildPids(st.ChildPid) {
			_ = syscall.Kill(p, syscall.SIGTERM)
		}
		deadline := time.Now().Add(killDelay)
		for (alive(sup) || len(pidsInNamespace(ns)) > 0) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if sup > 0 {
		killGroup(sup, syscall.SIGKILL) // bwrap dies with it (--die-with-parent)
	}
	if ns != "" {
		_ = syscall.Kill(st.ChildPid, syscall.SIGKILL) // init: the namespace dies with it
	}
	deadline := time.Now().Add(killDelay)
	for {
		left := pidsInNamespace(ns)
		if sup > 0 && alive(sup) {
			left = append(left, sup)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox processes still alive after SIGKILL: %v", left)
		}
		for _, p := range left {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return removeWorkspace(s.Workspace)
}

// isBwrapSupervisor reports whether pid is alive and is the supervisor of
// the machine of workspace ws (its $0 is the workspace), so a reused pid is
// never taken for it.
func isBwrapSupervisor(pid int, ws string) bool {
	if pid <= 0 || !alive(pid) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	return len(args) > 3 && args[1] == "-c" && args[2] == bwrapSupervisor && args[3] == ws
}

// findBwrapSupervisor scans /proc for the supervisor of workspace ws.
func findBwrapSupervisor(ws string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && isBwrapSupervisor(pid, ws) {
			return pid
		}
	}
	return 0
}

type bwrapStatus = sandbox.Status

// readBwrapStatus merges the JSON documents bwrap wrote to the status file.
func readBwrapStatus(ws string) bwrapStatus {
	f, err := os.Open(filepath.Join(ws, bwrapStatusFile))
	if err != nil {
		return bwrapStatus{}
	}
	defer f.Close()
	return sandbox.ReadStatus(f)
}

// sandboxNamespace is the pid namespace link (pid:[inode]) of the sandbox
// while its init runs, else "".
func sandboxNamespace(st bwrapStatus) string {
	if st.ChildPid <= 0 || st.PidNamespace == 0 {
		return ""
	}
	want := fmt.Sprintf("pid:[%d]", st.PidNamespace)
	if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", st.ChildPid)); err != nil || l != want {
		return ""
	}
	return want
}

// pidsInNamespace lists the live processes of pid namespace ns (a
// pid:[inode] link); none when ns is "".
func pidsInNamespace(ns string) []int {
	if ns == "" {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}
