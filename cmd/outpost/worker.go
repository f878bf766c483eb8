package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/procguard"
	"github.com/outpost-sh/outpost/internal/worker"
)

// WorkerStartOptions are the settings of `outpost worker start`.
type WorkerStartOptions struct {
	f *Factory
	// fl is the command's flags, for the checks that ask which were
	// given.
	fl *pflag.FlagSet
	// Options are the worker's settings as workerStartSettings fill them, but
	// the client, logger, output and CA file, which runWorkerStart adds.
	// ConnectToken comes from the environment only (api.EnvSessionToken)
	// and selects direct-serve mode for SessionID; Isolation.RunAs and
	// RunAsHome are flags, the rest of Isolation follows from the
	// isolation flags.
	worker.Options
	LogLevel  string
	LogFormat string
	// LogFile is where the log goes instead of standard error (a Windows
	// service has none); "" means standard error.
	LogFile string
	// ConfigFile is the YAML file of settings (--config); "" means none.
	ConfigFile string
	// overridden lists the file's keys the environment replaced.
	overridden []string
	// PTYBridgePort is accepted for the public worker's sake and ignored.
	PTYBridgePort string
	// IsolationMode is --isolation, parsed into Isolation.Mode; the binds
	// are parsed into Isolation.Binds.
	IsolationMode string
	// DesktopMode is --desktop, parsed into Desktop.
	DesktopMode string
	// LabelSpecs are --label's KEY=VALUE, parsed into Labels.
	LabelSpecs   []string
	BwrapBinds   []string
	BwrapROBinds []string

	pollIntervalSecs int
	// pool is --pool, the deprecated spelling of --outpost.
	pool string
	// legacyAcceptorFile is the acceptor id file of the single data dir
	// older versions used by default, when it exists and the default data
	// dir is in use.
	legacyAcceptorFile string
}

// NewCmdWorker returns `outpost worker`. runF replaces the run of `worker
// start` in tests.
func NewCmdWorker(f *Factory, runF func(context.Context, *WorkerStartOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Serve an outpost's sessions on this machine",
	}
	cmd.AddCommand(NewCmdWorkerStart(f, runF), newCmdWorkerOutpost(f), NewCmdWorkerInstall(f, nil), NewCmdWorkerUninstall(f, nil))
	return cmd
}

// NewCmdWorkerStart returns `outpost worker start`. runF replaces the run in
// tests.
func NewCmdWorkerStart(f *Factory, runF func(context.Context, *WorkerStartOptions) error) *cobra.Command {
	opts := &WorkerStartOptions{f: f}
	cmd := &cobra.Command{
		Use:   "start --outpost NAME-OR-ID",
		Short: "Claim and serve sessions from an outpost's queue",
		Long: `Watch an outpost's queue, claim one pending session at a time and serve it
with 'outpost remote serve' started in the workspace directory (--dir; session
repositories live in its repos/ subdirectory). The remote gets only the
session's connect token, never the worker's API token.

The token needs the outposts.machine scope; give it in OUTPOST_TOKEN or in
a file (--token-file, OUTPOST_TOKEN_FILE) rather than with --token, which
puts it on the command line for every local user to read. On SIGINT or
SIGTERM the worker stops claiming, gives the running session --grace-period
to finish, then releases its claim so the session goes back to the queue.

Without a token (none given, no saved login) the worker registers by
approval: it prints a URL and "code: XXXX-XXXX", a person signed in to the
web UI approves, and it receives an outposts.machine token limited to
--outpost, which it keeps in its data dir (machine-token.json, mode 0600)
for later starts, then serves.

One worker per workspace: each workspace gets its own data dir by default
(~/.outpost/worker/<name>-<hash of the workspace path>), holding the
worker's acceptor id, and a worker holds its data dir locked while it runs,
so a second worker on the same one refuses to start. Two workers must never
share an acceptor id: one given with --acceptor-id that a live worker
already uses is refused too.

Before a session starts in a workspace where another session ran, the
worker clears it: every file outside repos/ is deleted and each repository
under repos/ is reset to a clean checkout with no local branches, tags,
stashes, hooks or configuration of its own, so only its object store stays
as a cache. A workspace holding files when the worker first uses it is
refused (start the worker in an empty directory); --keep-workspace keeps
everything between sessions instead. A worker started for one session
(--session) serves in its directory as it finds it (the repositories,
checkpoints and dotfiles its orchestrator prepared) and never clears it.

Session isolation (--isolation, env OUTPOST_WORKER_ISOLATION): session code
must not read the worker's token. bwrap runs each remote in a bubblewrap
sandbox (its own processes only; the workspace and the session's state dir
read-write; the system directories read-only; no data dir, config or home of
the worker; no sudo). user runs it as another Unix user (--run-as USER; the
worker runs as root). none runs it as the worker's own user, which can read
the worker's token. auto, the default, is bwrap when bubblewrap works here,
else user when --run-as is given, else none with a warning. Add sandbox binds
with --bwrap-bind and --bwrap-ro-bind SRC[:DEST] (repeatable).

Desktop (--desktop, env OUTPOST_WORKER_DESKTOP): with auto, the default, and
Xvfb installed, each session gets a virtual X display of its own (at its
spec.desktop size, default 1280x800, with a light window manager when one is
installed), started on first use and stopped with the session; its programs
find it in $DISPLAY, the computer tool drives it and record_start records it.
on also falls back to the worker's own $DISPLAY when Xvfb is missing (the
agent then drives that screen), and refuses to start without either. off
gives sessions none. A worker whose own environment sets OUTPOST_DESKTOP=true
and DISPLAY gives its sessions that display instead (unless off). Sessions
see the choice as capabilities.desktop.

Each environment variable also answers to the public Outposts contract's
name (DEVIN_...); the OUTPOST_ name wins when both are set, and a flag wins
over both:

` + envHelp(api.WorkerEnv) + `  ` + envLogLevel.Name + `, ` + envLogFormat.Name + `
      --log-level, --log-format

--config FILE reads settings from a YAML file whose keys are the flags'
names (outpost: gpu-h200, isolation: bwrap, bwrap-ro-bind: [/srv/git]); a
flag given beats its environment variable, which beats the file. Sessions
never see the file, nor /etc/outpost. 'outpost worker install' writes one
and a systemd unit that uses it (docs/production.md).

--api-url is --server (give the origin only: https://outpost.example.com),
--poll-interval-secs N is --poll-interval Ns, and --pty-bridge-port is
accepted and ignored (Outpost has no PTY bridge).

Direct-serve: with a claim's connect token in DEVIN_REMOTE_SESSION_TOKEN (or
OUTPOST_CONNECT_TOKEN) and its gateway URL in DEVIN_OUTPOST_GATEWAY_URL (or
OUTPOST_GATEWAY_URL, --gateway-url), 'worker start --session ID' serves just
that session without any API token and without calling the API: whoever
claimed it keeps claiming, renewing and releasing. It exits 0 when the
session ends or sleeps. It runs the remote build the session pins: the one
its claimer passes in DEVIN_WORKER_REMOTE_SHA, else the one the gateway's
server answers the connect token; a pinned build comes from
--static-base-url, else the /dist/ of --server (DEVIN_API_URL) when given,
else of the gateway's server, and one that cannot be downloaded or does not
match its SHA-256 starts nothing. Its data dir defaults to the parent of
DEVIN_WORKER_CACHE_DIR (or OUTPOST_WORKER_CACHE_DIR) when that is set.

Each session runs the remote build its queue entry pins
(spec.remote_binary_sha), else --remote-binary-sha, else the latest one
published at --static-base-url (the server's /dist/). A build other than this
one is downloaded into --cache-dir, checked against its published SHA-256 and
run as 'devin-remote serve'; a mismatch or a pin that cannot be downloaded
stops the worker with an error, and the session goes back to the queue. When
nothing is pinned and the latest build cannot be read, this build serves.`,
		Example: `  outpost worker start --outpost dev
  cd ~/work && OUTPOST_TOKEN=... outpost worker start --outpost gpu-h200 --server https://outpost.example.com
  outpost worker start --outpost dev --session ses_123 --acceptor-id orchestrator-7
  outpost worker start --outpost dev --isolation bwrap --bwrap-ro-bind /srv/git
  sudo outpost worker start --outpost dev --isolation user --run-as outpost-session --dir /srv/outpost/work
  DEVIN_REMOTE_SESSION_TOKEN=... DEVIN_OUTPOST_GATEWAY_URL=wss://outpost.example.com/v1/gateway \
    outpost worker start --session ses_123
  outpost worker start --outpost dev --remote-binary-sha 1a2b3c4d5e6f --cache-dir /var/cache/outpost
  outpost worker start --config /etc/outpost/worker-gpu-h200.yaml --log-format json`,
		Args: exactArgs(0, ""),
		RunE: runWithSettings(opts, &opts.ConfigFile, &opts.overridden, func(fl *pflag.FlagSet) error { return opts.resolve(fl, f) },
			runF, runWorkerStart),
	}
	fl := cmd.Flags()
	addSettings(fl, workerStartSettings, opts)
	// --pool is the public CLI's older spelling of --outpost, which
	// published orchestrators still pass; resolve warns when it is used.
	fl.StringVar(&opts.pool, "pool", "", "deprecated spelling of --outpost")
	_ = fl.MarkHidden("pool")
	addLogFlags(fl, &opts.LogLevel, &opts.LogFormat)
	fl.StringVar(&opts.LogFile, "log-file", "", "append the log to this file instead of standard error (a Windows service without it logs to the Event Log)")
	addConfigFlag(fl, &opts.ConfigFile)
	fl.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		switch name {
		case "session-id":
			name = "session"
		case "api-url":
			name = "server"
		}
		return pflag.NormalizedName(name)
	})
	return cmd
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// envHelp lists variables for --help: their names, then their meaning.
func envHelp(vars []api.EnvVar) string {
	var b strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&b, "  %s\n      %s\n", strings.Join(v.Names(), ", "), v.Meaning)
	}
	return b.String()
}

// resolve applies environment fallbacks and defaults and checks the
// settings.
func (o *WorkerStartOptions) resolve(fl *pflag.FlagSet, f *Factory) error {
	if err := o.resolvePool(fl, f); err != nil {
		return err
	}
	o.fl = fl
	if err := resolveSettings(workerStartSettings, o, o, fl, f.Getenv); err != nil {
		return err
	}
	return resolveLog(fl, f.Getenv, &o.LogLevel, &o.LogFormat)
}

// resolvePool takes --pool, the deprecated spelling of --outpost, as
// --outpost, with a warning that names the new spelling.
func (o *WorkerStartOptions) resolvePool(fl *pflag.FlagSet, f *Factory) error {
	if !fl.Changed("pool") {
		return nil
	}
	if fl.Changed("outpost") && o.Outpost != o.pool {
		return usageErrorf("--pool is the old spelling of --outpost: give one of them, not both")
	}
	fmt.Fprintln(f.IO.ErrOut, "warning: --pool is deprecated; use --outpost instead")
	// Set as if given on the command line, so that it beats the
	// environment and the config file as --outpost does.
	return fl.Set("outpost", o.pool)
}

func runWorkerStart(ctx context.Context, o *WorkerStartOptions) error {
	f := o.f
	logOut := f.IO.ErrOut
	if o.LogFile != "" {
		lf, err := os.OpenFile(o.LogFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return fmt.Errorf("open the log file: %w", err)
		}
		defer lf.Close()
		logOut = lf
	}
	log := newLogger(logOut, o.LogLevel, o.LogFormat)
	warnOverridden(log, o.ConfigFile, o.overridden)
	if o.legacyAcceptorFile != "" {
		log.Info("each workspace now has its own worker data dir and acceptor id; the one older versions shared is no longer used",
			"data_dir", o.DataDir, "unused", o.legacyAcceptorFile)
	}
	if o.PTYBridgePort != "" {
		log.Debug("ignoring the PTY bridge port: Outpost has no PTY bridge", "pty_bridge_port", o.PTYBridgePort)
	}
	// TLS: the global --ca-file (or OUTPOST_CA_FILE) reaches the remotes.
	caFile, err := f.TrustedCAFile()
	if err != nil {
		return err
	}
	opts := o.Options
	opts.CAFile, opts.Logger, opts.Stdout = caFile, log, f.IO.Out
	if o.ConnectToken != "" {
		// Direct-serve: no API client, no account token. The connect token
		// goes to the remote alone, so no program this process runs (the
		// capability probes) may inherit it.
		procguard.ScrubEnv(append(append(api.EnvSessionToken.Names(), api.EnvConnectToken.Names()...), tokenEnv...)...)
	} else {
		if err := o.registerByApproval(ctx, log); err != nil {
			return err
		}
		c, err := f.guardedClient()
		if err != nil {
			return err
		}
		opts.Client = c
	}
	// The remote and the agent's commands run as this user: keep them out
	// of this process's memory, where the API or connect token is.
	if err := procguard.NotDumpable(); err != nil {
		log.Warn("cannot mark the worker not dumpable", "err", err)
	}
	return worker.Run(ctx, opts)
}

// newCmdWorkerOutpost returns `outpost worker outpost`, the fleet-style
// spelling of outpost create and delete.
func newCmdWorkerOutpost(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outpost",
		Short: "Create or delete an outpost (orchestrator scope)",
	}
	create := NewCmdOutpostsCreate(f, nil)
	create.Example = `  outpost worker outpost create gpu-h200 --platform linux --description "H200 boxes"`
	del := NewCmdOutpostsDelete(f, nil)
	del.Example = `  outpost worker outpost delete gpu-h200
  outpost worker outpost delete outpost_env-123 --force`
	cmd.AddCommand(create, del)
	return cmd
}

// platformHelp lists the platforms for flag help.
var platformHelp = fmt.Sprintf("%s, %s or %s (default %s)", api.PlatformLinux, api.PlatformMacOS, api.PlatformWindows, api.PlatformLinux)
