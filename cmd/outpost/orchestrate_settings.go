package main

import (
	"fmt"
	"path/filepath"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/orchestrator"
)

// orchestrateSetting is one setting of `outpost orchestrate`, bound to a
// field of OrchestrateOptions (several of its orchestrator.Options).
type orchestrateSetting = commandSetting[OrchestrateOptions, OrchestrateOptions]

// orchestrateSettings are the settings of `outpost orchestrate` but the
// log's and the config file's (every long-running command shares them).
// The global --token, --server and --ca-file have a row without a flag,
// where their variables are read. The checks run in this order, so the
// first of several mistakes reported is always the same one.
var orchestrateSettings = []orchestrateSetting{
	{check: (*OrchestrateOptions).resolveEndpoint},
	{flag: "cache-dir", env: api.EnvWorkerCacheDir, def: "", field: func(o *OrchestrateOptions) any { return &o.CacheDir },
		usage: "directory of downloaded remote builds (env $ENV; default <state-dir>/cache)"},
	{flag: "static-base-url", env: api.EnvWorkerStaticBaseURL, def: "", field: func(o *OrchestrateOptions) any { return &o.StaticBaseURL },
		usage: "where the remote builds sessions pin are published (env $ENV; default <server>/dist/)",
		check: func(o *OrchestrateOptions) error { return checkStaticBaseURL(o.StaticBaseURL) }},
	{flag: "outpost", env: api.EnvOutpost, def: "", field: func(o *OrchestrateOptions) any { return &o.Outpost },
		usage: "outpost name or id to serve (env $ENV)",
		check: func(o *OrchestrateOptions) error {
			if o.Outpost == "" {
				return usageErrorf("orchestrate needs --outpost NAME-OR-ID")
			}
			return nil
		}},
	{flag: "max-concurrent", def: 1, field: func(o *OrchestrateOptions) any { return &o.MaxConcurrent },
		usage: "most sessions served at once",
		least: 1, refuse: "--max-concurrent must be at least 1"},
	{flag: "provision-cmd", def: "", field: func(o *OrchestrateOptions) any { return &o.ProvisionCmd },
		usage: "exec backend: command that creates the machine and starts the remote"},
	{flag: "teardown-cmd", def: "", field: func(o *OrchestrateOptions) any { return &o.TeardownCmd },
		usage: "exec backend: command that removes the machine"},
	{flag: "status-cmd", def: "", field: func(o *OrchestrateOptions) any { return &o.StatusCmd },
		usage: "exec backend: command that exits 0 while the machine runs (optional)"},
	{flag: "bwrap-bind", def: []string(nil), field: func(o *OrchestrateOptions) any { return &o.BwrapBinds },
		usage: "bwrap backend: bind host path SRC read-write at DEST (default SRC) in every sandbox, SRC[:DEST], repeatable"},
	{flag: "bwrap-ro-bind", def: []string(nil), field: func(o *OrchestrateOptions) any { return &o.BwrapROBinds },
		usage: "bwrap backend: bind host path SRC read-only at DEST (default SRC) in every sandbox, SRC[:DEST], repeatable"},
	{flag: "docker-image", def: "", field: func(o *OrchestrateOptions) any { return &o.DockerImage },
		usage: "docker backend: image of the session containers (required; needs git and glibc)"},
	{flag: "docker-host", def: "", field: func(o *OrchestrateOptions) any { return &o.DockerHost },
		usage: "docker backend: Engine API address, e.g. unix:///run/podman/podman.sock (default $DOCKER_HOST, then unix:///var/run/docker.sock)"},
	{flag: "docker-cpus", def: float64(0), field: func(o *OrchestrateOptions) any { return &o.DockerCPUs },
		usage: "docker backend: CPUs per container, e.g. 1.5 (default no limit)"},
	{flag: "docker-memory", def: "", field: func(o *OrchestrateOptions) any { return &o.DockerMemory },
		usage: "docker backend: memory per container, e.g. 2g (default no limit)"},
	{flag: "docker-network", def: orchestrator.DefaultDockerNetwork, field: func(o *OrchestrateOptions) any { return &o.DockerNetwork },
		usage: "docker backend: network mode of the containers; host lets the remote reach a loopback gateway"},
	{flag: "docker-ulimit", def: []string(nil), field: func(o *OrchestrateOptions) any { return &o.DockerUlimits },
		usage: "docker backend: ulimit name=soft[:hard], repeatable (default nofile and nproc at this process's own limits)"},
	// After the backends' flags: the backend checks that the flags given
	// are its own.
	{flag: "backend", def: "process", field: func(o *OrchestrateOptions) any { return &o.BackendName },
		usage: "machine backend: process, exec, bwrap or docker",
		check: (*OrchestrateOptions).resolveBackend},
	{flag: "state-dir", def: "", field: func(o *OrchestrateOptions) any { return &o.StateDir },
		usage: "state directory: acceptor id, cursor, machine workspaces (default ~/.outpost/orchestrator)",
		check: func(o *OrchestrateOptions) error {
			if o.StateDir != "" {
				return nil
			}
			home, err := o.f.UserHomeDir()
			if err != nil {
				return fmt.Errorf("find the home directory (set --state-dir): %w", err)
			}
			o.StateDir = filepath.Join(home, ".outpost", "orchestrator")
			return nil
		}},
	{flag: "acceptor-id", def: "", field: func(o *OrchestrateOptions) any { return &o.AcceptorID },
		usage: "identity in claims (default: generated once and saved in the state dir)"},
	{flag: "metrics-listen", def: "", field: func(o *OrchestrateOptions) any { return &o.MetricsListen },
		usage: "address to serve Prometheus metrics on (/metrics)"},
	{flag: "poll-interval", def: orchestrator.DefaultPollInterval, field: func(o *OrchestrateOptions) any { return &o.PollInterval },
		usage: "how often to list the whole queue"},
	{flag: "retry-after", def: orchestrator.DefaultRetryAfter, field: func(o *OrchestrateOptions) any { return &o.RetryAfter },
		usage: "how long to leave a session whose provisioning failed before trying it again"},
}

// resolveEndpoint warns of a token on the command line and reads the
// variables of the global --token, --server and --ca-file, under the
// public names too.
func (o *OrchestrateOptions) resolveEndpoint() error {
	f := o.f
	f.noteTokenFlag(o.fl)
	env := envFallback{fl: o.fl, getenv: f.Getenv}
	env.string("token", api.EnvToken, &f.Token)
	env.string("server", api.EnvServer, &f.Server)
	env.string("ca-file", envCAFile, &f.CAFile)
	return nil
}

// resolveBackend checks --backend and the flags of its backend, and that
// no other backend's flags are given.
func (o *OrchestrateOptions) resolveBackend() error {
	switch o.BackendName {
	case "docker":
		if err := o.resolveDocker(o.f); err != nil {
			return err
		}
	case "bwrap":
		if err := o.resolveBwrap(); err != nil {
			return err
		}
	case "process":
	case "exec":
		if o.ProvisionCmd == "" || o.TeardownCmd == "" {
			return usageErrorf("the exec backend needs --provision-cmd and --teardown-cmd")
		}
	default:
		return usageErrorf("--backend must be process, exec, bwrap or docker, not %q", o.BackendName)
	}
	if o.BackendName != "bwrap" && len(o.BwrapBinds)+len(o.BwrapROBinds) > 0 {
		return usageErrorf("--bwrap-bind and --bwrap-ro-bind need --backend bwrap")
	}
	if o.BackendName != "docker" && (o.DockerImage != "" || o.DockerHost != "" || o.DockerCPUs != 0 || o.DockerMemory != "" ||
		len(o.DockerUlimits) > 0 || o.DockerNetwork != orchestrator.DefaultDockerNetwork) {
		return usageErrorf("the --docker-* flags need --backend docker")
	}
	return nil
}
