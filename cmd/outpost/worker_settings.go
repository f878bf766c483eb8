package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/dist"
	"github.com/outpost-sh/outpost/internal/sandbox"
	"github.com/outpost-sh/outpost/internal/worker"
)

// workerStartSetting is one setting of `outpost worker start`, bound to a field
// of WorkerStartOptions (most of them of its worker.Options).
type workerStartSetting = commandSetting[WorkerStartOptions, WorkerStartOptions]

// workerStartSettings are the settings of `outpost worker start` but the log's
// and the config file's (every long-running command shares them) and
// --pool, the deprecated spelling of --outpost. The global --token,
// --server and --ca-file have a row without a flag, where their variables
// are read. The checks run in this order, so the first of several
// mistakes reported is always the same one.
var workerStartSettings = []workerStartSetting{
	{flag: "outpost", env: api.EnvOutpost, def: "", field: func(o *WorkerStartOptions) any { return &o.Outpost },
		usage: "outpost name or id to serve (env $ENV)",
		check: (*WorkerStartOptions).resolvePoolIDEnv},
	{check: (*WorkerStartOptions).resolveEndpoint},
	{flag: "gateway-url", env: api.EnvGatewayURL, def: "", field: func(o *WorkerStartOptions) any { return &o.GatewayURL },
		usage: "gateway URL used only if a claim answer has none; in direct-serve the claim's (env $ENV)"},
	{flag: "pty-bridge-port", env: api.EnvPTYBridgePort, def: "", field: func(o *WorkerStartOptions) any { return &o.PTYBridgePort },
		usage: "accepted and ignored: Outpost has no PTY bridge (env $ENV)"},
	// The connect token has no flag: it is only ever given in the
	// environment.
	{check: (*WorkerStartOptions).resolveDirectServe},
	{flag: "cache-dir", env: api.EnvWorkerCacheDir, def: "", field: func(o *WorkerStartOptions) any { return &o.CacheDir },
		usage: "directory of downloaded remote builds (env $NAME, then $PUBLIC; default <data-dir>/cache)"},
	{flag: "remote-binary-sha", env: api.EnvWorkerRemoteSHA, def: "", field: func(o *WorkerStartOptions) any { return &o.RemoteBinarySHA },
		usage: "remote build for sessions that pin none (env $NAME, then $PUBLIC; default the latest published)",
		check: func(o *WorkerStartOptions) error {
			if o.RemoteBinarySHA == "" {
				return nil
			}
			if err := dist.CheckID(o.RemoteBinarySHA); err != nil {
				return usageErrorf("--remote-binary-sha: %v", err)
			}
			return nil
		}},
	{flag: "static-base-url", env: api.EnvWorkerStaticBaseURL, def: "", field: func(o *WorkerStartOptions) any { return &o.StaticBaseURL },
		usage: "where remote builds are published (env $NAME, then $PUBLIC; default <server>/dist/)",
		check: func(o *WorkerStartOptions) error { return checkStaticBaseURL(o.StaticBaseURL) }},
	{flag: "dir", def: "", field: func(o *WorkerStartOptions) any { return &o.Dir },
		usage: "workspace directory the remote runs in (default: the current directory)",
		check: func(o *WorkerStartOptions) error {
			if o.Dir != "" {
				return nil
			}
			wd, err := o.f.Getwd()
			if err != nil {
				return fmt.Errorf("find the current directory (set --dir): %w", err)
			}
			o.Dir = wd
			return nil
		}},
	{flag: "data-dir", env: api.EnvWorkerDataDir, def: "", field: func(o *WorkerStartOptions) any { return &o.DataDir },
		usage: "worker data directory, one per running worker (env $ENV; default ~/.outpost/worker/<workspace name>-<hash of its path>)",
		check: (*WorkerStartOptions).defaultDataDir},
	{flag: "acceptor-id", env: api.EnvAcceptorID, def: "", field: func(o *WorkerStartOptions) any { return &o.AcceptorID },
		usage: "identity in claims (env $ENV; default: generated once and saved in the data dir)",
		check: func(o *WorkerStartOptions) error {
			if o.AcceptorID == "" {
				return nil
			}
			if err := api.ValidateAcceptorID(o.AcceptorID); err != nil {
				return usageErrorf("--acceptor-id: %w", err)
			}
			return nil
		}},
	{flag: "session", def: "", field: func(o *WorkerStartOptions) any { return &o.SessionID },
		usage: "serve just this session, then exit (alias --session-id)",
		check: func(o *WorkerStartOptions) error {
			if o.Outpost == "" && o.SessionID == "" {
				return usageErrorf("worker start needs --outpost NAME-OR-ID")
			}
			return nil
		}},
	{flag: "once", def: false, field: func(o *WorkerStartOptions) any { return &o.Once },
		usage: "exit after serving one session"},
	{flag: "keep-workspace", def: false, field: func(o *WorkerStartOptions) any { return &o.KeepWorkspace },
		usage: "keep the files sessions leave in the workspace (default: cleared before the next session; repos/ keeps its object stores)"},
	{flag: "no-prestart", def: false, field: func(o *WorkerStartOptions) any { return &o.NoPrestart },
		usage: "start each session's remote at claim time (default: keep one started while idle, which takes its start-up out of dispatch)"},
	{flag: "run-as", def: "", field: func(o *WorkerStartOptions) any { return &o.Isolation.RunAs },
		usage: "Unix user sessions run as (--isolation user; with bwrap, the user bwrap runs as); the worker must run as root"},
	{flag: "run-as-home", def: "", field: func(o *WorkerStartOptions) any { return &o.Isolation.RunAsHome },
		usage: "HOME of the run-as user in --isolation user (default <dir>/.home)"},
	{flag: "bwrap-bind", def: []string(nil), field: func(o *WorkerStartOptions) any { return &o.BwrapBinds },
		usage: "bwrap isolation: bind host path SRC read-write at DEST (default SRC) in every sandbox, SRC[:DEST], repeatable"},
	{flag: "bwrap-ro-bind", def: []string(nil), field: func(o *WorkerStartOptions) any { return &o.BwrapROBinds },
		usage: "bwrap isolation: bind host path SRC read-only at DEST (default SRC) in every sandbox, SRC[:DEST], repeatable"},
	{flag: "isolation", env: api.EnvWorkerIsolation, def: string(worker.IsolationAuto), field: func(o *WorkerStartOptions) any { return &o.IsolationMode },
		usage: "how session code is kept from the worker's credentials: auto, bwrap, user or none (env $ENV)",
		check: (*WorkerStartOptions).resolveIsolation},
	{flag: "desktop", env: api.EnvWorkerDesktop, def: string(worker.DesktopAuto), field: func(o *WorkerStartOptions) any { return &o.DesktopMode },
		usage: "give each session a desktop: auto (a virtual one when Xvfb is installed), on or off (env $ENV)",
		check: func(o *WorkerStartOptions) error {
			mode, err := worker.ParseDesktop(o.DesktopMode)
			if err != nil {
				return usageErrorf("--desktop: %v", err)
			}
			o.Desktop = mode
			return nil
		}},
	{flag: "label", env: api.EnvWorkerLabels, def: []string(nil), field: func(o *WorkerStartOptions) any { return &o.LabelSpecs },
		usage: "label the worker reports, KEY=VALUE, repeatable; sessions' requirements.labels match them (env $ENV, KEY=VALUE separated by commas)",
		want:  "labels KEY=VALUE separated by commas",
		check: func(o *WorkerStartOptions) error {
			labels, err := api.ParseLabels(o.LabelSpecs)
			if err != nil {
				return usageErrorf("--label: %v", err)
			}
			o.Labels = labels
			return nil
		}},
	{flag: "poll-interval-secs", def: 0, field: func(o *WorkerStartOptions) any { return &o.pollIntervalSecs },
		usage: "--poll-interval in seconds, the public worker's spelling",
		check: func(o *WorkerStartOptions) error {
			if !given(o.fl, "poll-interval-secs") {
				return nil
			}
			if given(o.fl, "poll-interval") {
				return usageErrorf("give --poll-interval or --poll-interval-secs, not both")
			}
			o.PollInterval = time.Duration(o.pollIntervalSecs) * time.Second
			return nil
		}},
	{flag: "poll-interval", def: worker.DefaultPollInterval, field: func(o *WorkerStartOptions) any { return &o.PollInterval },
		usage: "how often to list the queue when watching it fails",
		least: 1, refuse: "--poll-interval and --grace-period must be positive"},
	{flag: "grace-period", def: worker.DefaultGracePeriod, field: func(o *WorkerStartOptions) any { return &o.GracePeriod },
		usage: "how long a running session may finish after SIGTERM before its remote is killed",
		least: 1, refuse: "--poll-interval and --grace-period must be positive"},
}

// resolvePoolIDEnv takes the public contract's deprecated variable of the
// outpost when neither --outpost nor its variables give one, with a
// warning that names the new one.
func (o *WorkerStartOptions) resolvePoolIDEnv() error {
	f := o.f
	if o.fl.Changed("outpost") || api.EnvOutpost.Get(f.Getenv) != "" {
		return nil
	}
	if v := api.EnvOutpostPoolID.Get(f.Getenv); v != "" {
		o.Outpost = v
		fmt.Fprintf(f.IO.ErrOut, "warning: %s is deprecated; set %s instead\n", api.EnvOutpostPoolID.Public, api.EnvOutpost.Public)
	}
	return nil
}

// resolveEndpoint reads the variables of the global --token, --server and
// --ca-file, under the public names too; the saved login still comes
// after both. --token-file is a flag, so it beats the environment.
func (o *WorkerStartOptions) resolveEndpoint() error {
	f := o.f
	env := envFallback{fl: o.fl, getenv: f.Getenv}
	if !o.fl.Changed("token-file") {
		env.string("token", api.EnvToken, &f.Token)
	}
	f.noteTokenFlag(o.fl)
	env.string("server", api.EnvServer, &f.Server)
	env.string("ca-file", envCAFile, &f.CAFile)
	return nil
}

// resolveDirectServe reads a claim's connect token, which selects
// direct-serve, and checks that it comes with what it needs.
func (o *WorkerStartOptions) resolveDirectServe() error {
	f := o.f
	o.ConnectToken = api.EnvSessionToken.Get(f.Getenv)
	if o.ConnectToken == "" {
		return nil
	}
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
	// The server given (--server, DEVIN_API_URL), not the saved login's:
	// a pinned build comes from its /dist/, else from the gateway's
	// server's.
	o.ServerURL = f.Server
	return nil
}

// defaultDataDir gives a worker without --data-dir the one of its
// workspace, and notes the shared one older versions used.
func (o *WorkerStartOptions) defaultDataDir() error {
	if o.DataDir != "" {
		return nil
	}
	home, err := o.f.UserHomeDir()
	if err != nil {
		return fmt.Errorf("find the home directory for the worker data dir (set --data-dir): %w", err)
	}
	if o.DataDir, err = worker.WorkspaceDataDir(home, o.Dir); err != nil {
		return err
	}
	if legacy := filepath.Join(home, ".outpost", "worker", "acceptor-id"); fileExists(legacy) {
		o.legacyAcceptorFile = legacy
	}
	return nil
}

// resolveIsolation checks the isolation flags and hides the saved login
// from sessions.
func (o *WorkerStartOptions) resolveIsolation() error {
	f := o.f
	mode, err := worker.ParseIsolation(o.IsolationMode)
	if err != nil {
		return usageErrorf("--isolation: %v", err)
	}
	iso := worker.IsolationOptions{Mode: mode, RunAs: o.Isolation.RunAs, RunAsHome: o.Isolation.RunAsHome}
	switch {
	case iso.RunAs != "" && mode == worker.IsolationNone:
		return usageErrorf("--run-as needs --isolation user, bwrap or auto: with none sessions run as the worker's own user")
	case iso.RunAs == "" && mode == worker.IsolationUser:
		return usageErrorf("--isolation user needs --run-as USER: the Unix user sessions run as")
	case iso.RunAsHome != "" && !filepath.IsAbs(iso.RunAsHome):
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
	o.Isolation = iso
	return nil
}
