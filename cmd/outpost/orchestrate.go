package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/internal/orchestrator"
	"github.com/outpost-sh/outpost/internal/procguard"
)

// OrchestrateOptions are the settings of `outpost orchestrate`.
type OrchestrateOptions struct {
	f *Factory
	// fl is the command's flags, for the checks that ask which were
	// given.
	fl *pflag.FlagSet
	// Options are the orchestrator's settings as orchestrateSettings fill
	// them, but the client, backend, logger, metrics and CA file, which
	// runOrchestrate adds.
	orchestrator.Options
	// BackendName is --backend: process, exec, bwrap or docker.
	BackendName  string
	ProvisionCmd string
	TeardownCmd  string
	StatusCmd    string
	// Bwrap backend: SRC[:DEST] bind mounts.
	BwrapBinds   []string
	BwrapROBinds []string
	bwrapBinds   []orchestrator.BwrapBind
	// Docker backend.
	DockerImage   string
	DockerHost    string
	DockerCPUs    float64
	DockerMemory  string
	DockerNetwork string
	DockerUlimits []string
	dockerMemory  int64
	dockerUlimits []*orchestrator.Ulimit
	MetricsListen string
	LogLevel      string
	LogFormat     string
	// ConfigFile is the YAML file of settings (--config); "" means none.
	ConfigFile string
	// overridden lists the file's keys the environment replaced.
	overridden []string
}

// NewCmdOrchestrate returns `outpost orchestrate`. runF replaces the run in
// tests.
func NewCmdOrchestrate(f *Factory, runF func(context.Context, *OrchestrateOptions) error) *cobra.Command {
	opts := &OrchestrateOptions{f: f}
	cmd := &cobra.Command{
		Use:   "orchestrate --outpost NAME --backend process|exec|bwrap|docker --max-concurrent N",
		Short: "Provision a machine per session of an outpost's queue",
		Long: `Watch an outpost's queue and serve up to --max-concurrent sessions at once,
each on a machine of its own: claim the session, provision the machine, start
'outpost remote serve' in it with only the session's connect token, renew the
claim, and tear the machine down and release the claim when the session or
its remote ends. On SIGTERM every machine is torn down and every claim
released. Machines are named outpost-<session id>; a restarted orchestrator
adopts or removes the ones a crashed run left in --state-dir.

Backends: process (a child process in a fresh workspace under the state dir)
and exec (--provision-cmd, --teardown-cmd and optional --status-cmd, run with
sh -c; see docs/orchestration.md). The token needs the outposts.machine scope.

Backend bwrap: each session in a bubblewrap sandbox (Debian package
bubblewrap): the host's /usr, /etc, /opt read-only, a private /tmp and HOME,
the workspace read-write at /workspace, its own pid namespace, the host's
network, a new terminal session and only the spawn contract's environment.
Add binds with --bwrap-bind and --bwrap-ro-bind SRC[:DEST] (repeatable).

Backend docker: a fresh container per session through the Docker Engine API
(Docker, or Podman's Docker-compatible service) from --docker-image, which
needs git and a glibc the outpost binary runs on. This binary is mounted
read-only at /usr/local/bin/outpost and runs 'outpost remote serve' as the
container's command, with only the spawn contract's variables. The network
is "host" by default so the remote reaches a gateway on loopback. A session
with a network policy runs, when the orchestrator is root and the daemon is
local and rootful, in the network namespace of a holder container
(NAME-netns, network none) that the session's enforcement point serves,
without NET_ADMIN and NET_RAW; otherwise such sessions are never claimed,
and the start log says why (docs/security.md).

A session whose queue entry pins a remote build (spec.remote_binary_sha)
runs that build with every backend, as a worker does: downloaded from
--static-base-url (default the server's /dist/), checked against its
published SHA-256 and kept in --cache-dir (default <state-dir>/cache). The
exec backend's commands get it as their outpost binary and the pin as
OUTPOST_WORKER_REMOTE_SHA (docs/orchestration.md). A build that cannot be downloaded or does not
match fails the provisioning, which releases the claim with that error. A
session that pins nothing runs this build.

The outpost, token and server may come from the environment, under the
names the public orchestrators read too: OUTPOST_OUTPOST (DEVIN_OUTPOST_ID),
OUTPOST_TOKEN (DEVIN_OUTPOSTS_TOKEN), OUTPOST_SERVER (DEVIN_API_URL); the
remote build settings from OUTPOST_WORKER_STATIC_BASE_URL
(DEVIN_WORKER_STATIC_BASE_URL) and OUTPOST_WORKER_CACHE_DIR
(DEVIN_WORKER_CACHE_DIR).
--config FILE reads settings from a YAML file whose keys are the flags'
names (backend: bwrap, max-concurrent: 4, bwrap-ro-bind: [/srv/git]); a flag
given beats its environment variable, which beats the file.`,
		Example: `  outpost orchestrate --outpost dev --backend process --max-concurrent 4
  outpost orchestrate --outpost gpu --backend exec --max-concurrent 8 \
    --provision-cmd ./provision.sh --teardown-cmd ./teardown.sh --metrics-listen 127.0.0.1:9464
  outpost orchestrate --outpost dev --backend docker --max-concurrent 4 \
    --docker-image outpost-agent:bookworm --docker-cpus 2 --docker-memory 4g
  outpost orchestrate --outpost dev --backend bwrap --max-concurrent 4 \
    --bwrap-ro-bind /srv/toolchains --bwrap-bind /srv/cache/go:/home/outpost/go
  outpost orchestrate --config /etc/outpost/orchestrate-dev.yaml --log-format json`,
		Args: exactArgs(0, ""),
		RunE: runWithSettings(opts, &opts.ConfigFile, &opts.overridden, func(fl *pflag.FlagSet) error { return opts.resolve(fl, f) },
			runF, runOrchestrate),
	}
	fl := cmd.Flags()
	addSettings(fl, orchestrateSettings, opts)
	addLogFlags(fl, &opts.LogLevel, &opts.LogFormat)
	addConfigFlag(fl, &opts.ConfigFile)
	return cmd
}

// resolve applies environment fallbacks and defaults and checks the
// settings.
func (o *OrchestrateOptions) resolve(fl *pflag.FlagSet, f *Factory) error {
	o.fl = fl
	if err := resolveSettings(orchestrateSettings, o, o, fl, f.Getenv); err != nil {
		return err
	}
	return resolveLog(fl, f.Getenv, &o.LogLevel, &o.LogFormat)
}

func runOrchestrate(ctx context.Context, o *OrchestrateOptions) error {
	f := o.f
	c, err := f.guardedClient()
	if err != nil {
		return err
	}
	log := newLogger(f.IO.ErrOut, o.LogLevel, o.LogFormat)
	warnOverridden(log, o.ConfigFile, o.overridden)
	// Machines of the process backend run as this user: keep them out of
	// this process's environment, where the API token is.
	if err := procguard.NotDumpable(); err != nil {
		log.Warn("cannot mark the orchestrator not dumpable", "err", err)
	}
	var backend orchestrator.Backend = orchestrator.ProcessBackend{}
	if o.BackendName == "exec" {
		backend = orchestrator.ExecBackend{ProvisionCmd: o.ProvisionCmd, TeardownCmd: o.TeardownCmd, StatusCmd: o.StatusCmd}
	}
	if o.BackendName == "bwrap" {
		bb, err := orchestrator.NewBwrapBackend(ctx, orchestrator.BwrapOptions{Binds: o.bwrapBinds})
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while checking
			}
			return err
		}
		backend = bb
	}
	if o.BackendName == "docker" {
		db, err := o.dockerBackend(ctx, log)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while checking
			}
			return err
		}
		defer db.Close()
		backend = db
	}
	metrics := orchestrator.NewMetrics()
	if o.MetricsListen != "" {
		ln, err := net.Listen("tcp", o.MetricsListen)
		if err != nil {
			return fmt.Errorf("listen for metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.Handler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Warn("metrics server", "err", err)
			}
		}()
		defer srv.Close()
		log.Info("serving metrics", "addr", ln.Addr().String())
	}
	caFile, err := f.TrustedCAFile()
	if err != nil {
		return err
	}
	opts := o.Options
	opts.Client, opts.Backend, opts.Logger, opts.Metrics, opts.CAFile = c, backend, log, metrics, caFile
	return orchestrator.Run(ctx, opts)
}

// resolveBwrap checks and parses the bwrap backend's bind flags.
func (o *OrchestrateOptions) resolveBwrap() error {
	o.bwrapBinds = nil
	for _, flag := range []struct {
		name  string
		specs []string
		ro    bool
	}{{"--bwrap-bind", o.BwrapBinds, false}, {"--bwrap-ro-bind", o.BwrapROBinds, true}} {
		for _, spec := range flag.specs {
			b, err := orchestrator.ParseBwrapBind(spec, flag.ro)
			if err != nil {
				return usageErrorf("%s: %v", flag.name, err)
			}
			o.bwrapBinds = append(o.bwrapBinds, b)
		}
	}
	return nil
}

// resolveDocker checks and parses the docker backend's flags.
func (o *OrchestrateOptions) resolveDocker(f *Factory) error {
	if o.DockerImage == "" {
		return usageErrorf("the docker backend needs --docker-image IMAGE (with git and a glibc the outpost binary runs on)")
	}
	if o.DockerHost == "" {
		o.DockerHost = f.Getenv("DOCKER_HOST")
	}
	if o.DockerCPUs < 0 {
		return usageErrorf("--docker-cpus must not be negative")
	}
	if o.DockerMemory != "" {
		n, err := orchestrator.ParseMemory(o.DockerMemory)
		if err != nil {
			return usageErrorf("--docker-memory: %v", err)
		}
		o.dockerMemory = n
	}
	if o.DockerNetwork == "" {
		return usageErrorf("--docker-network must not be empty")
	}
	o.dockerUlimits = nil
	for _, s := range o.DockerUlimits {
		u, err := orchestrator.ParseUlimit(s)
		if err != nil {
			return usageErrorf("--docker-ulimit: %v", err)
		}
		o.dockerUlimits = append(o.dockerUlimits, u)
	}
	return nil
}

// dockerBackend makes the docker backend and checks that its API answers
// and its image is there (pulling it if missing), so a broken setup fails
// at start rather than on every claimed session.
func (o *OrchestrateOptions) dockerBackend(ctx context.Context, log *slog.Logger) (*orchestrator.DockerBackend, error) {
	b, err := orchestrator.NewDockerBackend(orchestrator.DockerOptions{
		Image: o.DockerImage, Host: o.DockerHost, Outpost: o.Outpost, CPUs: o.DockerCPUs, Memory: o.dockerMemory,
		Network: o.DockerNetwork, Ulimits: o.dockerUlimits,
	})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute) // a pull may take a while
	defer cancel()
	v, err := b.Check(cctx)
	if err != nil {
		b.Close()
		return nil, err
	}
	log.Info("docker backend ready", "host", b.Host(), "api_version", v, "image", o.DockerImage, "network", o.DockerNetwork)
	if err := b.EnforcesNetwork(); err != nil {
		log.Warn("sessions with a network policy are left to other orchestrators and workers", "reason", err)
	}
	return b, nil
}
