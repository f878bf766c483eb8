package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/internal/budget"
	"github.com/outpost-sh/outpost/internal/llm"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/store/sealed"
)

// ServerOptions are the settings of `outpost server`.
type ServerOptions struct {
	f *Factory
	// Options are the server's settings as serverSettings fill them, the
	// flags' 0 for none as given (serverOptions maps it). Its LLM is
	// runServer's to set, from the LLM below.
	server.Options
	// LLM configures the model provider of llm sessions.
	LLM       llm.Config
	LogLevel  string
	LogFormat string
	// PricesJSON is --prices: the price table of model calls as JSON; ""
	// means budget.DefaultPrices.
	PricesJSON string
	// ConfigFile is the YAML file of settings (--config); "" means none.
	ConfigFile string
	// overridden lists the file's keys the environment replaced.
	overridden []string
}

// NewCmdServer returns `outpost server`. runF replaces the run in tests.
func NewCmdServer(f *Factory, runF func(context.Context, *ServerOptions) error) *cobra.Command {
	opts := &ServerOptions{f: f}
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the Outpost control plane",
		Long: `Run the Outpost control plane: the REST API, the fleet queue, the gateway remotes
dial, and the agent loop of every running session. On its first start it
creates an admin token and prints it once.

Each flag not given is read from its environment variable: OUTPOST_LISTEN,
OUTPOST_DATA_DIR, OUTPOST_DATABASE_URL, OUTPOST_PUBLIC_URL, OUTPOST_CLAIM_TTL,
OUTPOST_RECONNECT_GRACE, OUTPOST_ARTIFACT_RETENTION, OUTPOST_ENDED_ENTRY_RETENTION,
OUTPOST_SNAPSHOT_INTERVAL, OUTPOST_MAX_CALL_OUTPUT_BYTES, OUTPOST_MAX_SESSION_OUTPUT_BYTES,
OUTPOST_BLOB_STORE, OUTPOST_DIST_DIR, OUTPOST_TLS_CERT, OUTPOST_TLS_KEY,
OUTPOST_SECRET_KEY_FILE, OUTPOST_REPLICA_ID, OUTPOST_REPLICA_URL, OUTPOST_PPROF_LISTEN,
OUTPOST_OIDC_ISSUER, OUTPOST_OIDC_CLIENT_ID, OUTPOST_OIDC_CLIENT_SECRET,
OUTPOST_LLM_*, OUTPOST_PRICES, OUTPOST_LOG_LEVEL, OUTPOST_LOG_FORMAT. OUTPOST_ADMIN_TOKEN,
when set, is the admin token.

--config FILE reads settings from a YAML file whose keys are the flags'
names (listen: 0.0.0.0:7420, claim-ttl: 300s). A flag given on the command
line beats its environment variable, which beats the file, which beats the
default. An unknown key or a value of the wrong type is an error. No file
is read unless one is named; the systemd unit names /etc/outpost/server.yaml
(docs/production.md).

With --tls-cert and --tls-key the server speaks HTTPS (TLS 1.2 or later) and
the gateway WSS; the files are read again within seconds of a change, so a
renewed certificate needs no restart. Workers, orchestrators and the CLI
trust a private CA with --ca-file or OUTPOST_CA_FILE.

Session secrets are encrypted in the database (AES-256-GCM) with the key in
OUTPOST_SECRET_KEY (32 bytes as base64 or hex: openssl rand -base64 32), or
else the key in --secret-key-file, by default <data-dir>/secret-key, created
on first start. To rotate, put the new key in OUTPOST_SECRET_KEY and the old
one in OUTPOST_SECRET_KEYS_OLD (comma-separated) for one start: every
session's secrets are encrypted anew under the new key at start. Servers
sharing a PostgreSQL database need the same keys. See docs/secrets.md.

State is kept in an embedded SQLite database in the data dir, or, with
--database postgres://…, in PostgreSQL (the schema is created or migrated at
start). Workspace snapshots, artifacts and spilled output are kept where
--blob-store says: files in the data dir (the default with SQLite), the
PostgreSQL database (the default with it) or an S3-compatible bucket. The
data dir also holds the admin token file (unless OUTPOST_ADMIN_TOKEN is set)
and, unless OUTPOST_SECRET_KEY or --secret-key-file gives the key, the
secret key file.

Several servers may share one PostgreSQL database as replicas behind one
load balancer; any replica answers any request. Give every replica the same
OUTPOST_SECRET_KEY, OUTPOST_ADMIN_TOKEN and --public-url (the balancer's),
a blob store they share (postgres or s3://…, not fs), its own --replica-id,
and a --replica-url the other replicas reach it at directly. See
docs/replicas.md.

Artifacts of a session that ended longer ago than --artifact-retention are
deleted by an hourly sweep; downloading one then answers 410 Gone. Artifacts
of sessions that have not ended are always kept.

Audit log entries older than --audit-retention (400 days; env
OUTPOST_AUDIT_RETENTION) are removed from the oldest end by the same
sweep; the chain stays verifiable ('outpost audit verify'). 0 keeps them.

The queue entry of an ended session stays listed for --ended-entry-retention
(phase pending, no acceptor, session_status terminated; claims answer 409),
so that orchestrators watching the queue see the session end and clean up;
then it is deleted (watchers get DELETED). 0 deletes it when the session
ends or its claim is released.

Remote builds are published without a token at <public-url>/dist/ in the
layout workers download from: this executable's own build, and the builds of
--dist-dir (the dist/ directory 'make dist' fills), whose files win.`,
		Example: `  outpost server
  outpost server --listen 0.0.0.0:7420 --public-url https://outpost.example.com
  outpost server --artifact-retention 168h   # keep artifacts 7 days after a session ends
  OUTPOST_DATA_DIR=/var/lib/outpost outpost server --log-level debug
  outpost server --database postgres://outpost:secret@db.internal:5432/outpost
  outpost server --dist-dir dist   # publish the builds of 'make dist' at /dist/
  outpost server --listen 0.0.0.0:7420 --public-url https://outpost.example.com \
    --tls-cert /etc/outpost/tls.crt --tls-key /etc/outpost/tls.key --metrics-listen 127.0.0.1:9420
  outpost server --database postgres://… --secret-key-file /etc/outpost/secret-key   # one key for every server on the database
  outpost server --database postgres://… --listen 10.0.0.5:7420 --replica-id outpost-a --replica-url http://10.0.0.5:7420
  outpost server --config /etc/outpost/server.yaml --log-format json`,
		Args: exactArgs(0, ""),
		RunE: runWithSettings(opts, &opts.ConfigFile, &opts.overridden, func(fl *pflag.FlagSet) error { return opts.resolve(fl, f) },
			runF, runServer),
	}
	fl := cmd.Flags()
	addSettings(fl, serverSettings, &opts.Options)
	addLogFlags(fl, &opts.LogLevel, &opts.LogFormat)
	addConfigFlag(fl, &opts.ConfigFile)
	fl.StringVar(&opts.LLM.Provider, "llm-provider", "", "model provider of llm sessions: openai (any OpenAI-compatible server) or anthropic (env "+envLLMProvider.Name+")")
	fl.StringVar(&opts.LLM.BaseURL, "llm-base-url", "", "the provider's API base URL, e.g. http://127.0.0.1:11434/v1 (env "+envLLMBaseURL.Name+")")
	fl.StringVar(&opts.LLM.Model, "llm-model", "", "default model of llm sessions (env "+envLLMModel.Name+"); the API key is read from "+envLLMAPIKey.Name)
	fl.DurationVar(&opts.LLM.RetryFor, "llm-retry-for", llm.DefaultRetryFor, "how long a model call that fails with a connection error, 5xx or 429 is retried, with backoff, before the session fails (env "+envLLMRetryFor.Name+")")
	fl.StringVar(&opts.PricesJSON, "prices", "", `price table of model calls, which estimates sessions' cost (usage.cost_usd, limits.max_cost_usd, outpost budgets), as JSON: {"<model>": {"input_per_mtok": 3, "output_per_mtok": 15}} in US dollars per million tokens; replaces the built-in table (docs/budgets.md); models it lacks cost 0 (env `+envPrices.Name+`)`)
	cmd.AddCommand(NewCmdServerBackup(f, nil), NewCmdServerRestore(f, nil))
	return cmd
}

// resolve fills the settings whose flags were not given from the
// environment, then from defaults, and checks them.
func (o *ServerOptions) resolve(fl *pflag.FlagSet, f *Factory) error {
	if err := resolveSettings(serverSettings, o, &o.Options, fl, f.Getenv); err != nil {
		return err
	}
	if o.DataDir == "" {
		dir, err := defaultServerDataDir(f)
		if err != nil {
			return err
		}
		o.DataDir = dir
	}
	o.AdminToken = envAdminToken.Get(f.Getenv)
	llmEnv := llm.ConfigFromEnv(f.Getenv)
	for _, v := range []struct {
		flag string
		env  string
		dst  *string
	}{{"llm-provider", llmEnv.Provider, &o.LLM.Provider}, {"llm-base-url", llmEnv.BaseURL, &o.LLM.BaseURL}, {"llm-model", llmEnv.Model, &o.LLM.Model}} {
		if v.env != "" && !fl.Changed(v.flag) {
			*v.dst = v.env
		}
	}
	o.LLM.APIKey = llmEnv.APIKey
	if v := strings.TrimSpace(envLLMRetryFor.Get(f.Getenv)); v != "" && !fl.Changed("llm-retry-for") {
		d, err := time.ParseDuration(v)
		if err != nil {
			return usageErrorf("%s: %q is not a duration (such as 2m or 90s)", envLLMRetryFor.Name, v)
		}
		o.LLM.RetryFor = d
	}
	if o.LLM.RetryFor <= 0 {
		return usageErrorf("--llm-retry-for %s: give a positive duration (such as 2m); the retries of a model call end there", o.LLM.RetryFor)
	}
	o.LLM.ComputerTool, o.LLM.ComputerToolVersion, o.LLM.ToolImages = llmEnv.ComputerTool, llmEnv.ComputerToolVersion, llmEnv.ToolImages
	if v := envPrices.Get(f.Getenv); v != "" && !fl.Changed("prices") {
		o.PricesJSON = v
	}
	prices, err := budget.ParsePrices(o.PricesJSON)
	if err != nil {
		return usageErrorf("--prices: %v", err)
	}
	o.Prices, o.LLMModel = prices, o.LLM.Model
	return resolveLog(fl, f.Getenv, &o.LogLevel, &o.LogFormat)
}

// resolveSecretKeys reads OUTPOST_SECRET_KEY and OUTPOST_SECRET_KEYS_OLD.
// Errors never show a key.
func (o *ServerOptions) resolveSecretKeys() error {
	if v := envSecretKey.Get(o.f.Getenv); v != "" {
		k, err := sealed.ParseKey(v)
		if err != nil {
			return usageErrorf("%s: %v", envSecretKey.Name, err)
		}
		o.SecretKey = k
	}
	old := strings.FieldsFunc(envSecretKeysOld.Get(o.f.Getenv), func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	for i, v := range old {
		k, err := sealed.ParseKey(v)
		if err != nil {
			return usageErrorf("%s, key %d of %d: %v", envSecretKeysOld.Name, i+1, len(old), err)
		}
		o.OldSecretKeys = append(o.OldSecretKeys, k)
	}
	return nil
}

// defaultServerDataDir is $XDG_DATA_HOME/outpost, else
// ~/.local/share/outpost.
func defaultServerDataDir(f *Factory) (string, error) {
	if x := f.Getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "outpost"), nil
	}
	home, err := f.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the home directory for the data dir (set --data-dir): %w", err)
	}
	return filepath.Join(home, ".local", "share", "outpost"), nil
}

func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToLower(s))); err != nil {
		return 0, usageErrorf("--log-level must be debug, info, warn or error, not %q", s)
	}
	return l, nil
}

func runServer(ctx context.Context, o *ServerOptions) error {
	f := o.f
	logger := newLogger(f.IO.ErrOut, o.LogLevel, o.LogFormat)
	warnOverridden(logger, o.ConfigFile, o.overridden)
	var provider llm.Provider
	if o.LLM.Provider != "" {
		p, err := llm.New(o.LLM)
		if err != nil {
			return usageErrorf("model provider: %v", err)
		}
		provider = p
		logger.Info("model provider configured", "provider", o.LLM.Provider, "base_url", o.LLM.BaseURL, "model", o.LLM.Model)
	}
	if o.DatabaseURL != "" {
		where := "(unparsable URL)"
		if u, err := url.Parse(o.DatabaseURL); err == nil {
			where = u.Redacted()
		}
		logger.Info("using PostgreSQL", "database", where)
	}
	so := o.serverOptions()
	so.LLM, so.Logger, so.Stdout = provider, logger, f.IO.Out
	srv, err := server.New(ctx, so)
	if err != nil {
		return err
	}
	if err := srv.Serve(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// serverOptions are the server's options as resolved, with the flags' 0
// for none made the server's negative. The logger, stdout and model
// provider are runServer's to add.
func (o *ServerOptions) serverOptions() server.Options {
	so := o.Options
	for _, s := range serverSettings {
		if s.zeroIsNone {
			noneIfZero(s.field(&so))
		}
	}
	return so
}
