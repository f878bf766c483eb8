package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/doctor"
	"github.com/outpost-sh/outpost/internal/sandbox"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// Isolation is how a worker keeps session code (the remote and every
// command it runs) away from the worker's credentials: its API token in
// its environment, a token file, the saved login, its data dir.
type Isolation string

// The isolation modes. docs/security.md says what session code can and
// cannot reach under each.
const (
	// IsolationAuto is IsolationBwrap when bubblewrap works here, else
	// IsolationUser when a run-as user is given, else IsolationNone.
	IsolationAuto Isolation = "auto"
	// IsolationBwrap runs each remote in a bubblewrap sandbox: its own pid
	// namespace, the workspace and the session's state dir read-write, the
	// host's system directories read-only, a private HOME and /tmp, and
	// nothing of the worker's data dir, config or home. With a run-as
	// user, bwrap runs as that user.
	IsolationBwrap Isolation = "bwrap"
	// IsolationUser runs each remote as another Unix user (the worker needs
	// root or CAP_SETUID and CAP_SETGID), with a HOME of its own.
	IsolationUser Isolation = "user"
	// IsolationNone runs remotes as the worker's own user, which can read
	// the worker's credentials.
	IsolationNone Isolation = "none"
)

// Isolations lists the modes.
var Isolations = []Isolation{IsolationAuto, IsolationBwrap, IsolationUser, IsolationNone}

// ParseIsolation parses a mode's name.
func ParseIsolation(s string) (Isolation, error) {
	if m := Isolation(s); slices.Contains(Isolations, m) {
		return m, nil
	}
	return "", fmt.Errorf("unknown isolation %q: want auto, bwrap, user or none", s)
}

// IsolationOptions configure how session code is kept from the worker's
// credentials.
type IsolationOptions struct {
	// Mode is the isolation mode. Empty means IsolationNone, today's
	// behaviour for programs that embed a worker; `worker start` defaults
	// to IsolationAuto.
	Mode Isolation
	// RunAs is the Unix user (name or uid) remotes run as: required by
	// IsolationUser, and with IsolationBwrap the user bwrap runs as.
	// Empty: the worker's own user.
	RunAs string
	// RunAsHome is the run-as user's HOME in IsolationUser. Empty means
	// Dir/.home. It is created and given to the user.
	RunAsHome string
	// Binds are extra bind mounts of every bwrap sandbox (a toolchain, a
	// cache, repositories to clone from), after the standard layout.
	Binds []sandbox.Bind
	// Hide lists host paths session code must never see, even through a
	// bind: the saved login, a token file. The data dir is always hidden
	// (but each session's own state dir in it).
	Hide []string
	// Bwrap is the bwrap executable; empty means bwrap from PATH.
	Bwrap string
}

// remoteLogName is the file in a session's state dir that keeps its
// remote's output.
const remoteLogName = "remote.log"

// sandboxHomeFallback is the sandbox's HOME when the worker has none that
// can be covered with a private one.
const sandboxHomeFallback = "/home/outpost"

// errNoBwrapHere is the reason auto does not try bwrap off Linux.
var errNoBwrapHere = errors.New("bubblewrap runs on Linux only")

// isolation is how a worker starts its remotes, set up once at start. A
// nil *isolation is IsolationNone.
type isolation struct {
	mode     Isolation
	bwrap    string       // the bwrap executable (bwrap mode)
	user     *sessionUser // the run-as user; nil: the worker's own
	hostname string
	home     string // HOME of sessions: the sandbox's private one (bwrap) or the run-as user's (user)
	dir      string // the workspace
	hide     []string
	binds    []sandbox.Bind
	chrome   string         // the browser the remote uses, bound when outside the system dirs
	devices  []string       // GPU devices bound into sandboxes
	probe    doctor.Sandbox // what the bwrap probe at start found
}

// sessionUser is the Unix user sessions run as.
type sessionUser struct {
	name     string
	uid, gid uint32
	groups   []uint32
	home     string // its passwd home directory
}

// chooseIsolation is the mode a worker asked for want runs in, given why
// bwrap cannot sandbox here (nil: it can), whether a run-as user is given
// and whether sandbox binds are.
func chooseIsolation(want Isolation, bwrapErr error, runAs, binds bool) (Isolation, error) {
	switch want {
	case IsolationAuto:
		switch {
		case bwrapErr == nil:
			return IsolationBwrap, nil
		case binds:
			return "", fmt.Errorf("--bwrap-bind and --bwrap-ro-bind need a bubblewrap sandbox, which cannot be made here: %w", bwrapErr)
		case runAs:
			return IsolationUser, nil
		}
		return IsolationNone, nil
	case IsolationBwrap:
		if bwrapErr != nil {
			return "", fmt.Errorf("--isolation bwrap: %w", bwrapErr)
		}
		return IsolationBwrap, nil
	case IsolationUser, IsolationNone:
		switch {
		case want == IsolationUser && !runAs:
			return "", errors.New("--isolation user needs --run-as USER: the Unix user sessions run as")
		case want == IsolationNone && runAs:
			return "", errors.New("--run-as needs --isolation user, bwrap or auto: with none sessions run as the worker's own user")
		case binds:
			return "", fmt.Errorf("--bwrap-bind and --bwrap-ro-bind need --isolation bwrap or auto, not %s", want)
		}
		return want, nil
	}
	_, err := ParseIsolation(string(want))
	return "", err
}

// setupIsolation decides how remotes start (Options.Isolation), checks
// that it works here, prepares the workspace for a run-as user, logs the
// mode, readies the git mirrors directory, and returns the capabilities
// as sessions will see them.
func (w *worker) setupIsolation(ctx context.Context, caps api.Capabilities) (api.Capabilities, error) {
	o := w.opts.Isolation
	want := o.Mode
	if want == "" {
		want = IsolationNone
	}
	if _, err := ParseIsolation(string(want)); err != nil {
		return caps, err
	}
	// Contradictions are refused before anything is touched.
	if want == IsolationNone || want == IsolationUser {
		if _, err := chooseIsolation(want, nil, o.RunAs != "", len(o.Binds) > 0); err != nil {
			return caps, err
		}
	}
	if err := sandbox.CheckBinds(o.Binds); err != nil {
		return caps, err
	}
	iso := &isolation{mode: want, dir: w.opts.Dir, binds: o.Binds, chrome: caps.ChromePath, home: os.Getenv("HOME")}
	iso.hide = append([]string{w.opts.DataDir}, o.Hide...)
	if iso.hostname, _ = os.Hostname(); iso.hostname == "" {
		iso.hostname = "outpost"
	}
	if o.RunAs != "" {
		u, err := lookupSessionUser(o.RunAs)
		if err != nil {
			return caps, err
		}
		iso.user = u
		if want == IsolationUser {
			// Before its files are touched: see endLeftovers.
			if err := iso.endProcesses(ctx, w.log); err != nil {
				return caps, err
			}
		}
		if err := iso.prepareUser(ctx, w.opts.DataDir, w.opts.RemoteCommand[0]); err != nil {
			return caps, err
		}
	}
	bwrapErr := errNoBwrapHere
	iso.probe = doctor.Sandbox{NotUsed: errNoBwrapHere.Error()}
	if runtime.GOOS == "linux" {
		iso.probe.NotUsed = "not used: --isolation " + string(want)
	}
	if (want == IsolationAuto || want == IsolationBwrap) && runtime.GOOS == "linux" {
		bwrapErr = iso.probeBwrap(ctx, o.Bwrap)
		iso.probe = doctor.Sandbox{Bwrap: iso.bwrap, Err: bwrapErr}
	}
	mode, err := chooseIsolation(want, bwrapErr, iso.user != nil, len(iso.binds) > 0)
	if err != nil {
		return caps, err
	}
	iso.mode = mode
	hostSudo := caps.PasswordlessSudo
	switch mode {
	case IsolationBwrap:
		if iso.user != nil {
			iso.home = iso.user.home
		}
		iso.home = sandboxHome(iso.home)
		iso.devices = gpuDevices()
		caps.PasswordlessSudo = false
	case IsolationUser:
		if want != IsolationUser {
			if err := iso.endProcesses(ctx, w.log); err != nil {
				return caps, err
			}
		}
		iso.home = o.RunAsHome
		if iso.home == "" {
			iso.home = filepath.Join(w.opts.Dir, ".home")
		}
		if err := iso.prepareHome(); err != nil {
			return caps, err
		}
		caps.PasswordlessSudo = iso.user.passwordlessSudo(ctx)
	}
	if b, err := json.Marshal(caps); err == nil {
		w.caps = string(b)
	}
	w.iso = iso
	iso.report(w.log, want, bwrapErr, hostSudo, caps, w.opts.ConnectToken != "")
	root, err := w.setupMirrors()
	if err != nil {
		return caps, err
	}
	w.mirrors = newMirrorer(root, w.log)
	return caps, nil
}

// endLeftovers ends, in user isolation, every process of the run-as user
// once a session's remote has exited: what the session left behind must
// neither watch the next session nor race the worker while it gives the
// user its files. A process that survives SIGKILL is logged.
func (iso *isolation) endLeftovers(ctx context.Context, log *slog.Logger) {
	if iso == nil || iso.mode != IsolationUser {
		return
	}
	if err := iso.endProcesses(context.WithoutCancel(ctx), log); err != nil {
		log.Error("cannot end what the session left running as the run-as user", "err", err)
	}
}

// endProcesses ends every process of the run-as user, saying how many
// there were.
func (iso *isolation) endProcesses(ctx context.Context, log *slog.Logger) error {
	n, err := iso.user.endProcesses(ctx)
	if n > 0 {
		log.Info("ended the processes of the run-as user (it is dedicated to this worker's sessions)", "run_as", iso.user.name, "processes", n)
	}
	return err
}

// report logs the mode at start, and loudly what it leaves open.
func (iso *isolation) report(log *slog.Logger, want Isolation, bwrapErr error, hostSudo bool, caps api.Capabilities, direct bool) {
	runAs := "the worker's user"
	if iso.user != nil {
		runAs = iso.user.name
	}
	if want == IsolationAuto && iso.mode != IsolationBwrap {
		log.Warn("bubblewrap cannot sandbox sessions here", "err", bwrapErr)
	}
	switch iso.mode {
	case IsolationBwrap:
		log.Info("session isolation: bwrap (each session in a bubblewrap sandbox: its own processes only, no access to the worker's data dir, config or home)",
			"isolation", iso.mode, "bwrap", iso.bwrap, "run_as", runAs)
		if iso.user == nil && os.Geteuid() == 0 {
			log.Warn("the worker runs as root: session code in the sandbox runs as uid 1000 (\"outpost\") without capabilities, but the host sees it as root: it can read root-owned files of the read-only system directories (/etc, /opt, /usr); run the worker as another user or add --run-as USER")
		}
		if hostSudo {
			log.Warn("sessions get no sudo in the bwrap sandbox (no new privileges, no capabilities), although the worker's user has passwordless sudo; use --isolation none only on a machine dedicated to sessions and recycled after each")
		}
	case IsolationUser:
		log.Info("session isolation: user (sessions run as another Unix user, outside a sandbox)",
			"isolation", iso.mode, "run_as", runAs, "home", iso.home)
		if caps.PasswordlessSudo {
			log.Warn("WARNING: the run-as user has passwordless sudo: session code can become root and read the worker's credentials", "run_as", runAs)
		}
	case IsolationNone:
		if direct {
			log.Warn("session isolation: none (sessions run as the worker's user and can read this process; in direct-serve it holds only the session's connect token)",
				"isolation", iso.mode)
			return
		}
		log.Warn("WARNING: session isolation is off (--isolation none): session code runs as the worker's user and CAN READ THE WORKER'S TOKEN "+
			"(its environment, a token file, the saved login in the user config dir) and its data dir. "+
			"Install bubblewrap (apt-get install bubblewrap) for --isolation bwrap, or run the worker as root with --isolation user --run-as USER.",
			"isolation", iso.mode)
	}
}

// probeBwrap finds bwrap and checks that it can make this worker's
// sandbox here, as the run-as user when there is one.
func (iso *isolation) probeBwrap(ctx context.Context, name string) error {
	path, err := sandbox.Find(name)
	if err != nil {
		return err
	}
	iso.bwrap = path
	l := sandbox.NewLayout(iso.hide...).System().ProcDev()
	l.Bind(sandbox.Bind{Src: iso.dir, Dest: iso.dir})
	for _, b := range iso.binds {
		l.Bind(b)
	}
	args := sandbox.NamespaceArgs(iso.hostname)
	if iso.user == nil {
		args = append(args, sandbox.ProbeIdentityArgs(os.Geteuid())...)
	}
	args = append(args, l.Args()...)
	args = append(args, "--remount-ro", "/", "--chdir", iso.dir)
	return sandbox.Probe(ctx, path, args, iso.user.sysProcAttr())
}

// sandboxHome is the path of the sessions' private HOME in a bwrap
// sandbox: the worker's (or the run-as user's) HOME path, unless a private
// directory there would hide the system.
func sandboxHome(home string) string {
	if home == "" || !filepath.IsAbs(home) {
		return sandboxHomeFallback
	}
	home = filepath.Clean(home)
	for _, d := range append(sandbox.HostSystemDirs(), "/", "/proc", "/dev") {
		if sandbox.Under(d, home) {
			return sandboxHomeFallback
		}
	}
	return home
}

// wrap turns cmd, the remote's command as the worker's own user would run
// it, into the isolated one; then, when not "", is an executable cmd runs
// in turn (another remote build), shown read-only in the sandbox too;
// resolvConf, when not "", is bound over the sandbox's /etc/resolv.conf
// (a restricted session's, naming its namespace's DNS). The returned
// function is called once cmd has started.
func (iso *isolation) wrap(cmd *exec.Cmd, stateDir, then, resolvConf string) (func(), error) {
	if iso == nil || iso.mode == IsolationNone {
		return func() {}, nil
	}
	if iso.user != nil {
		if err := iso.prepareSession(stateDir); err != nil {
			return nil, err
		}
	}
	if iso.mode == IsolationUser {
		cmd.Env = setEnv(cmd.Env, "HOME="+iso.home, "USER="+iso.user.name, "LOGNAME="+iso.user.name)
		setCredential(cmd, iso.user)
		return func() {}, nil
	}
	for _, d := range []string{"home", "tmp"} {
		p := filepath.Join(stateDir, d)
		if err := os.MkdirAll(p, 0o700); err != nil {
			return nil, fmt.Errorf("create the sandbox's %s: %w", d, err)
		}
		if iso.user != nil {
			if err := chownDir(p, iso.user); err != nil {
				return nil, err
			}
		}
	}
	exe, err := filepath.Abs(cmd.Path)
	if err != nil {
		return nil, fmt.Errorf("find the remote's executable: %w", err)
	}
	spec := iso.spec(exe, cmd.Dir, stateDir, cmd.Env)
	spec.resolvConf = resolvConf
	if iso.user == nil {
		// A worker that runs as root gives session code an unprivileged
		// uid in the sandbox (see sandbox.SessionUID for why). The account
		// files lie in the state dir, which the session may write: it can
		// change only its own view of them, which grants nothing (no
		// capability, nothing setuid works in the sandbox).
		etc := filepath.Join(stateDir, "etc")
		if err := os.MkdirAll(etc, 0o755); err != nil {
			return nil, fmt.Errorf("create the sandbox's account files: %w", err)
		}
		if spec.identity, err = sandbox.IdentityFor(os.Geteuid(), etc, spec.home); err != nil {
			return nil, err
		}
	}
	if then != "" {
		if spec.then, err = filepath.Abs(then); err != nil {
			return nil, fmt.Errorf("find the remote's executable: %w", err)
		}
	}
	f, err := sandbox.ArgsFile(spec.args())
	if err != nil {
		return nil, err
	}
	cmd.Args = append([]string{iso.bwrap, "--args", "3", "--", exe}, cmd.Args[1:]...)
	cmd.Path = iso.bwrap
	cmd.Env = []string{} // the sandbox's comes from --args
	cmd.ExtraFiles = []*os.File{f}
	if iso.user != nil {
		setCredential(cmd, iso.user)
	}
	return func() { f.Close() }, nil
}

// spec is the sandbox of one remote.
func (iso *isolation) spec(exe, workspace, stateDir string, env []string) sandboxSpec {
	s := sandboxSpec{hostname: iso.hostname, home: iso.home, workspace: workspace, stateDir: stateDir, remote: exe,
		hide: iso.hide, binds: iso.binds, chrome: iso.chrome, devices: iso.devices}
	s.env = env
	if iso.user != nil {
		s.env = setEnv(s.env, "USER="+iso.user.name, "LOGNAME="+iso.user.name)
	}
	return s
}

// sandboxSpec is what a remote's bwrap sandbox is made of.
type sandboxSpec struct {
	hostname  string
	home      string   // HOME: a private directory, stateDir/home on the host
	workspace string   // read-write at its own path
	stateDir  string   // read-write at its own path; holds the private home and /tmp
	remote    string   // the remote's executable, read-only at its own path
	then      string   // another executable the remote runs, likewise; "" for none
	env       []string // the remote's; HOME and TMPDIR become the sandbox's
	hide      []string
	binds     []sandbox.Bind
	chrome    string
	devices   []string
	// resolvConf, when set, is bound read-only over /etc/resolv.conf.
	resolvConf string
	// identity is who session code is in the sandbox; zero: the
	// worker's (or the run-as user's) ids.
	identity sandbox.Identity
}

// args are bwrap's arguments for the sandbox, given with --args (they hold
// the connect token), before `--` and the command.
//
// After the system directories, the binds are made parents first (by the
// depth of their destination, in the order below when equal), so none
// hides another: private /tmp and HOME, the display's sockets, the
// workspace (over a HOME that is the workspace), the extra binds, then
// what must show even inside a hidden directory (the browser, the CA
// file, the git mirrors, the remote's executable, the state dir). Each
// bind that would show a hidden path is followed by a mask over it.
func (s sandboxSpec) args() []string {
	l := sandbox.NewLayout(s.hide...).System().ProcDev()
	for _, d := range s.devices {
		l.DevBind(d)
	}
	if len(s.devices) > 0 {
		l.Bind(sandbox.Bind{Src: "/sys", Dest: "/sys", ReadOnly: true}) // GPU libraries read it
	}
	binds := []sandbox.Bind{
		{Src: filepath.Join(s.stateDir, "tmp"), Dest: "/tmp"},
		{Src: filepath.Join(s.stateDir, "home"), Dest: s.home},
	}
	if envValue(s.env, "DISPLAY") != "" && isDir("/tmp/.X11-unix") {
		binds = append(binds, sandbox.Bind{Src: "/tmp/.X11-unix", Dest: "/tmp/.X11-unix", ReadOnly: true})
	}
	binds = append(binds, sandbox.Bind{Src: s.workspace, Dest: s.workspace})
	binds = append(binds, s.binds...)
	if s.chrome != "" && !sandbox.InSystemDirs(s.chrome) {
		if real, err := filepath.EvalSymlinks(s.chrome); err == nil {
			// Chrome finds its files next to its real path.
			binds = append(binds, sandbox.Bind{Src: filepath.Dir(real), Dest: filepath.Dir(real), ReadOnly: true})
			if real != s.chrome {
				binds = append(binds, sandbox.Bind{Src: real, Dest: s.chrome, ReadOnly: true})
			}
		}
	}
	// A CA bundle the remote is told to trust is bound read-only.
	for _, k := range []string{"XAUTHORITY", tlsconfig.EnvCAFile} {
		if p := envValue(s.env, k); filepath.IsAbs(p) && isFile(p) {
			binds = append(binds, sandbox.Bind{Src: p, Dest: p, ReadOnly: true})
		}
	}
	// The git mirrors directory is bound read-only: only the worker,
	// outside the sandbox, writes mirrors.
	if p := envValue(s.env, api.EnvGitMirrors.Name); filepath.IsAbs(p) && isDir(p) {
		binds = append(binds, sandbox.Bind{Src: p, Dest: p, ReadOnly: true})
	}
	if !sandbox.InSystemDirs(s.remote) {
		binds = append(binds, sandbox.Bind{Src: s.remote, Dest: s.remote, ReadOnly: true})
	}
	if s.then != "" && s.then != s.remote && !sandbox.InSystemDirs(s.then) {
		binds = append(binds, sandbox.Bind{Src: s.then, Dest: s.then, ReadOnly: true})
	}
	binds = append(binds, sandbox.Bind{Src: s.stateDir, Dest: s.stateDir})
	if s.resolvConf != "" {
		binds = append(binds, sandbox.Bind{Src: s.resolvConf, Dest: "/etc/resolv.conf", ReadOnly: true})
	}
	binds = append(binds, s.identity.Binds...)
	slices.SortStableFunc(binds, func(a, b sandbox.Bind) int { return depth(a.Dest) - depth(b.Dest) })
	for _, b := range binds {
		l.Bind(b)
	}
	args := append(sandbox.NamespaceArgs(s.hostname), s.identity.Args...)
	args = append(args, l.Args()...)
	args = append(args, "--remount-ro", "/", "--chdir", s.workspace)
	env := setEnv(s.env, "HOME="+s.home, "TMPDIR=/tmp")
	if s.identity.User != "" {
		env = setEnv(env, "USER="+s.identity.User, "LOGNAME="+s.identity.User)
	}
	return append(args, sandbox.EnvArgs(env)...)
}

// depth is how many directories deep path is ("/" is 0).
func depth(path string) int {
	path = filepath.Clean(path)
	if path == "/" {
		return 0
	}
	return strings.Count(path, "/")
}

// gpuDevices lists the host's GPU device nodes (NVIDIA, DRI, AMD's KFD),
// which sandboxes see so that sessions keep their GPUs.
func gpuDevices() []string {
	var out []string
	nv, _ := filepath.Glob("/dev/nvidia*")
	for _, p := range append(nv, "/dev/dri", "/dev/kfd") {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// setEnv sets each KEY=VALUE of kvs in env, replacing any earlier value.
func setEnv(env []string, kvs ...string) []string {
	out := slices.Clone(env)
	for _, kv := range kvs {
		k, _, _ := strings.Cut(kv, "=")
		out = slices.DeleteFunc(out, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		out = append(out, kv)
	}
	return out
}

// envValue is the value of k in env, or "".
func envValue(env []string, k string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, k+"="); ok {
			return v
		}
	}
	return ""
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// name is the mode's name.
func (iso *isolation) name() string {
	if iso == nil {
		return string(IsolationNone)
	}
	return string(iso.mode)
}
