package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/procguard"
	"github.com/outpost-sh/outpost/internal/sandbox"
	"github.com/outpost-sh/outpost/internal/worker"
)

// WorkerStartOptions are the settings of `outpost worker start`.
type WorkerStartOptions struct {
	f            *Factory
	Outpost      string
	SessionID    string
	AcceptorID   string
	Once         bool
	Dir          string
	DataDir      string
	GatewayURL   string
	PollInterval time.Duration
	GracePeriod  time.Duration
	LogLevel     string
	// KeepWorkspace turns off the clearing of the workspace between
	// sessions.
	KeepWorkspace bool
	// NoPrestart starts each remote at claim time instead of keeping one
	// pre-started while idle.
	NoPrestart bool
	LogFormat  string
	// ConfigFile is the YAML file of settings (--config); "" means none.
	ConfigFile string
	// overridden lists the file's keys the environment replaced.
	overridden []string
	// ConnectToken, from the environment only (api.EnvSessionToken), selects
	// direct-serve mode for SessionID.
	ConnectToken string
	// PTYBridgePort is accepted for the public worker's sake and ignored.
	PTYBridgePort string
	// Isolation is how session code is kept from the worker's credentials
	// (worker.Isolation); RunAs, RunAsHome and the binds refine it.
	Isolation    string
	RunAs        string
	RunAsHome    string
	BwrapBinds   []string
	BwrapROBinds []string

	isolation worker.IsolationOptions

	pollIntervalSecs int
	// pool is --pool, the deprecated spelling of --outpost.
	pool string
	// StaticBaseURL, CacheDir and RemoteBinarySHA say which remote build
	// serves a session and where it is downloaded from and kept.
	StaticBaseURL   string
	CacheDir        string
	RemoteBinarySHA string
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
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := applyConfigFile(cmd.Flags(), opts.ConfigFile); err != nil {
				return err
			}
			if err := opts.resolve(cmd.Flags(), f); err != nil {
				return err
			}
			opts.overridden = overriddenSettings(cmd.Flags(), opts.ConfigFile)
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runWorkerStart(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Outpost, "outpost", "", "outpost name or id to serve (env "+envNames(api.EnvOutpost)+")")
	// --pool is the public CLI's older spelling of --outpost, which
	// published orchestrators still pass; resolve warns when it is used.
	fl.StringVar(&opts.pool, "pool", "", "deprecated spelling of --outpost")
	_ = fl.MarkHidden("pool")
	fl.StringVar(&opts.SessionID, "session", "", "serve just this session, then exit (alias --session-id)")
	fl.StringVar(&opts.AcceptorID, "acceptor-id", "", "identity in claims (env "+envNames(api.EnvAcceptorID)+"; default: generated once and saved in the data dir)")
	fl.BoolVar(&opts.Once, "once", false, "exit after serving one session")
	fl.StringVar(&opts.Dir, "dir", "", "workspace directory the remote runs in (default: the current directory)")
	fl.StringVar(&opts.DataDir, "data-dir", "", "worker data directory, one per running worker (env "+api.EnvWorkerDataDir.Name+"; default ~/.outpost/worker/<workspace name>-<hash of its path>)")
	fl.BoolVar(&opts.KeepWorkspace, "keep-workspace", false, "keep the files sessions leave in the workspace (default: cleared before the next session; repos/ keeps its object stores)")
	fl.BoolVar(&opts.NoPrestart, "no-prestart", false, "start each session's remote at claim time (default: keep one started while idle, which takes its start-up out of dispatch)")
	fl.StringVar(&opts.GatewayURL, "gateway-url", "", "gateway URL used only if a claim answer has none; in direct-serve the claim's (env "+envNames(api.EnvGatewayURL)+")")
	fl.DurationVar(&opts.PollInterval, "poll-interval", worker.DefaultPollInterval, "how often to list the queue when watching it fails")
	fl.IntVar(&opts.pollIntervalSecs, "poll-interval-secs", 0, "--poll-interval in seconds, the public worker's spelling")
	fl.DurationVar(&opts.GracePeriod, "grace-period", worker.DefaultGracePeriod, "how long a running session may finish after SIGTERM before its remote is killed")
	fl.StringVar(&opts.PTYBridgePort, "pty-bridge-port", "", "accepted and ignored: Outpost has no PTY bridge (env "+envNames(api.EnvPTYBridgePort)+")")
	addLogFlags(fl, &opts.LogLevel, &opts.LogFormat)
	addConfigFlag(fl, &opts.ConfigFile)
	fl.StringVar(&opts.StaticBaseURL, "static-base-url", "", "where remote builds are published (env "+api.EnvWorkerStaticBaseURL.Name+", then "+api.EnvWorkerStaticBaseURL.Public+"; default <server>/dist/)")
	fl.StringVar(&opts.CacheDir, "cache-dir", "", "directory of downloaded remote builds (env "+api.EnvWorkerCacheDir.Name+", then "+api.EnvWorkerCacheDir.Public+"; default <data-dir>/cache)")
	fl.StringVar(&opts.RemoteBinarySHA, "remote-binary-sha", "", "remote build for sessions that pin none (env "+api.EnvWorkerRemoteSHA.Name+", then "+api.EnvWorkerRemoteSHA.Public+"; default the latest published)")
	fl.StringVar(&opts.Isolation, "isolation", string(worker.IsolationAuto), "how session code is kept from the worker's credentials: auto, bwrap, user or none (env "+api.EnvWorkerIsolation.Name+")")
	fl.StringVar(&opts.RunAs, "run-as", "", "Unix user sessions run as (--isolation user; with bwrap, the user bwrap runs as); the worker must run as root")
	fl.StringVar(&opts.RunAsHome, "run-as-home", "", "HOME of the run-as user in --isolation user (default <dir>/.home)")
	fl.StringArrayVar(&opts.BwrapBinds, "bwrap-bind", nil, "bwrap isolation: bind host path SRC read-write at DEST (default SRC) in every sandbox, SRC[:DEST], repeatable")
	fl.StringArrayVar(&opts.BwrapROBinds, "bwrap-ro-bind", nil, "bwrap isolation: bind host path SRC read-only at DEST (default SRC) in every sandbox, SRC[:DEST], repeatable")
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

// envFallback gives a flag not set on the command line the value of its
// environment variable under either name (api.EnvVar: the OUTPOST_ name
// first, then the public one).
type envFallback struct {
	fl     *pflag.FlagSet
	getenv func(string) string
}

func (e envFallback) string(flag string, v api.EnvVar, dst *string) {
	if e.fl.Changed(flag) {
		return
	}
	if val := v.Get(e.getenv); val != "" {
		*dst = val
	}
}

// resolve applies environment fallbacks and defaults.
func (o *WorkerStartOptions) resolve(fl *pflag.FlagSet, f *Factory) error {
	env := envFallback{fl: fl, getenv: f.Getenv}
	if err := o.resolvePool(fl, f); err != nil {
		return err
	}
	// The global --token and --server, with the public names too; the
	// saved login still comes after both. --token-file is a flag, so it
	// beats the environment.
	env.string("outpost", api.EnvOutpost, &o.Outpost)
	if !fl.Changed("outpost") && api.EnvOutpost.Get(f.Getenv) == "" {
		if v := api.EnvOutpostPoolID.Get(f.Getenv); v != "" {
			o.Outpost = v
			fmt.Fprintf(f.IO.ErrOut, "warning: %s is deprecated; set %s instead\n", api.EnvOutpostPoolID.Public, api.EnvOutpost.Public)
		}
	}
	if !fl.Changed("token-file") {
		env.string("token", api.EnvToken, &f.Token)
	}
	f.noteTokenFlag(fl)
	env.string("server", api.EnvServer, &f.Server)
	env.string("ca-file", envCAFile, &f.CAFile)
	env.string("acceptor-id", api.EnvAcceptorID, &o.AcceptorID)
	env.string("data-dir", api.EnvWorkerDataDir, &o.DataDir)
	env.string("gateway-url", api.EnvGatewayURL, &o.GatewayURL)
	env.string("pty-bridge-port", api.EnvPTYBridgePort, &o.PTYBridgePort)
	o.ConnectToken = api.EnvSessionToken.Get(f.Getenv)

	if o.ConnectToken != "" {
		if o.SessionID == "" {
			return usageErrorf("%s holds a claim's connect token, which serves one claimed session: pass --session ID (the claimed session), or unset it to claim from the queue", api.EnvSessionToken)
		}
		if o.GatewayURL == "" {
			return usageErrorf("serving session %s directly needs the claim's gateway URL: set %s or pass --gateway-url", o.SessionID, api.EnvGatewayURL)
		}
		// The public worker keeps its session state dirs next to its cache.
		if cache := api.EnvWorkerCacheDir.Get(f.Getenv); o.DataDir == "" && cache != "" {
			o.DataDir = filepath.Dir(filepath.Clean(cache))
		}
	}
	if err := o.resolveRemote(fl, f); err != nil {
		return err
	}
	if o.Dir == "" {
		wd, err := f.Getwd()
		if err != nil {
			return fmt.Errorf("find the current directory (set --dir): %w", err)
		}
		o.Dir = wd
	}
	if o.DataDir == "" {
		home, err := f.UserHomeDir()
		if err != nil {
			return fmt.Errorf("find the home directory for the worker data dir (set --data-dir): %w", err)
		}
		if o.DataDir, err = worker.WorkspaceDataDir(home, o.Dir); err != nil {
			return err
		}
		if legacy := filepath.Join(home, ".outpost", "worker", "acceptor-id"); fileExists(legacy) {
			o.legacyAcceptorFile = legacy
		}
	}
	if o.AcceptorID != "" {
		if err := api.ValidateAcceptorID(o.AcceptorID); err != nil {
			return usageErrorf("--acceptor-id: %w", err)
		}
	}
	if o.Outpost == "" && o.SessionID == "" {
		return usageErrorf("worker start needs --outpost NAME-OR-ID")
	}
	if err := o.resolveIsolation(fl, f); err != nil {
		return err
	}
	if given(fl, "poll-interval-secs") {
		if given(fl, "poll-interval") {
			return usageErrorf("give --poll-interval or --poll-interval-secs, not both")
		}
		o.PollInterval = time.Duration(o.pollIntervalSecs) * time.Second
	}
	if o.PollInterval <= 0 || o.GracePeriod <= 0 {
		return usageErrorf("--poll-interval and --grace-period must be positive")
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
	log := newLogger(f.IO.ErrOut, o.LogLevel, o.LogFormat)
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
	opts := o.workerOptions()
	opts.CAFile, opts.Logger, opts.Stdout = caFile, log, f.IO.Out
	if o.ConnectToken != "" {
		// Direct-serve: no API client, no account token. The connect token
		// goes to the remote alone, so no program this process runs (the
		// capability probes) may inherit it.
		procguard.ScrubEnv(append(append(api.EnvSessionToken.Names(), api.EnvConnectToken.Names()...), tokenEnv...)...)
	} else {
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

// workerOptions are the worker's options as resolved: the settings, not
// the client, logger or CA file runWorkerStart adds.
func (o *WorkerStartOptions) workerOptions() worker.Options {
	opts := worker.Options{
		Outpost:       o.Outpost,
		SessionID:     o.SessionID,
		AcceptorID:    o.AcceptorID,
		Dir:           o.Dir,
		DataDir:       o.DataDir,
		GatewayURL:    o.GatewayURL,
		Once:          o.Once,
		PollInterval:  o.PollInterval,
		GracePeriod:   o.GracePeriod,
		KeepWorkspace: o.KeepWorkspace,
		NoPrestart:    o.NoPrestart,
		Isolation:     o.isolation,
	}
	if o.ConnectToken != "" {
		opts.ConnectToken = o.ConnectToken
		// The server given (--server, DEVIN_API_URL), not the saved
		// login's: a pinned build comes from its /dist/, else from the
		// gateway's server's.
		opts.ServerURL = o.f.Server
	}
	return o.withRemote(opts)
}

// resolveIsolation checks the isolation flags and hides the saved login
// from sessions.
func (o *WorkerStartOptions) resolveIsolation(fl *pflag.FlagSet, f *Factory) error {
	env := envFallback{fl: fl, getenv: f.Getenv}
	env.string("isolation", api.EnvWorkerIsolation, &o.Isolation)
	mode, err := worker.ParseIsolation(o.Isolation)
	if err != nil {
		return usageErrorf("--isolation: %v", err)
	}
	iso := worker.IsolationOptions{Mode: mode, RunAs: o.RunAs, RunAsHome: o.RunAsHome}
	switch {
	case o.RunAs != "" && mode == worker.IsolationNone:
		return usageErrorf("--run-as needs --isolation user, bwrap or auto: with none sessions run as the worker's own user")
	case o.RunAs == "" && mode == worker.IsolationUser:
		return usageErrorf("--isolation user needs --run-as USER: the Unix user sessions run as")
	case o.RunAsHome != "" && !filepath.IsAbs(o.RunAsHome):
		return usageErrorf("--run-as-home must be an absolute path")
	case len(o.BwrapBinds)+len(o.BwrapROBinds) > 0 && (mode == worker.IsolationNone || mode == worker.IsolationUser):
		return usageErrorf("--bwrap-bind and --bwrap-ro-bind need --isolation bwrap or auto")
	}
	for _, flag := range []struct {
		specs []string
		ro    bool
	}{{o.BwrapBinds, false}, {o.BwrapROBinds, true}} {
		for _, spec := range flag.specs {
			b, err := sandbox.ParseBind(spec, flag.ro)
			if err != nil {
				return usageError{err}
			}
			iso.Binds = append(iso.Binds, b)
		}
	}
	if path, err := configPath(f); err == nil {
		iso.Hide = append(iso.Hide, filepath.Dir(path))
	}
	// A token file is never shown to session code, wherever it lives.
	for _, path := range []string{f.TokenFile, f.Getenv(api.EnvTokenFile.Name)} {
		if path != "" {
			if abs, err := filepath.Abs(path); err == nil {
				iso.Hide = append(iso.Hide, abs)
			}
		}
	}
	// The config file may hold the token, and /etc/outpost the service's
	// environment files and token files.
	iso.Hide = append(iso.Hide, systemConfigDir)
	if o.ConfigFile != "" {
		if abs, err := filepath.Abs(o.ConfigFile); err == nil {
			iso.Hide = append(iso.Hide, abs)
		}
	}
	o.isolation = iso
	return nil
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
