package main

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestWorkerHelpGolden: `outpost worker start --help` stays as it is.
func TestWorkerHelpGolden(t *testing.T) {
	t.Parallel()
	goldenHelp(t, "worker-help.golden", "worker", "start")
}

// TestWorkerSettingsTable: each row of workerStartSettings is whole.
func TestWorkerSettingsTable(t *testing.T) {
	t.Parallel()
	checkSettingsTable(t, workerStartSettings, api.WorkerEnv)
}

// The environments of TestWorkerSettingsGolden: every variable `worker
// start` reads under either name, good and bad values, and pairs of bad
// ones whose order of report matters.
var workerSettingsEnvs = []map[string]string{
	{},
	{
		"OUTPOST_OUTPOST": "env-outpost", "OUTPOST_TOKEN": "env-token", "OUTPOST_SERVER": "http://127.0.0.1:7501",
		"OUTPOST_CA_FILE": "/env/ca.pem", "OUTPOST_WORKER_ACCEPTOR_ID": "env-acceptor", "OUTPOST_WORKER_DATA_DIR": "/env/data",
		"OUTPOST_GATEWAY_URL": "ws://127.0.0.1:7501/v1/gateway", "OUTPOST_WORKER_CACHE_DIR": "/env/cache",
		"OUTPOST_WORKER_STATIC_BASE_URL": "http://127.0.0.1:7501/dist/", "OUTPOST_WORKER_REMOTE_SHA": "1a2b3c4d5e6f",
		"OUTPOST_WORKER_ISOLATION": "none", "OUTPOST_LOG_LEVEL": "debug", "OUTPOST_LOG_FORMAT": "json",
	},
	{
		"DEVIN_OUTPOST_ID": "pub-outpost", "DEVIN_OUTPOSTS_TOKEN": "pub-token", "DEVIN_API_URL": "http://127.0.0.1:7502",
		"DEVIN_WORKER_ACCEPTOR_ID": "pub-acceptor", "DEVIN_OUTPOST_GATEWAY_URL": "ws://127.0.0.1:7502/v1/gateway",
		"DEVIN_PTY_BRIDGE_PORT": "2222", "DEVIN_WORKER_CACHE_DIR": "/pub/cache",
		"DEVIN_WORKER_STATIC_BASE_URL": "https://pub.example/dist/", "DEVIN_WORKER_REMOTE_SHA": "abcdef012345",
	},
	{
		"OUTPOST_OUTPOST": "env-outpost", "DEVIN_OUTPOST_ID": "pub-outpost", "OUTPOST_WORKER_ACCEPTOR_ID": "env-acceptor",
		"DEVIN_WORKER_ACCEPTOR_ID": "pub-acceptor", "OUTPOST_WORKER_CACHE_DIR": "/env/cache", "DEVIN_WORKER_CACHE_DIR": "/pub/cache",
	},
	{"DEVIN_OUTPOST_POOL_ID": "pool-outpost"},
	{"DEVIN_OUTPOST_POOL_ID": "pool-outpost", "DEVIN_OUTPOST_ID": "pub-outpost"},
	{"OUTPOST_TOKEN_FILE": "token-file", "OUTPOST_TOKEN": "env-token"},
	{"OUTPOST_CONNECT_TOKEN": "connect-token"},
	{"DEVIN_REMOTE_SESSION_TOKEN": "connect-token", "DEVIN_OUTPOST_GATEWAY_URL": "ws://127.0.0.1:7503/v1/gateway"},
	{
		"DEVIN_REMOTE_SESSION_TOKEN": "connect-token", "DEVIN_OUTPOST_GATEWAY_URL": "ws://127.0.0.1:7503/v1/gateway",
		"DEVIN_WORKER_CACHE_DIR": "/pub/state/cache", "DEVIN_API_URL": "http://127.0.0.1:7503",
	},
	{
		"OUTPOST_CONNECT_TOKEN": "connect-token", "OUTPOST_GATEWAY_URL": "ws://127.0.0.1:7503/v1/gateway",
		"OUTPOST_WORKER_CACHE_DIR": "/env/state/cache", "OUTPOST_WORKER_DATA_DIR": "/env/data",
	},
	{"OUTPOST_WORKER_ISOLATION": "bogus"},
	{"OUTPOST_WORKER_ISOLATION": "user"},
	{"OUTPOST_WORKER_ISOLATION": "bwrap"},
	{"OUTPOST_WORKER_REMOTE_SHA": "not-hex"},
	{"OUTPOST_WORKER_REMOTE_SHA": "not-hex", "OUTPOST_WORKER_STATIC_BASE_URL": "ftp://nope"},
	{"OUTPOST_WORKER_STATIC_BASE_URL": "ftp://nope", "OUTPOST_WORKER_ACCEPTOR_ID": "bad id/x"},
	{"OUTPOST_WORKER_STATIC_BASE_URL": "/relative/dist"},
	{"OUTPOST_WORKER_ACCEPTOR_ID": "bad id/x", "OUTPOST_WORKER_ISOLATION": "bogus"},
	{"OUTPOST_WORKER_ISOLATION": "bogus", "OUTPOST_LOG_LEVEL": "loud"},
	{"OUTPOST_LOG_LEVEL": "loud"},
	{"OUTPOST_LOG_FORMAT": "xml"},
	{"OUTPOST_CONNECT_TOKEN": "connect-token", "OUTPOST_WORKER_REMOTE_SHA": "not-hex"},
}

// workerSettingsConfig is the config file of the argument sets
// "config…"; $DIR is its directory.
const workerSettingsConfig = `outpost: file-outpost
acceptor-id: file-acceptor
data-dir: /file/data
dir: /file/work
gateway-url: ws://127.0.0.1:7600/v1/gateway
poll-interval: 7s
grace-period: 1m
keep-workspace: true
no-prestart: true
once: true
static-base-url: http://127.0.0.1:7600/dist/
cache-dir: /file/cache
remote-binary-sha: 0123456789ab
isolation: bwrap
bwrap-bind: [$DIR/rw]
bwrap-ro-bind: [$DIR/git, $DIR/tools:/tools]
log-level: warn
log-format: json
server: http://127.0.0.1:7600
`

// workerSettingsArgSets are the command lines of
// TestWorkerSettingsGolden.
var workerSettingsArgSets = []argSet{
	{"none", nil},
	{"outpost", []string{"--outpost", "dev"}},
	{"flags", []string{
		"--outpost", "flag-outpost", "--session", "ses_1", "--acceptor-id", "flag-acceptor", "--once", "--dir", "/flag/work",
		"--data-dir", "/flag/data", "--keep-workspace", "--no-prestart", "--gateway-url", "ws://127.0.0.1:9/v1/gateway",
		"--poll-interval", "3s", "--grace-period", "2m", "--pty-bridge-port", "9999", "--static-base-url", "https://flag.example/dist/",
		"--cache-dir", "/flag/cache", "--remote-binary-sha", "fedcba987654", "--isolation", "bwrap", "--run-as", "nobody",
		"--bwrap-bind", "$DIR/a", "--bwrap-bind", "$DIR/b:/c", "--bwrap-ro-bind", "$DIR/d", "--token", "flag-token", "--server", "http://127.0.0.1:9",
		"--ca-file", "/flag/ca.pem", "--log-level", "error", "--log-format", "text",
	}},
	{"config", []string{"--config", "$DIR/worker.yaml"}},
	{"config and flags", []string{"--config", "$DIR/worker.yaml", "--outpost", "flag-outpost", "--poll-interval-secs", "9"}},
	{"aliases", []string{"--pool", "old-pool", "--session-id", "ses_2", "--api-url", "http://127.0.0.1:8", "--poll-interval-secs", "4", "--token-file", "tok"}},
	{"pool and outpost", []string{"--pool", "a", "--outpost", "b"}},
	{"user", []string{"--outpost", "dev", "--isolation", "user", "--run-as", "outpost-session", "--run-as-home", "/home/s"}},
	{"bad isolation", []string{"--outpost", "dev", "--isolation", "none", "--run-as", "nobody"}},
	{"bad binds", []string{"--outpost", "dev", "--isolation", "user", "--run-as", "nobody", "--bwrap-bind", "$DIR/a"}},
	{"bad bind", []string{"--outpost", "dev", "--bwrap-ro-bind", "relative"}},
	{"bad home", []string{"--outpost", "dev", "--run-as", "nobody", "--run-as-home", "rel"}},
	{"bad intervals", []string{"--outpost", "dev", "--poll-interval", "0s"}},
	{"both intervals", []string{"--outpost", "dev", "--poll-interval", "1s", "--poll-interval-secs", "2"}},
	{"bad grace", []string{"--outpost", "dev", "--grace-period", "-1s", "--acceptor-id", "bad id/x"}},
}

// TestWorkerSettingsGolden runs `outpost worker start` up to its run under
// each environment of workerSettingsEnvs with each argument set, and
// compares what it resolved (the worker's Options, the factory's token,
// server and CA file, the command's own settings and what it wrote to
// stderr) or the error it refused with against
// testdata/worker-settings.golden. The file was written from the code
// before the settings became one table, so that the table is held to the
// same values, defaults, warnings and errors, in the same order.
func TestWorkerSettingsGolden(t *testing.T) {
	t.Parallel()
	dir := settingsDir(t, "worker.yaml", workerSettingsConfig)
	goldenSettings(t, "worker-settings.golden", dir, workerSettingsEnvs, workerSettingsArgSets, []string{"--outpost", "dev"},
		runWorkerStartCmd, workerSettingLines)
}

// workerSettingLines lists what the worker would be started with, a
// "name: value" line each: the exported fields of its Options that
// settings fill, the factory's endpoint, then the settings the command
// keeps for itself.
func workerSettingLines(o *WorkerStartOptions) []string {
	var lines []string
	wo := reflect.ValueOf(o.Options)
	for i := range wo.NumField() {
		f, v := wo.Type().Field(i), wo.Field(i)
		switch v.Kind() {
		case reflect.Func, reflect.Interface, reflect.Pointer:
			continue // the client, logger and output: never settings
		}
		lines = append(lines, fmt.Sprintf("%s: %+v", f.Name, v.Interface()))
	}
	f := o.f
	return append(lines,
		fmt.Sprintf("factory: token %q, token file %q, server %q, CA file %q", f.Token, f.TokenFile, f.Server, f.CAFile),
		"log: "+o.LogLevel+" "+o.LogFormat,
		fmt.Sprintf("pty bridge port: %q", o.PTYBridgePort),
		fmt.Sprintf("legacy acceptor file: %q", o.legacyAcceptorFile),
		fmt.Sprintf("config: %q", o.ConfigFile),
		fmt.Sprintf("overridden: %q", o.overridden))
}
