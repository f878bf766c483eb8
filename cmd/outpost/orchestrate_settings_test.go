package main

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestOrchestrateHelpGolden: `outpost orchestrate --help` stays as it is.
func TestOrchestrateHelpGolden(t *testing.T) {
	t.Parallel()
	goldenHelp(t, "orchestrate-help.golden", "orchestrate")
}

// TestOrchestrateSettingsTable: each row of orchestrateSettings is whole;
// its variables are among the worker's, whose names the public
// orchestrators read too.
func TestOrchestrateSettingsTable(t *testing.T) {
	t.Parallel()
	checkSettingsTable(t, orchestrateSettings, api.WorkerEnv)
}

// The environments of TestOrchestrateSettingsGolden: every variable
// `orchestrate` reads under either name, good and bad values.
var orchestrateSettingsEnvs = []map[string]string{
	{},
	{
		"OUTPOST_OUTPOST": "env-outpost", "OUTPOST_TOKEN": "env-token", "OUTPOST_SERVER": "http://127.0.0.1:7501",
		"OUTPOST_CA_FILE": "/env/ca.pem", "OUTPOST_WORKER_STATIC_BASE_URL": "http://127.0.0.1:7501/dist/",
		"OUTPOST_WORKER_CACHE_DIR": "/env/cache", "OUTPOST_LOG_LEVEL": "debug", "OUTPOST_LOG_FORMAT": "json",
		"DOCKER_HOST": "unix:///env/docker.sock",
	},
	{
		"DEVIN_OUTPOST_ID": "pub-outpost", "DEVIN_OUTPOSTS_TOKEN": "pub-token", "DEVIN_API_URL": "http://127.0.0.1:7502",
		"DEVIN_WORKER_STATIC_BASE_URL": "https://pub.example/dist/", "DEVIN_WORKER_CACHE_DIR": "/pub/cache",
	},
	{
		"OUTPOST_OUTPOST": "env-outpost", "DEVIN_OUTPOST_ID": "pub-outpost", "OUTPOST_WORKER_CACHE_DIR": "/env/cache",
		"DEVIN_WORKER_CACHE_DIR": "/pub/cache",
	},
	{"OUTPOST_WORKER_STATIC_BASE_URL": "ftp://nope"},
	{"OUTPOST_WORKER_STATIC_BASE_URL": "/relative/dist", "OUTPOST_OUTPOST": "env-outpost"},
	{"OUTPOST_LOG_LEVEL": "loud", "OUTPOST_OUTPOST": "env-outpost"},
	{"OUTPOST_LOG_FORMAT": "xml"},
	{"DOCKER_HOST": "tcp://127.0.0.1:2375"},
}

// orchestrateSettingsConfig is the config file of the argument sets
// "config…"; $DIR is its directory.
const orchestrateSettingsConfig = `outpost: file-outpost
backend: bwrap
max-concurrent: 4
state-dir: /file/state
acceptor-id: file-acceptor
bwrap-bind: [$DIR/rw]
bwrap-ro-bind: [$DIR/git, $DIR/tools:/tools]
metrics-listen: 127.0.0.1:9464
static-base-url: http://127.0.0.1:7600/dist/
cache-dir: /file/cache
poll-interval: 7s
retry-after: 1m
log-level: warn
log-format: json
server: http://127.0.0.1:7600
`

// orchestrateSettingsArgSets are the command lines of
// TestOrchestrateSettingsGolden.
var orchestrateSettingsArgSets = []argSet{
	{"none", nil},
	{"outpost", []string{"--outpost", "dev"}},
	{"exec", []string{
		"--outpost", "flag-outpost", "--backend", "exec", "--max-concurrent", "8", "--provision-cmd", "./p.sh", "--teardown-cmd", "./t.sh",
		"--status-cmd", "./s.sh", "--state-dir", "/flag/state", "--acceptor-id", "flag-acceptor", "--metrics-listen", "127.0.0.1:9",
		"--static-base-url", "https://flag.example/dist/", "--cache-dir", "/flag/cache", "--poll-interval", "3s", "--retry-after", "2m",
		"--token", "flag-token", "--server", "http://127.0.0.1:9", "--ca-file", "/flag/ca.pem", "--log-level", "error", "--log-format", "text",
	}},
	{"bwrap", []string{"--outpost", "dev", "--backend", "bwrap", "--bwrap-bind", "$DIR/a", "--bwrap-bind", "$DIR/b:/c", "--bwrap-ro-bind", "$DIR/d"}},
	{"docker", []string{
		"--outpost", "dev", "--backend", "docker", "--docker-image", "img:1", "--docker-cpus", "1.5", "--docker-memory", "2g",
		"--docker-network", "bridge", "--docker-ulimit", "nofile=1024:2048", "--docker-ulimit", "nproc=64",
	}},
	{"docker host", []string{"--outpost", "dev", "--backend", "docker", "--docker-image", "img:1", "--docker-host", "unix:///flag.sock"}},
	{"config", []string{"--config", "$DIR/orchestrate.yaml"}},
	{"config and flags", []string{"--config", "$DIR/orchestrate.yaml", "--outpost", "flag-outpost", "--backend", "process"}},
	{"bad backend", []string{"--outpost", "dev", "--backend", "vm"}},
	{"bad concurrency", []string{"--outpost", "dev", "--max-concurrent", "0", "--backend", "vm"}},
	{"exec without commands", []string{"--outpost", "dev", "--backend", "exec", "--provision-cmd", "./p.sh"}},
	{"binds without bwrap", []string{"--outpost", "dev", "--bwrap-ro-bind", "$DIR/d"}},
	{"bad bind", []string{"--outpost", "dev", "--backend", "bwrap", "--bwrap-ro-bind", "relative"}},
	{"docker flags without docker", []string{"--outpost", "dev", "--docker-cpus", "2"}},
	{"docker without image", []string{"--outpost", "dev", "--backend", "docker"}},
	{"bad docker", []string{"--outpost", "dev", "--backend", "docker", "--docker-image", "i", "--docker-cpus", "-1"}},
	{"bad docker memory", []string{"--outpost", "dev", "--backend", "docker", "--docker-image", "i", "--docker-memory", "lots"}},
	{"bad docker network", []string{"--outpost", "dev", "--backend", "docker", "--docker-image", "i", "--docker-network", ""}},
	{"bad docker ulimit", []string{"--outpost", "dev", "--backend", "docker", "--docker-image", "i", "--docker-ulimit", "nofile"}},
}

// TestOrchestrateSettingsGolden runs `outpost orchestrate` up to its run
// under each environment of orchestrateSettingsEnvs with each argument
// set, and compares what it resolved (the orchestrator's Options, the
// factory's token, server and CA file, the backends' settings and what it
// wrote to stderr) or the error it refused with against
// testdata/orchestrate-settings.golden. The file was written from the code
// before the settings became one table, so that the table is held to the
// same values, defaults, warnings and errors, in the same order.
func TestOrchestrateSettingsGolden(t *testing.T) {
	t.Parallel()
	dir := settingsDir(t, "orchestrate.yaml", orchestrateSettingsConfig)
	parse := func(t *testing.T, env map[string]string, args ...string) (*OrchestrateOptions, *testFactory, error) {
		return parseOptions(t, env, NewCmdOrchestrate, args...)
	}
	goldenSettings(t, "orchestrate-settings.golden", dir, orchestrateSettingsEnvs, orchestrateSettingsArgSets, []string{"--outpost", "dev"},
		parse, orchestrateSettingLines)
}

// orchestrateSettingLines lists what the orchestrator would be started
// with, a "name: value" line each: the exported fields of its Options that
// settings fill, the factory's endpoint, then the backends' settings and
// the settings the command keeps for itself.
func orchestrateSettingLines(o *OrchestrateOptions) []string {
	var lines []string
	oo := reflect.ValueOf(o.Options)
	for i := range oo.NumField() {
		f, v := oo.Type().Field(i), oo.Field(i)
		switch v.Kind() {
		case reflect.Func, reflect.Interface, reflect.Pointer:
			continue // the client, backend, logger and metrics: never settings
		}
		lines = append(lines, fmt.Sprintf("%s: %+v", f.Name, v.Interface()))
	}
	var ulimits []string
	for _, u := range o.dockerUlimits {
		ulimits = append(ulimits, fmt.Sprintf("%+v", *u))
	}
	f := o.f
	return append(lines,
		fmt.Sprintf("factory: token %q, server %q, CA file %q", f.Token, f.Server, f.CAFile),
		fmt.Sprintf("backend: %q", o.BackendName),
		fmt.Sprintf("exec: provision %q, teardown %q, status %q", o.ProvisionCmd, o.TeardownCmd, o.StatusCmd),
		fmt.Sprintf("bwrap binds: %q %q, parsed %+v", o.BwrapBinds, o.BwrapROBinds, o.bwrapBinds),
		fmt.Sprintf("docker: image %q, host %q, cpus %v, memory %q (%d), network %q", o.DockerImage, o.DockerHost, o.DockerCPUs, o.DockerMemory, o.dockerMemory, o.DockerNetwork),
		fmt.Sprintf("docker ulimits: %q, parsed %v", o.DockerUlimits, ulimits),
		fmt.Sprintf("metrics listen: %q", o.MetricsListen),
		"log: "+o.LogLevel+" "+o.LogFormat,
		fmt.Sprintf("config: %q", o.ConfigFile),
		fmt.Sprintf("overridden: %q", o.overridden))
}
