package main

import (
	"encoding/hex"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of testdata/ from the code as it is")

// goldenCompare compares got with the file testdata/name, or with -update
// writes it there.
func goldenCompare(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if got == string(want) {
		return
	}
	g, w := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			t.Fatalf("%s differs at line %d:\n got %s\nwant %s", path, i+1, g[i], w[i])
		}
	}
	t.Fatalf("%s differs in length: got %d lines, want %d", path, len(g), len(w))
}

// TestServerHelpGolden: `outpost server --help` stays as it is: the flags,
// their type names, defaults and help, and the variables they name.
func TestServerHelpGolden(t *testing.T) {
	t.Parallel()
	goldenHelp(t, "server-help.golden", "server")
}

// TestServerSettingsTable: each row of serverSettings is whole.
func TestServerSettingsTable(t *testing.T) {
	t.Parallel()
	checkSettingsTable(t, serverSettings, serverEnv)
}

// checkSettingsTable checks that each row of a command's settings is
// whole. A field has a flag, given once; the help names a variable
// exactly when there is one, and the command's list of variables (help,
// env files) has it; a variable that is parsed says what it wants and is
// of a kind that can be parsed; a refusal names its flag and bounds a
// duration or number.
func checkSettingsTable[C, F any](t *testing.T, rows []commandSetting[C, F], vars []api.EnvVar) {
	t.Helper()
	seen := map[string]bool{}
	for i, s := range rows {
		if s.field == nil {
			if s.flag != "" || s.hasEnv() || s.check == nil || s.refuse != "" {
				t.Errorf("row %d has no field, so it must be a check alone: %+v", i, s)
			}
			continue
		}
		if s.flag == "" || seen[s.flag] {
			t.Errorf("row %d: flag %q is empty or given twice", i, s.flag)
		}
		seen[s.flag] = true
		names := strings.Contains(s.usage, "$ENV") || strings.Contains(s.usage, "$NAME") || strings.Contains(s.usage, "$PUBLIC")
		if names != s.hasEnv() {
			t.Errorf("--%s: the help %q and the variable %v disagree", s.flag, s.usage, s.env)
		}
		p := s.field(new(F))
		if s.hasEnv() {
			if !slices.Contains(vars, s.env) {
				t.Errorf("--%s: the command's variables lack %v", s.flag, s.env)
			}
			if _, text := p.(*string); !text {
				if err := s.parseEnv(p, "0"); err != nil || s.want == "" {
					t.Errorf("--%s: %v cannot be read (%v) or says not what it wants (%q)", s.flag, s.env, err, s.want)
				}
			}
		}
		if _, ok := number(p); (s.refuse != "" || s.zeroIsNone) && !ok {
			t.Errorf("--%s bounds or maps a %T, not a duration or number", s.flag, p)
		}
		if s.refuse != "" && !strings.Contains(s.refuse, "--"+s.flag) {
			t.Errorf("--%s: the refusal %q does not name the flag", s.flag, s.refuse)
		}
	}
}

// The environments of TestServerSettingsGolden: every variable the server
// reads, good and bad values, and pairs of bad ones whose order of report
// matters.
var serverSettingsEnvs = []map[string]string{
	{},
	{
		"OUTPOST_LISTEN": "127.0.0.1:7500", "OUTPOST_DATA_DIR": "/env/data", "OUTPOST_PUBLIC_URL": "https://env.example",
		"OUTPOST_DATABASE_URL": "postgres://u:p@127.0.0.1:5432/db", "OUTPOST_DIST_DIR": "/env/dist", "OUTPOST_BLOB_STORE": "postgres",
		"OUTPOST_SECRET_KEY_FILE": "/env/key", "OUTPOST_REPLICA_ID": "env-1", "OUTPOST_REPLICA_URL": "http://127.0.0.1:7501",
		"OUTPOST_TLS_CERT": "/env/tls.crt", "OUTPOST_TLS_KEY": "/env/tls.key",
	},
	{
		"OUTPOST_CLAIM_TTL": "120", "OUTPOST_RECONNECT_GRACE": "90", "OUTPOST_ARTIFACT_RETENTION": "0",
		"OUTPOST_ENDED_ENTRY_RETENTION": "0", "OUTPOST_SNAPSHOT_INTERVAL": "15m", "OUTPOST_MAX_CALL_OUTPUT_BYTES": "0",
		"OUTPOST_MAX_SESSION_OUTPUT_BYTES": "1000",
	},
	{"OUTPOST_CLAIM_TTL": "soon"},
	{"OUTPOST_CLAIM_TTL": "0", "OUTPOST_RECONNECT_GRACE": "-5s"},
	{"OUTPOST_RECONNECT_GRACE": "later", "OUTPOST_ARTIFACT_RETENTION": "-1h"},
	{"OUTPOST_ARTIFACT_RETENTION": "30d"},
	{"OUTPOST_ARTIFACT_RETENTION": "-1h"},
	{"OUTPOST_ENDED_ENTRY_RETENTION": "-1m", "OUTPOST_SNAPSHOT_INTERVAL": "often"},
	{"OUTPOST_ENDED_ENTRY_RETENTION": "ten", "OUTPOST_SNAPSHOT_INTERVAL": "-1s"},
	{"OUTPOST_SNAPSHOT_INTERVAL": "-1s", "OUTPOST_MAX_CALL_OUTPUT_BYTES": "-1"},
	{"OUTPOST_MAX_CALL_OUTPUT_BYTES": "0x10"},
	{"OUTPOST_MAX_SESSION_OUTPUT_BYTES": "1_000"},
	{"OUTPOST_MAX_SESSION_OUTPUT_BYTES": "-5"},
	{"OUTPOST_BLOB_STORE": "bogus", "OUTPOST_CLAIM_TTL": "soon"},
	{"OUTPOST_BLOB_STORE": "postgres"},
	{"OUTPOST_BLOB_STORE": "s3://bucket/prefix?endpoint=127.0.0.1:9000&insecure=true"},
	{"OUTPOST_BLOB_STORE": "s3://"},
	{"OUTPOST_BLOB_STORE": "bogus", "OUTPOST_SECRET_KEY": "short"},
	{"OUTPOST_DATABASE_URL": "mysql://127.0.0.1/db", "OUTPOST_SECRET_KEY": "short"},
	{"OUTPOST_DATABASE_URL": "mysql://127.0.0.1/db", "OUTPOST_CLAIM_TTL": "soon"},
	{"OUTPOST_SECRET_KEYS_OLD": strings.Repeat("ab", 32) + ", nope"},
	{"OUTPOST_TLS_CERT": "/env/tls.crt"},
	{
		"OUTPOST_LLM_PROVIDER": "openai", "OUTPOST_LLM_BASE_URL": "http://127.0.0.1:11434/v1", "OUTPOST_LLM_MODEL": "env-model",
		"OUTPOST_LLM_API_KEY": "sk-env", "OUTPOST_ADMIN_TOKEN": "adm", "OUTPOST_LOG_LEVEL": "debug", "OUTPOST_LOG_FORMAT": "json",
		"XDG_DATA_HOME": "/xdg", "OUTPOST_SECRET_KEY": strings.Repeat("01", 32),
		"OUTPOST_SECRET_KEYS_OLD": strings.Repeat("ab", 32) + "," + strings.Repeat("cd", 32),
	},
	{"OUTPOST_LOG_LEVEL": "loud"},
}

// serverSettingsConfig is the config file of the argument set "config".
const serverSettingsConfig = `listen: 127.0.0.1:7600
data-dir: /file/data
claim-ttl: 45s
reconnect-grace: 2m
max-call-output-bytes: 0
max-session-output-bytes: 4096
ended-entry-retention: 0s
artifact-retention: 48h
snapshot-interval: 5m
snapshot-ttl: 2h
max-snapshot-bytes: 1048576
blob-store: fs
tls-cert: /file/tls.crt
tls-key: /file/tls.key
idle-timeout: 30s
max-header-bytes: 8192
max-unauthenticated-conns: 0
max-streams-per-token: 0
metrics-listen: 127.0.0.1:9421
metrics-token-required: true
tool-result-limit: 4000
llm-model: file-model
log-format: json
replica-id: file-1
`

// TestServerSettingsGolden runs `outpost server` up to its run under each
// environment of serverSettingsEnvs with each argument set, and compares
// what it resolved (the server's Options and the command's own settings)
// or the error it refused with against testdata/server-settings.golden.
// The file was written from the code before the settings became one table,
// so that the table is held to the same values, defaults and errors, in
// the same order.
func TestServerSettingsGolden(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := filepath.Join(dir, "server.yaml")
	if err := os.WriteFile(config, []byte(serverSettingsConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	argSets := []struct {
		name string
		args []string
	}{
		{"none", nil},
		{"flags", []string{
			"--listen", "127.0.0.1:9", "--data-dir", "/flag/data", "--database", "postgres://flag@127.0.0.1/db", "--blob-store", "fs",
			"--public-url", "https://flag.example", "--claim-ttl", "3m", "--reconnect-grace", "1s", "--artifact-retention", "0",
			"--ended-entry-retention", "0", "--snapshot-ttl", "1h", "--max-snapshot-bytes", "10", "--snapshot-interval", "1m",
			"--max-call-output-bytes", "0", "--max-session-output-bytes", "7", "--tls-cert", "/flag/tls.crt", "--tls-key", "/flag/tls.key",
			"--idle-timeout", "1m", "--read-header-timeout", "2s", "--max-header-bytes", "5000", "--max-unauthenticated-conns", "0",
			"--max-streams-per-token", "3", "--metrics-listen", "127.0.0.1:9420", "--metrics-token-required", "--tool-result-limit", "2000",
			"--dist-dir", "/flag/dist", "--secret-key-file", "/flag/key", "--replica-id", "flag-1", "--replica-url", "http://127.0.0.1:1",
			"--llm-provider", "anthropic", "--log-level", "warn",
		}},
		{"config", []string{"--config", config}},
		{"bad flags", []string{"--max-header-bytes", "100", "--tool-result-limit", "10"}},
	}
	// The defaults in full, then each case as what differs from them.
	// The temporary directories differ from run to run.
	norm := func(tf *testFactory, s string) string {
		return strings.NewReplacer(tf.home, "$HOME", dir, "$DIR").Replace(s)
	}
	def, tf := mustParse(t, nil, NewCmdServer)
	defaults := strings.Split(norm(tf, strings.Join(serverSettingLines(def), "\n")), "\n")
	var b strings.Builder
	b.WriteString("## defaults\n" + strings.Join(defaults, "\n") + "\n")
	for i, env := range serverSettingsEnvs {
		for _, set := range argSets {
			var c strings.Builder
			fmt.Fprintf(&c, "## env %d %s, args %s\n", i, envString(env), set.name)
			o, tf, err := parseOptions(t, env, NewCmdServer, set.args...)
			switch {
			case err != nil:
				fmt.Fprintf(&c, "error (usage %v): %v\n", isUsage(err), err)
			case o == nil:
				c.WriteString("the run was not reached, and no error\n")
			default:
				for _, l := range strings.Split(norm(tf, strings.Join(serverSettingLines(o), "\n")), "\n") {
					if !slices.Contains(defaults, l) {
						c.WriteString(l + "\n")
					}
				}
			}
			b.WriteString(norm(tf, c.String()))
		}
	}
	goldenCompare(t, "server-settings.golden", b.String())
}

// envString is env's variables in order, for the golden file.
func envString(env map[string]string) string {
	if len(env) == 0 {
		return "(none)"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		parts = append(parts, k+"="+env[k])
	}
	return strings.Join(parts, " ")
}

// serverSettingLines lists what the server would be started with, a
// "name: value" line each: the exported fields of its Options that
// settings fill, then the settings the command keeps for itself.
func serverSettingLines(o *ServerOptions) []string {
	var lines []string
	so := reflect.ValueOf(o.serverOptions())
	for i := range so.NumField() {
		f, v := so.Type().Field(i), so.Field(i)
		if !f.IsExported() {
			continue
		}
		switch v.Kind() {
		case reflect.Func, reflect.Interface, reflect.Pointer:
			continue // the logger, clock, store and model: never settings
		}
		lines = append(lines, f.Name+": "+formatSetting(v))
	}
	return append(lines,
		"log: "+o.LogLevel+" "+o.LogFormat,
		fmt.Sprintf("llm: %+v", o.LLM),
		fmt.Sprintf("config: %q", o.ConfigFile),
		fmt.Sprintf("overridden: %q", o.overridden))
}

// formatSetting prints a value, keys in hex.
func formatSetting(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case []byte:
		return hex.EncodeToString(x)
	case [][]byte:
		var keys []string
		for _, k := range x {
			keys = append(keys, hex.EncodeToString(k))
		}
		return "[" + strings.Join(keys, " ") + "]"
	}
	return fmt.Sprint(v.Interface())
}
