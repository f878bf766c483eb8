// Package worker serves the sessions of one outpost on this machine: it
// lists and watches the outpost's queue, claims one pending session at a
// time, runs `outpost remote serve` for it under the spawn contract, renews
// the claim while the remote runs, and releases it when the session ends.
//
// Run is the whole worker; `outpost worker start` and `outpost up` call it.
// With a connect token of a claim made elsewhere it serves just that
// session instead, without calling the API (direct-serve mode, direct.go).
package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/dist"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/internal/machine"
)

// Defaults of Options fields left zero.
const (
	DefaultPollInterval = 5 * time.Second
	DefaultGracePeriod  = 30 * time.Second
)

// Options configure a worker.
type Options struct {
	// Labels are what the operator says about the machine (valid as
	// api.ValidateLabels checks them), reported in heartbeats and matched
	// by sessions' requirements.labels; nil for none.
	Labels map[string]string
	// Client talks to the Outpost server with a token of the outposts.machine
	// scope. Required, except in direct-serve mode. The token never reaches
	// the remote.
	Client *client.Client
	// Outpost is the name or id of the outpost to serve. It may be empty only
	// when SessionID is set; the session's outpost is used then.
	Outpost string
	// SessionID, when set, makes the worker claim and serve just this session
	// and then return.
	SessionID string
	// ConnectToken, when set, selects direct-serve mode: someone else (an
	// orchestrator, the Kubernetes operator) has claimed SessionID
	// (required) and handed over the claim's connect token and GatewayURL
	// (required). The worker then serves that session without calling the
	// API at all: no Client, no claim, renewal, release or heartbeats; the
	// claimer keeps the claim. Outpost, AcceptorID, Once, PollInterval and
	// HeartbeatInterval are unused. See Run.
	ConnectToken string
	// GatewayURL is the gateway the remote dials when a claim answer has
	// none; in direct-serve mode, the claim's gateway.
	GatewayURL string
	// AcceptorID identifies this worker in claims. Empty means the id saved in
	// DataDir/acceptor-id, generated on first use. Never share one between
	// workers: Run refuses one that another live process announces (see
	// ErrAcceptorInUse), except with SessionID, where the worker serves a
	// session claimed under this id by someone else (an orchestrator).
	AcceptorID string
	// Dir is the workspace the remote runs in; session repositories live in
	// Dir/repos. Empty means the current directory. Before a session starts
	// where another one ran, the workspace is cleared (workspace.go) unless
	// KeepWorkspace or SessionID is set: a worker serving one session
	// takes Dir as its orchestrator prepared it.
	Dir string
	// KeepWorkspace keeps what sessions leave in Dir between sessions.
	KeepWorkspace bool
	// DataDir holds the worker's acceptor-id file, its lock (one running
	// worker per data dir, see ErrDataDirInUse), the record of its
	// workspace and a state directory per session (DataDir/sessions/<id>,
	// deleted once the session leaves the machine: statedir.go).
	// Empty means WorkspaceDataDir of the home directory and Dir.
	DataDir string
	// Once makes the worker return after serving one session.
	Once bool
	// PollInterval is how often the queue is listed while watching it is not
	// possible. Zero means DefaultPollInterval.
	PollInterval time.Duration
	// GracePeriod is how long a running remote may go on after ctx ends
	// before it is killed. Zero means DefaultGracePeriod.
	GracePeriod time.Duration
	// CAFile is the PEM file of extra CA certificates the worker's client
	// trusts; its remotes get it as OUTPOST_CA_FILE. Empty means the
	// worker's own OUTPOST_CA_FILE, if any, is passed on.
	CAFile string
	// RemoteCommand starts this build's remote; the spawn contract's
	// variables are its only environment. Empty means [this executable,
	// "remote", "serve"]. A session that pins another build runs that
	// build, downloaded from StaticBaseURL, instead (see RemoteBinarySHA).
	RemoteCommand []string
	// PrestartCommand starts a remote of RemoteCommand's build that waits
	// for its session's spawn variables on its standard input (this
	// build's `outpost remote serve --session-from-stdin`): an idle worker
	// keeps one started, so a claimed session does not wait for the
	// remote's start-up (prestart.go). Empty means this executable's when
	// RemoteCommand is empty, else no remote is pre-started.
	PrestartCommand []string
	// HandoverCommand starts a remote of RemoteCommand's build that reads
	// its session's spawn variables from its standard input, like
	// PrestartCommand: a session that runs RemoteCommand but gets no
	// pre-started remote (NoPrestart, Once, a state dir of an earlier
	// remote) runs it, so that its connect token is never in the remote's
	// initial environment nor in bwrap's arguments and memory, where the
	// session's code could read it. Empty means this executable's when
	// RemoteCommand is empty, else the variables go in the environment.
	HandoverCommand []string
	// NoPrestart starts every remote at claim time.
	NoPrestart bool
	// StaticBaseURL is where remote builds are published in the /dist/
	// layout (latest_<platform>, devin-remote_<id>_<platform>, .sha256).
	// Empty means the server's <server>/dist/: in direct-serve, ServerURL's,
	// else the gateway's server's, and only for a pinned session.
	StaticBaseURL string
	// CacheDir holds downloaded remote builds. Empty means DataDir/cache.
	CacheDir string
	// RemoteBinarySHA is the remote build run for sessions whose queue
	// entry pins none; empty means the latest published one. A build that
	// is this one runs RemoteCommand. In direct-serve, where the worker
	// reads no queue entry, it is the session's pin as its claimer passed
	// it (the public contract's DEVIN_WORKER_REMOTE_SHA); empty means the
	// worker asks the gateway's server for the pin with the connect token.
	RemoteBinarySHA string
	// ServerURL is the server's URL in direct-serve, where there is no
	// Client (the public worker's --api-url), when it was given: a pinned
	// build is downloaded from its /dist/ unless StaticBaseURL is set.
	// Empty means the gateway's server.
	ServerURL string
	// Logger receives the worker's log. Nil discards it.
	Logger *slog.Logger
	// Stdout, when set, receives the remote's output lines prefixed with the
	// session id; otherwise they go to Logger. They are always written to
	// the session's remote.log too.
	Stdout io.Writer
	// HeartbeatInterval is how often the worker announces itself to the
	// server (connected workers are listed on the outpost). Zero means the
	// interval the server asks for, api.WorkerHeartbeatInterval by default.
	HeartbeatInterval time.Duration
	// Clock paces the waits of the worker's queue consumer and presence:
	// heartbeats, queue polls, claim renewals and retries, and the wait
	// for a session's status after its remote exits. Nil is the real
	// clock; tests drive a fake one instead of waiting.
	Clock clockwork.Clock
	// Isolation keeps session code away from the worker's credentials
	// (isolate.go). Its zero value runs remotes as the worker's own user.
	Isolation IsolationOptions
	// Desktop says whether sessions get a desktop (desktop.go); "" is
	// DesktopAuto: a virtual one when Xvfb is installed.
	Desktop DesktopMode
}

// ErrPlatformMismatch is returned by Run when the outpost's platform is not
// this machine's.
var ErrPlatformMismatch = errors.New("outpost platform does not match this machine")

// platformError says which platforms differ; it matches ErrPlatformMismatch.
type platformError struct{ outpost, want, have string }

func (e *platformError) Error() string {
	return fmt.Sprintf("outpost %q serves %s sessions but this machine runs %s: start the worker on a %s machine or use an outpost created with --platform %s",
		e.outpost, e.want, e.have, e.want, e.have)
}

func (e *platformError) Unwrap() error { return ErrPlatformMismatch }

// ErrAcceptorInUse is returned by Run when another live process holds the
// worker's acceptor id.
var ErrAcceptorInUse = fleet.ErrAcceptorInUse

// ErrDataDirInUse is returned by Run when another running worker holds the
// data dir.
var ErrDataDirInUse = fleet.ErrDataDirInUse

// worker is one running worker, the fleet.Runner of a consumer of capacity
// 1; its fields are set once by newWorker.
type worker struct {
	opts     Options
	c        *client.Client
	log      *slog.Logger
	outpost  api.Outpost
	platform string // this machine's platform, e.g. api.PlatformLinux
	id       *fleet.Identity
	caps     string // detected capabilities (JSON), passed to remotes
	desktop  desktopKind
	info     api.WorkerInfo
	remotes  *dist.Resolver // the remote build of each session
	iso      *isolation
	ws       *workspace  // nil in direct-serve mode
	pre      *prestarter // the pre-started remote; nil: none
	mirrors  *mirrorer   // updates the git mirrors after sessions; nil: none
	// netErr is why the worker cannot enforce network policies (nil: it
	// can), found at start; netBroken, when set, why enforcement failed
	// since.
	netErr    error
	netBroken atomic.Pointer[error]
}

// Run serves sessions until ctx ends (a clean exit: nil), or, with Once or
// SessionID, until one session has been served. When ctx ends while a
// session runs, its remote gets GracePeriod to finish before it is killed,
// and the claim is released regardless.
//
// With ConnectToken set, Run serves SessionID in direct-serve mode instead
// (see ServeDirect).
func Run(ctx context.Context, opts Options) error {
	if opts.ConnectToken != "" {
		return ServeDirect(ctx, opts)
	}
	if opts.Client == nil {
		return errors.New("worker: Options.Client is required")
	}
	if opts.Outpost == "" && opts.SessionID == "" {
		return errors.New("an outpost is required: pass --outpost NAME-OR-ID")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	id, err := openIdentity(opts)
	if err != nil {
		return err
	}
	defer id.Close()
	ws, err := openWorkspace(opts)
	if err != nil {
		return err
	}
	defer ws.close()
	w, err := newWorker(ctx, opts, id)
	if err != nil {
		if isCanceled(ctx, err) {
			return nil
		}
		return err
	}
	w.ws = ws
	w.sweepStateDirs(ctx, "", true)
	w.mirrors.start(ctx)
	defer w.mirrors.close()
	c := w.consumer()
	if opts.SessionID != "" {
		return c.Serve(ctx, opts.SessionID)
	}
	if len(opts.PrestartCommand) > 0 && canPrestart {
		w.pre = newPrestarter(w, opts.PrestartCommand, opts.RemoteCommand)
		defer w.pre.close()
		w.pre.fill() // before the first claim, which it then serves
	}
	return c.Run(ctx)
}

// openIdentity locks the data dir and loads the acceptor id. A worker
// serving one session under an acceptor id it was given (its
// orchestrator's) shares that id by design; any other holds its id alone.
func openIdentity(opts Options) (*fleet.Identity, error) {
	return fleet.OpenIdentity(fleet.IdentityOptions{
		Dir: opts.DataDir, DirName: "worker data dir", Kind: api.WorkerKindWorker,
		AcceptorID: opts.AcceptorID, Shared: opts.SessionID != "" && opts.AcceptorID != "",
		DirHint: "Run this worker in a directory of its own (each workspace gets its own data dir), or give it another with --data-dir DIR",
		Hint:    "Give this worker its own --acceptor-id (or none: each workspace gets its own), or stop the other one",
	})
}

// consumer is the worker's fleet consumer: capacity 1, a local remote.
func (w *worker) consumer() *fleet.Consumer {
	info := w.info
	info.Instance = w.id.Instance
	return &fleet.Consumer{
		Client:   w.c,
		Outpost:  w.outpost,
		Platform: w.platform,
		Identity: w.id,
		Capacity: 1,
		Machine:  &api.ClaimMachine{Capabilities: w.info.Capabilities, Labels: w.info.Labels},
		Runner:   w,
		// A worker's remotes end with it (bwrap dies with its parent, and a
		// remote outside bwrap dies with the worker too): what its
		// acceptor id holds as it starts, its dead predecessor held.
		HandBack:  true,
		WatchHeld: true,
		Presence:  fleet.NewPresence(w.c, w.outpost.Metadata.OutpostID, w.id.AcceptorID, info, w.opts.HeartbeatInterval, w.opts.Clock, w.log),
		Resolver:  w.remotes,
		// Restricted sessions only where the worker enforces them.
		NetworkEnforcement: w.networkEnforcement,
		// The sessions of an outpost whose desktop is enabled only where
		// the worker gives one.
		Desktop:       w.desktop != desktopNone,
		RemoteCommand: w.opts.RemoteCommand,
		GatewayURL:    w.opts.GatewayURL,
		CAFile:        w.opts.CAFile,
		PollInterval:  w.opts.PollInterval,
		Clock:         w.opts.Clock,
		Logger:        w.log,
	}
}

func newWorker(ctx context.Context, opts Options, id *fleet.Identity) (*worker, error) {
	w := &worker{opts: opts, c: opts.Client, log: opts.Logger, platform: HostPlatform(), id: id}
	var err error
	if w.remotes, err = newResolver(opts); err != nil {
		return nil, err
	}

	outpost := opts.Outpost
	if outpost == "" {
		e, err := w.c.Queue.Get(ctx, opts.SessionID)
		if err != nil {
			return nil, fmt.Errorf("look up session %s in the queue: %w", opts.SessionID, err)
		}
		outpost = e.Metadata.OutpostID
	}
	o, err := w.c.Outposts.Get(ctx, outpost)
	if err != nil {
		return nil, fmt.Errorf("look up outpost %q: %w", outpost, err)
	}
	w.outpost = *o
	if p := fleet.OutpostPlatform(o); p != w.platform {
		return nil, &platformError{outpost: o.Spec.Name, want: p, have: w.platform}
	}
	if err := w.setupDesktop(); err != nil {
		return nil, err
	}
	if d := o.Spec.Desktop; d != nil && d.Enabled && w.desktop == desktopNone {
		w.log.Warn("the outpost gives its sessions a desktop and this worker gives none: it is never handed the outpost's sessions (install Xvfb, or start it with --desktop auto or on)",
			"outpost", o.Spec.Name)
	}
	caps, err := w.detect(ctx)
	if err != nil {
		return nil, err
	}
	if caps, err = w.setupIsolation(ctx, caps); err != nil {
		return nil, err
	}
	w.netErr = w.checkNetwork(ctx)
	caps.NetworkPolicy = w.netErr == nil
	if w.netErr != nil {
		w.log.Info("sessions with a network policy are left to other workers", "reason", w.netErr)
	} else {
		w.log.Info("network policies are enforced: restricted sessions run in a network namespace of their own")
	}
	w.logChecks(ctx, caps)
	w.info = api.WorkerInfo{Kind: api.WorkerKindWorker, Hostname: caps.Hostname, Version: machine.Version,
		Capabilities: &caps, MaxSessions: 1, PID: os.Getpid(), Labels: opts.Labels}
	if w.iso != nil {
		w.info.Isolation = string(w.iso.mode)
	}
	w.log.Info("worker ready", "outpost", o.Spec.Name, "outpost_id", o.Metadata.OutpostID,
		"platform", w.platform, "acceptor_id", id.AcceptorID, "dir", opts.Dir)
	return w, nil
}

// withDefaults fills in the zero fields both modes use.
func (opts Options) withDefaults() (Options, error) {
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.GracePeriod <= 0 {
		opts.GracePeriod = DefaultGracePeriod
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	var err error
	if opts.Dir == "" {
		if opts.Dir, err = os.Getwd(); err != nil {
			return opts, fmt.Errorf("find the working directory: %w", err)
		}
	}
	if opts.Dir, err = filepath.Abs(opts.Dir); err != nil {
		return opts, err
	}
	if opts.DataDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return opts, fmt.Errorf("find the home directory for the worker data dir (set --data-dir): %w", err)
		}
		if opts.DataDir, err = WorkspaceDataDir(home, opts.Dir); err != nil {
			return opts, err
		}
	}
	// The remote runs in Dir, so its state dir must not be relative.
	if opts.DataDir, err = filepath.Abs(opts.DataDir); err != nil {
		return opts, err
	}
	if opts.CAFile != "" {
		if opts.CAFile, err = filepath.Abs(opts.CAFile); err != nil {
			return opts, err
		}
	}
	// Nor the path of a downloaded build: it is checked here and started
	// in Dir.
	if opts.CacheDir != "" {
		if opts.CacheDir, err = filepath.Abs(opts.CacheDir); err != nil {
			return opts, err
		}
	}
	if len(opts.RemoteCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return opts, fmt.Errorf("find the outpost executable to start remotes with: %w", err)
		}
		opts.RemoteCommand = []string{exe, "remote", "serve"}
		if len(opts.PrestartCommand) == 0 {
			opts.PrestartCommand = []string{exe, "remote", "serve", "--session-from-stdin"}
		}
		if len(opts.HandoverCommand) == 0 {
			opts.HandoverCommand = []string{exe, "remote", "serve", "--session-from-stdin"}
		}
	}
	if opts.NoPrestart {
		opts.PrestartCommand = nil
	}
	return opts, nil
}

// detect checks whether git is there and detects the machine's
// capabilities, which the worker passes to its remotes. A machine without
// git (a fresh Windows machine has none) still serves sessions that need no
// repository; the ones that do fail with git's absence as their reason.
func (w *worker) detect(ctx context.Context) (api.Capabilities, error) {
	if err := machine.RequireGit(ctx); err != nil {
		w.log.Warn("sessions that need a repository will fail on this machine", "err", err)
	}
	caps := machine.Detect(ctx)
	caps.DiskFreeBytes = machine.DiskFreeBytes(w.opts.Dir)
	caps.Desktop = w.desktop != desktopNone
	if !caps.Desktop {
		caps.Tools = slices.DeleteFunc(caps.Tools, func(t string) bool { return t == api.ToolComputer })
	}
	if b, err := json.Marshal(caps); err == nil {
		w.caps = string(b)
	}
	w.log.Info("machine detected", "os", caps.OS, "arch", caps.Arch, "cpus", caps.CPUs,
		"git", caps.Git, "ffmpeg", orNone(caps.FFmpeg), "chrome", orNone(caps.ChromePath), "chrome_version", orNone(caps.ChromeVersion),
		"passwordless_sudo", caps.PasswordlessSudo)
	return caps, nil
}

// HostPlatform returns this machine's outpost platform: "linux", "macos" or
// "windows" (other systems report runtime.GOOS).
func HostPlatform() string {
	if runtime.GOOS == "darwin" {
		return api.PlatformMacOS
	}
	return runtime.GOOS
}

// WorkspaceDataDir returns the default data dir of a worker whose
// workspace is dir: home/.outpost/worker/<name>-<hash>, where name is the
// workspace's base name and hash the first 8 hex digits of the SHA-256 of
// its absolute path, symbolic links resolved. Each workspace so has a data
// dir, and with it an acceptor id, of its own.
func WorkspaceDataDir(home, dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("find the workspace's absolute path: %w", err)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	sum := sha256.Sum256([]byte(abs))
	name := fleet.Label(filepath.Base(abs))
	if len(name) > 40 {
		name = strings.Trim(name[:40], "-")
	}
	if name == "" {
		name = "workspace"
	}
	return filepath.Join(home, ".outpost", "worker", name+"-"+hex.EncodeToString(sum[:4])), nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// isCanceled reports whether err is only the end of ctx, which is a clean
// exit rather than a failure.
func isCanceled(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, ctx.Err()))
}
