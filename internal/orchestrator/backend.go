package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/atomicfile"
	"github.com/outpost-sh/outpost/internal/dist"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/internal/loop"
	"github.com/outpost-sh/outpost/internal/machine"
	"github.com/outpost-sh/outpost/internal/netguard"
)

// Spec is what a backend needs to create a session's machine.
type Spec struct {
	SessionID string
	// Name is the machine's deterministic name, MachineName(SessionID).
	Name string
	// Workspace is the machine's directory under the state dir.
	Workspace string
	Platform  string
	// Env is the remote's whole environment under the spawn contract: the
	// session's connect token, never the orchestrator's API token.
	Env []string
	// Remote is the command that serves the session: this build's
	// (outpost remote serve), or the pinned build's, downloaded
	// (<cache>/remote/<id>_<platform>/devin-remote serve).
	Remote []string
	// Pin is the remote build the session's queue entry pins, "" when it
	// pins none; Remote runs it.
	Pin string
	// StaticBaseURL is where the orchestrator downloads pinned builds
	// from, when it was given one (--static-base-url).
	StaticBaseURL string
	// Acceptor is the orchestrator's acceptor id, for backends that label
	// their machines with it.
	Acceptor string
	// Network, for a restricted session, is its enforcement point: the
	// machine must start in its network namespace (Network.Start), which
	// only a NetworkEnforcer backend does; nil for an open session.
	Network *netguard.Guard
	// ResolvConf, with Network, is the host path of the namespace's
	// resolv.conf, to show at the machine's /etc/resolv.conf.
	ResolvConf string
	// Requirements are the session's (spec.requirements of its queue
	// entry); nil when it has none. The exec backend passes them to its
	// commands; the backends on this machine are claimed for only when
	// it meets them.
	Requirements *api.Requirements
}

// NetworkEnforcer is implemented by backends whose machines can start in a
// restricted session's network namespace (Spec.Network). The orchestrator
// hands restricted sessions only to those; others refuse them.
type NetworkEnforcer interface {
	// EnforcesNetwork is nil when the backend runs machines in
	// Spec.Network's namespace here, else why it cannot, in a sentence.
	EnforcesNetwork() error
}

// NetworkNamespacer is implemented by NetworkEnforcer backends whose
// runtime, not the guard, makes a machine's network namespace (a container
// runtime): the orchestrator asks for the namespace first, and the
// session's guard serves it (netguard.Options.Namespace) before Provision
// starts the machine in it.
type NetworkNamespacer interface {
	// NetworkNamespace makes the network namespace of s's machine, with
	// nothing but lo in it, and returns a path to it that is valid until
	// Teardown, which removes whatever it made.
	NetworkNamespace(ctx context.Context, s Spec) (string, error)
}

// Machine is a provisioned machine running a session's remote.
type Machine interface {
	// Done is closed once the remote has exited (never, when the backend
	// cannot tell).
	Done() <-chan struct{}
	// Exit describes how the remote exited, once Done is closed.
	Exit() string
}

// Backend provisions and tears down machines. Machines are named from the
// session id, so a restarted orchestrator finds its leftovers.
type Backend interface {
	Name() string
	// Provision creates the machine and starts the remote in it.
	Provision(ctx context.Context, s Spec) (Machine, error)
	// Adopt returns the still-running machine of a leftover workspace.
	Adopt(ctx context.Context, s Spec) (Machine, bool)
	// Teardown stops the machine and removes its workspace. It is
	// idempotent.
	Teardown(ctx context.Context, s Spec) error
}

// LeftoverLister is implemented by backends whose machines can outlive
// their workspace directory (containers, VMs): after a crash the
// orchestrator adopts or removes those too.
type LeftoverLister interface {
	// Leftovers returns the session ids of the machines acceptor made that
	// still exist.
	Leftovers(ctx context.Context, acceptor string) ([]string, error)
}

// MachineName is the deterministic name of a session's machine.
func MachineName(sessionID string) string { return "outpost-" + sessionID }

const (
	pidFile = "pid"
	// pidStartFile holds the boot id and the remote's start time (procStart),
	// so a pid reused by another process after a crash or reboot is never
	// taken for the remote.
	pidStartFile = "pid-start"
	killDelay    = 5 * time.Second
)

// ProcessBackend runs each remote as a child process in its own process
// group, in a fresh workspace directory that is removed afterwards.
type ProcessBackend struct{}

func (ProcessBackend) Name() string { return "process" }

type procMachine struct {
	pid  int
	done chan struct{}
	mu   sync.Mutex
	exit string
	code int // -1 when unknown
}

// ExitCode reports the remote's exit code, when it was our child.
func (m *procMachine) ExitCode() (int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.code, m.code >= 0
}

// detectHost detects this machine's capabilities once, for the remotes of
// the process and bwrap backends: they run on this very machine, so they
// start without probing it again (the probes are most of a remote's
// start-up).
var detectHost = sync.OnceValue(func() api.Capabilities {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return machine.Detect(ctx)
})

// hostCapabilities is detectHost as the JSON of machine.EnvCapabilities.
func hostCapabilities() string {
	return capabilitiesJSON(detectHost())
}

func capabilitiesJSON(c api.Capabilities) string {
	b, err := json.Marshal(c)
	if err != nil {
		return ""
	}
	return string(b)
}

func (m *procMachine) Done() <-chan struct{} { return m.done }
func (m *procMachine) Exit() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.exit
}

func (ProcessBackend) Provision(ctx context.Context, s Spec) (Machine, error) {
	for _, d := range []string{filepath.Join(s.Workspace, "state"), filepath.Join(s.Workspace, "work", "repos")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create workspace: %w", err)
		}
	}
	logf, err := os.OpenFile(filepath.Join(s.Workspace, "remote.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open remote log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(s.Remote[0], s.Remote[1:]...)
	cmd.Env = s.Env
	if caps := hostCapabilities(); caps != "" {
		cmd.Env = append(slices.Clone(s.Env), machine.EnvCapabilities+"="+caps)
	}
	cmd.Dir = filepath.Join(s.Workspace, "work")
	// A file, not a pipe: the remote must outlive a crashed orchestrator.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = groupAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start remote: %w", err)
	}
	m := &procMachine{pid: cmd.Process.Pid, done: make(chan struct{}), code: -1}
	start := procStart(m.pid)
	err = atomicfile.Write(filepath.Join(s.Workspace, pidStartFile), []byte(start+"\n"), 0o600)
	if err == nil {
		err = atomicfile.Write(filepath.Join(s.Workspace, pidFile), []byte(strconv.Itoa(m.pid)+"\n"), 0o600)
	}
	if err != nil {
		killGroupNow(m.pid)
		_ = cmd.Wait()
		return nil, fmt.Errorf("write pid file: %w", err)
	}
	go func() {
		err := cmd.Wait()
		m.mu.Lock()
		m.exit = fleet.ExitString(err)
		if cmd.ProcessState != nil {
			m.code = cmd.ProcessState.ExitCode()
		}
		m.mu.Unlock()
		close(m.done)
	}()
	return m, nil
}

func (ProcessBackend) Adopt(ctx context.Context, s Spec) (Machine, bool) {
	pid := ourPid(s.Workspace)
	if pid <= 0 || !alive(pid) {
		return nil, false
	}
	start := procStart(pid)
	m := &procMachine{pid: pid, done: make(chan struct{}), code: -1}
	go func() { // not our child: poll
		for alive(pid) && procStart(pid) == start {
			time.Sleep(300 * time.Millisecond)
		}
		m.mu.Lock()
		m.exit = "exited (adopted process, code unknown)"
		m.mu.Unlock()
		close(m.done)
	}()
	return m, true
}

func (ProcessBackend) Teardown(ctx context.Context, s Spec) error {
	if pid := ourPid(s.Workspace); pid > 0 {
		stopGroup(pid)
	}
	return removeWorkspace(s.Workspace)
}

// ourPid returns the pid in the workspace's pid file if that process is
// still the remote this backend started: its start time must match the
// one recorded, so a pid reused since a crash or reboot is left alone.
// It returns 0 otherwise.
func ourPid(workspace string) int {
	pid := readPid(workspace)
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(workspace, pidStartFile))
	if err != nil {
		return 0 // no record (written before the pid file): never signal a process we cannot vouch for
	}
	if want := strings.TrimSpace(string(b)); want != "" && procStart(pid) != want {
		return 0
	}
	return pid // the same process, or a system without /proc to tell
}

// procStart identifies pid's process across pid reuse: the boot's id and
// the process's start time (/proc/PID/stat field 22, in clock ticks since
// boot), or "" where there is no /proc.
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	// Fields after the command: state is field 3, starttime field 22.
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return strings.TrimSpace(string(boot)) + " " + f[19]
}

func readPid(workspace string) int {
	b, err := os.ReadFile(filepath.Join(workspace, pidFile))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// ExecBackend runs user commands with sh -c: ProvisionCmd must start the
// remote somewhere and return; TeardownCmd removes the machine; StatusCmd,
// optional, exits 0 while the machine runs.
type ExecBackend struct {
	ProvisionCmd, TeardownCmd, StatusCmd string
	// StatusEvery is how often StatusCmd runs; zero means 2s.
	StatusEvery time.Duration
}

func (ExecBackend) Name() string { return "exec" }

func (b ExecBackend) env(s Spec) []string {
	env := append([]string{}, s.Env...)
	env = append(env, api.EnvPlatform.Name+"="+s.Platform, api.EnvWorkspace.Name+"="+s.Workspace, api.EnvMachineName.Name+"="+s.Name)
	if len(s.Remote) > 0 {
		env = append(env, api.EnvBinary.Name+"="+execBinary(s.Remote[0]))
	}
	// A command that starts `outpost worker start --session` on the
	// machine rather than the remote passes these on, so that the worker
	// there resolves the same pin (direct-serve reads it as the session's).
	if s.Pin != "" {
		env = append(env, api.EnvWorkerRemoteSHA.Name+"="+s.Pin)
	}
	if s.StaticBaseURL != "" {
		env = append(env, api.EnvWorkerStaticBaseURL.Name+"="+s.StaticBaseURL)
	}
	if !s.Requirements.IsZero() {
		b, _ := json.Marshal(s.Requirements) // ints, strings and a string map always encode
		env = append(env, api.EnvRequirements.Name+"="+string(b))
	}
	return env
}

// execBinary is $OUTPOST_BIN for a remote binary: the binary itself, or
// for a downloaded build (devin-remote, which invoked by that name is only
// `outpost remote`) the link named outpost beside it that outpostLink
// makes, so that "$OUTPOST_BIN" remote serve runs either build.
func execBinary(bin string) string {
	if dist.IsRemoteName(bin) {
		return filepath.Join(filepath.Dir(bin), outpostLinkName)
	}
	return bin
}

// outpostLinkName is the name of the link to a downloaded build that runs
// it as the whole outpost command.
const outpostLinkName = "outpost"

// linkSeq tells apart the temporary names of links made at once by one
// process (the pid tells processes apart): sessions pinning the same build
// are provisioned concurrently.
var linkSeq atomic.Uint64

// outpostLink makes the link execBinary names for a downloaded build, once
// per build: a link made under a temporary name of its own and renamed into
// place, so that concurrent provisioning never sees a half-made one nor
// removes another's.
func outpostLink(bin string) error {
	if !dist.IsRemoteName(bin) {
		return nil
	}
	link := execBinary(bin)
	target := filepath.Base(bin)
	if got, err := os.Readlink(link); err == nil && got == target {
		return nil
	}
	tmp := fmt.Sprintf("%s.%d-%d.tmp", link, os.Getpid(), linkSeq.Add(1))
	_ = os.Remove(tmp) // left by a process of the same pid that died
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("link %s to the pinned build: %w", link, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("link %s to the pinned build: %w", link, err)
	}
	return nil
}

func (b ExecBackend) run(ctx context.Context, s Spec, script string) error {
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Env = b.env(s)
	cmd.Dir = s.Workspace
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = killDelay
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if len(msg) > 500 {
			msg = msg[len(msg)-500:]
		}
		return fmt.Errorf("%s: %s", fleet.ExitString(err), msg)
	}
	return nil
}

// errMachineStopped ends the status loop of an exec machine.
var errMachineStopped = errors.New("the machine stopped")

type execMachine struct {
	done chan struct{}
	exit string
}

func (m *execMachine) Done() <-chan struct{} { return m.done }
func (m *execMachine) Exit() string          { return m.exit }

func (b ExecBackend) Provision(ctx context.Context, s Spec) (Machine, error) {
	if err := os.MkdirAll(s.Workspace, 0o700); err != nil {
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	if len(s.Remote) > 0 {
		if err := outpostLink(s.Remote[0]); err != nil {
			return nil, err
		}
	}
	if err := b.run(ctx, s, b.ProvisionCmd); err != nil {
		return nil, fmt.Errorf("provision command failed: %w", err)
	}
	return b.watch(s), nil
}

func (b ExecBackend) watch(s Spec) Machine {
	m := &execMachine{done: make(chan struct{}), exit: "status command reports the machine stopped"}
	if b.StatusCmd == "" {
		return m // ends with the session
	}
	every := b.StatusEvery
	if every <= 0 {
		every = 2 * time.Second
	}
	// The loop ends when the machine does: when the status command fails
	// or the workspace is gone (torn down).
	go func() {
		_ = loop.EveryUntil(context.Background(), every, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := b.run(ctx, Spec{Env: s.Env, Workspace: s.Workspace, Name: s.Name, Platform: s.Platform, Remote: s.Remote,
				Pin: s.Pin, StaticBaseURL: s.StaticBaseURL}, b.StatusCmd)
			cancel()
			if _, statErr := os.Stat(s.Workspace); err != nil || statErr != nil {
				close(m.done)
				return errMachineStopped
			}
			return nil
		})
	}()
	return m
}

func (b ExecBackend) Adopt(ctx context.Context, s Spec) (Machine, bool) {
	if b.StatusCmd != "" && b.run(ctx, s, b.StatusCmd) != nil {
		return nil, false
	}
	return b.watch(s), true
}

func (b ExecBackend) Teardown(ctx context.Context, s Spec) error {
	var err error
	if b.TeardownCmd != "" {
		if _, statErr := os.Stat(s.Workspace); statErr == nil {
			if e := b.run(ctx, s, b.TeardownCmd); e != nil {
				err = fmt.Errorf("teardown command failed: %w", e)
			}
		}
	}
	return errors.Join(err, os.RemoveAll(s.Workspace))
}

// envValue is the value of key in env (KEY=VALUE entries), or "".
func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// removeWorkspace removes a workspace even when the sandbox left read-only
// directories in it (a Go module cache, for one).
func removeWorkspace(ws string) error {
	err := os.RemoveAll(ws)
	if err == nil {
		return nil
	}
	_ = filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(ws)
}
