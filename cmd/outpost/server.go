package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/llm"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/store/sealed"
)

// ServerOptions are the settings of `outpost server`.
type ServerOptions struct {
	f         *Factory
	Listen    string
	DataDir   string
	PublicURL string
	ClaimTTL  time.Duration
	// ReconnectGrace is how long a claim holds after its remote's
	// connection is gone.
	ReconnectGrace time.Duration
	AdminToken     string
	LogLevel       string
	LogFormat      string
	// ConfigFile is the YAML file of settings (--config); "" means none.
	ConfigFile string
	// overridden lists the file's keys the environment replaced.
	overridden []string
	// LLM configures the model provider of llm sessions.
	LLM llm.Config
	// ToolResultLimit is how many characters of a tool result a model sees.
	ToolResultLimit int
	// ArtifactRetention is how long artifacts of ended sessions are kept;
	// 0 keeps them forever.
	ArtifactRetention time.Duration
	// EndedEntryRetention is how long the queue entry of an ended session
	// stays listed; 0 deletes it at once.
	EndedEntryRetention time.Duration
	// SnapshotTTL is how long a suspended session's snapshot is kept.
	SnapshotTTL time.Duration
	// MaxSnapshotBytes is the largest workspace snapshot the server stores.
	MaxSnapshotBytes int64
	// SnapshotInterval is how often running sessions are checkpointed; 0
	// never.
	SnapshotInterval time.Duration
	// MaxCallOutputBytes and MaxSessionOutputBytes bound the output the
	// server keeps of one call and the spilled output of one session; 0
	// means no bound.
	MaxCallOutputBytes    int64
	MaxSessionOutputBytes int64
	// Database is a PostgreSQL URL; "" means the embedded SQLite
	// database in the data dir.
	Database string
	// BlobStore is where blobs are kept: fs, postgres, s3://…, or "" for
	// the default (postgres with --database, else fs).
	BlobStore string
	// DistDir is a directory of remote builds published at /dist/ with
	// this executable's own.
	DistDir string

	// The network edge: TLS, connection limits and where /metrics is.
	TLSCert, TLSKey   string
	IdleTimeout       time.Duration
	ReadHeaderTimeout time.Duration
	MaxHeaderBytes    int
	// MaxUnauthenticatedConns and MaxStreamsPerToken: 0 means no bound.
	MaxUnauthenticatedConns int
	MaxStreamsPerToken      int
	MetricsListen           string
	MetricsTokenRequired    bool

	// SecretKey seals session secrets at rest (from OUTPOST_SECRET_KEY);
	// nil means the key file.
	SecretKey []byte
	// SecretKeyFile holds the key when SecretKey is nil; "" means
	// <data-dir>/secret-key, created on first start.
	SecretKeyFile string
	// OldSecretKeys open secrets sealed under earlier keys (from
	// OUTPOST_SECRET_KEYS_OLD).
	OldSecretKeys [][]byte

	// ReplicaID and ReplicaURL name this server among the replicas on one
	// PostgreSQL database and say where the others reach it; "" means the
	// server's defaults.
	ReplicaID  string
	ReplicaURL string
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
OUTPOST_SECRET_KEY_FILE, OUTPOST_REPLICA_ID, OUTPOST_REPLICA_URL,
OUTPOST_LLM_*, OUTPOST_LOG_LEVEL, OUTPOST_LOG_FORMAT. OUTPOST_ADMIN_TOKEN,
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
			return runServer(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Listen, "listen", "127.0.0.1:7420", "address to listen on (env "+envListen.Name+")")
	fl.StringVar(&opts.DataDir, "data-dir", "", "data directory (env "+envDataDir.Name+"; default $XDG_DATA_HOME/outpost or ~/.local/share/outpost)")
	fl.StringVar(&opts.Database, "database", "", "PostgreSQL URL, postgres://user:password@host:port/db (env "+envDatabaseURL.Name+"; default the embedded SQLite database in the data dir)")
	fl.StringVar(&opts.BlobStore, "blob-store", "", "where workspace snapshots, artifacts and spilled output are kept: fs (files in the data dir), postgres (the --database, shared by every server on it) or s3://bucket[/prefix][?endpoint=host:port&region=…&insecure=true] (an S3-compatible bucket; credentials in AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) (env "+envBlobStore.Name+"; default postgres with --database, else fs)")
	fl.StringVar(&opts.PublicURL, "public-url", "", "URL workers and remotes reach the server at (env "+envPublicURL.Name+"; default http://<listen>, https:// with --tls-cert)")
	fl.DurationVar(&opts.ClaimTTL, "claim-ttl", 300*time.Second, "how long a claimer has to get a remote connected, after claiming or renewing; a connected remote holds the claim past it (env "+envClaimTTL.Name+")")
	fl.DurationVar(&opts.ReconnectGrace, "reconnect-grace", 60*time.Second, "how long a claim holds after its remote's connection is gone, so the remote can reconnect (env "+envReconnectGrace.Name+")")
	fl.DurationVar(&opts.ArtifactRetention, "artifact-retention", defaultArtifactRetention, "how long artifacts of ended sessions are kept after they end, e.g. 720h (30 days); 0 keeps them forever (env "+envArtifactRetention.Name+")")
	fl.DurationVar(&opts.EndedEntryRetention, "ended-entry-retention", server.DefaultEndedEntryRetention, "how long the queue entry of an ended session stays listed, unclaimable, with session_status terminated, so that watchers see the session end before the entry is deleted; 0 deletes it at once (env "+envEndedRetention.Name+")")
	fl.DurationVar(&opts.SnapshotTTL, "snapshot-ttl", server.DefaultSnapshotTTL, "how long a suspended session waits for its resume; past it the session ends and its workspace snapshot is deleted")
	fl.Int64Var(&opts.MaxSnapshotBytes, "max-snapshot-bytes", server.DefaultMaxSnapshotBytes, "the largest workspace snapshot stored on suspend; a larger one fails the suspend and the session goes on running")
	fl.DurationVar(&opts.SnapshotInterval, "snapshot-interval", 0, "how often a running session that ran a call since its latest snapshot is checkpointed (its machine uploads a workspace snapshot and goes on), so that a machine that dies without suspending loses only what changed since; 0 never (env "+envSnapshotInterval.Name+")")
	fl.Int64Var(&opts.MaxCallOutputBytes, "max-call-output-bytes", server.DefaultMaxCallOutputBytes, "most output of one call the server keeps, in bytes: the transcript's first MiB and the rest spilled beside it; past it output is dropped and the transcript says how much (env "+envMaxCallOutput.Name+"; 0: no bound)")
	fl.Int64Var(&opts.MaxSessionOutputBytes, "max-session-output-bytes", server.DefaultMaxSessionOutputBytes, "most output one session's calls spill past the transcript's cap, in bytes, all calls together; past it output is dropped and the transcript says how much (env "+envMaxSessionOutput.Name+"; 0: no bound)")
	fl.StringVar(&opts.SecretKeyFile, "secret-key-file", "", "file holding the key session secrets are encrypted with, when "+envSecretKey.Name+" is not set (env "+envSecretKeyFile.Name+"; default <data-dir>/secret-key, created on first start)")
	addLogFlags(fl, &opts.LogLevel, &opts.LogFormat)
	addConfigFlag(fl, &opts.ConfigFile)
	fl.StringVar(&opts.DistDir, "dist-dir", "", "directory of remote builds to publish at /dist/ (env "+envDistDir.Name+"; default only this executable's)")
	fl.IntVar(&opts.ToolResultLimit, "tool-result-limit", 16000, "characters of one tool result shown to a model; the whole result stays on the transcript")
	fl.StringVar(&opts.LLM.Provider, "llm-provider", "", "model provider of llm sessions: openai (any OpenAI-compatible server) or anthropic (env "+envLLMProvider.Name+")")
	fl.StringVar(&opts.LLM.BaseURL, "llm-base-url", "", "the provider's API base URL, e.g. http://127.0.0.1:11434/v1 (env "+envLLMBaseURL.Name+")")
	fl.StringVar(&opts.LLM.Model, "llm-model", "", "default model of llm sessions (env "+envLLMModel.Name+"); the API key is read from "+envLLMAPIKey.Name)
	addServerEdgeFlags(fl, opts)
	fl.StringVar(&opts.ReplicaID, "replica-id", "", "name of this server among several replicas on one PostgreSQL database, the label replica of every metric (env "+envReplicaID.Name+"; default the hostname and a random suffix, new at each start)")
	fl.StringVar(&opts.ReplicaURL, "replica-url", "", "URL the other replicas reach this one at, e.g. http://10.0.0.5:7420 (env "+envReplicaURL.Name+"; default http://<listen>, https:// with --tls-cert, unless it is a wildcard address, else none: requests are then not forwarded here)")
	cmd.AddCommand(NewCmdServerBackup(f, nil), NewCmdServerRestore(f, nil))
	return cmd
}

// addServerEdgeFlags adds the flags of the network edge: TLS, connection
// limits and /metrics.
func addServerEdgeFlags(fl *pflag.FlagSet, opts *ServerOptions) {
	fl.StringVar(&opts.TLSCert, "tls-cert", "", "PEM certificate chain to serve HTTPS and WSS with, read again when it changes (env "+envTLSCert.Name+"; needs --tls-key)")
	fl.StringVar(&opts.TLSKey, "tls-key", "", "PEM private key of --tls-cert (env "+envTLSKey.Name+")")
	fl.DurationVar(&opts.IdleTimeout, "idle-timeout", server.DefaultIdleTimeout, "close a keep-alive connection idle this long")
	fl.DurationVar(&opts.ReadHeaderTimeout, "read-header-timeout", server.DefaultReadHeaderTimeout, "how long a client has to send a request's headers (and finish a TLS handshake)")
	fl.IntVar(&opts.MaxHeaderBytes, "max-header-bytes", server.DefaultMaxHeaderBytes, "largest request line and headers, in bytes; larger requests get 431")
	fl.IntVar(&opts.MaxUnauthenticatedConns, "max-unauthenticated-conns", server.DefaultMaxUnauthenticatedConns, "most connections open that have not made an authenticated request; past it a new one takes the place of the oldest that sent nothing, else part of a request (0: no bound)")
	fl.IntVar(&opts.MaxStreamsPerToken, "max-streams-per-token", server.DefaultMaxStreamsPerToken, "most queue watches and transcript follows open at once with one API token; more get 429 (0: no bound)")
	fl.StringVar(&opts.MetricsListen, "metrics-listen", "", "serve /metrics on this address (plain HTTP) instead of the main listener, e.g. 127.0.0.1:9420")
	fl.BoolVar(&opts.MetricsTokenRequired, "metrics-token-required", false, "make /metrics ask for a valid API token (any scope)")
}

// resolveEdge checks the edge flags and reads the TLS files' names from
// the environment.
func (o *ServerOptions) resolveEdge(fl *pflag.FlagSet, f *Factory) error {
	env := envFallback{fl: fl, getenv: f.Getenv}
	env.string("tls-cert", envTLSCert, &o.TLSCert)
	env.string("tls-key", envTLSKey, &o.TLSKey)
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return usageErrorf("--tls-cert and --tls-key go together (or %s and %s)", envTLSCert.Name, envTLSKey.Name)
	}
	if o.IdleTimeout <= 0 || o.ReadHeaderTimeout <= 0 {
		return usageErrorf("--idle-timeout and --read-header-timeout must be positive")
	}
	if o.MaxHeaderBytes < 4096 {
		return usageErrorf("--max-header-bytes must be at least 4096")
	}
	if o.MaxUnauthenticatedConns < 0 || o.MaxStreamsPerToken < 0 {
		return usageErrorf("--max-unauthenticated-conns and --max-streams-per-token must not be negative (0: no bound)")
	}
	return nil
}

// noBound maps a flag's 0 (no bound) to the server option's negative.
func noBound(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// noBoundDuration maps a duration flag's 0 (none) to the server option's
// negative, as noBound does.
func noBoundDuration(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// noBound64 is noBound of a byte count.
func noBound64(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

// resolve fills the settings whose flags were not given from the
// environment, then from defaults.
func (o *ServerOptions) resolve(fl *pflag.FlagSet, f *Factory) error {
	env := envFallback{fl: fl, getenv: f.Getenv}
	env.string("listen", envListen, &o.Listen)
	env.string("data-dir", envDataDir, &o.DataDir)
	env.string("public-url", envPublicURL, &o.PublicURL)
	env.string("database", envDatabaseURL, &o.Database)
	env.string("dist-dir", envDistDir, &o.DistDir)
	env.string("blob-store", envBlobStore, &o.BlobStore)
	switch {
	case o.BlobStore == "", o.BlobStore == server.BlobStoreFS:
	case o.BlobStore == server.BlobStorePostgres:
		if o.Database == "" {
			return usageErrorf("--blob-store postgres keeps blobs in the PostgreSQL database: give --database postgres://… too, or use --blob-store fs")
		}
	case strings.HasPrefix(o.BlobStore, "s3://"):
		if _, err := blob.ParseS3URL(o.BlobStore); err != nil {
			return usageErrorf("--blob-store: %v", err)
		}
	default:
		return usageErrorf("--blob-store must be fs, postgres or s3://bucket[/prefix][?endpoint=host:port&region=…&insecure=true], not %q", o.BlobStore)
	}
	env.string("secret-key-file", envSecretKeyFile, &o.SecretKeyFile)
	env.string("replica-id", envReplicaID, &o.ReplicaID)
	env.string("replica-url", envReplicaURL, &o.ReplicaURL)
	if err := o.resolveSecretKeys(f); err != nil {
		return err
	}
	if o.Database != "" && !server.IsPostgresURL(o.Database) {
		// Not the URL itself: it may hold a password.
		return usageErrorf("--database must be a PostgreSQL URL starting with postgres:// or postgresql://")
	}
	if v := envClaimTTL.Get(f.Getenv); !fl.Changed("claim-ttl") && v != "" {
		d, err := parseSeconds(v)
		if err != nil {
			return usageErrorf("%s=%q is not a duration such as 300s or 5m", envClaimTTL.Name, v)
		}
		o.ClaimTTL = d
	}
	if o.ClaimTTL <= 0 {
		return usageErrorf("--claim-ttl must be positive")
	}
	if v := envReconnectGrace.Get(f.Getenv); !fl.Changed("reconnect-grace") && v != "" {
		d, err := parseSeconds(v)
		if err != nil {
			return usageErrorf("%s=%q is not a duration such as 60s or 2m", envReconnectGrace.Name, v)
		}
		o.ReconnectGrace = d
	}
	if o.ReconnectGrace <= 0 {
		return usageErrorf("--reconnect-grace must be positive")
	}
	if v := envArtifactRetention.Get(f.Getenv); !fl.Changed("artifact-retention") && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return usageErrorf("%s=%q is not a duration such as 720h (30 days), or 0 to keep artifacts forever", envArtifactRetention.Name, v)
		}
		o.ArtifactRetention = d
	}
	if o.ArtifactRetention < 0 {
		return usageErrorf("--artifact-retention must not be negative: give a duration such as 720h (30 days), or 0 to keep artifacts forever")
	}
	if v := envEndedRetention.Get(f.Getenv); !fl.Changed("ended-entry-retention") && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return usageErrorf("%s=%q is not a duration such as 10m, or 0 to delete the entries of ended sessions at once", envEndedRetention.Name, v)
		}
		o.EndedEntryRetention = d
	}
	if o.EndedEntryRetention < 0 {
		return usageErrorf("--ended-entry-retention must not be negative: give a duration such as 10m, or 0 to delete the entries of ended sessions at once")
	}
	if v := envSnapshotInterval.Get(f.Getenv); !fl.Changed("snapshot-interval") && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return usageErrorf("%s=%q is not a duration such as 15m, or 0 for no checkpoints", envSnapshotInterval.Name, v)
		}
		o.SnapshotInterval = d
	}
	if o.SnapshotInterval < 0 {
		return usageErrorf("--snapshot-interval must not be negative: give a duration such as 15m, or 0 for no checkpoints")
	}
	for _, v := range []struct {
		flag string
		env  api.EnvVar
		dst  *int64
	}{{"max-call-output-bytes", envMaxCallOutput, &o.MaxCallOutputBytes}, {"max-session-output-bytes", envMaxSessionOutput, &o.MaxSessionOutputBytes}} {
		if val := v.env.Get(f.Getenv); !fl.Changed(v.flag) && val != "" {
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return usageErrorf("%s=%q is not a number of bytes such as 104857600, or 0 for no bound", v.env.Name, val)
			}
			*v.dst = n
		}
		if *v.dst < 0 {
			return usageErrorf("--%s must not be negative: give a number of bytes, or 0 for no bound", v.flag)
		}
	}
	if o.SnapshotTTL <= 0 || o.MaxSnapshotBytes <= 0 {
		return usageErrorf("--snapshot-ttl and --max-snapshot-bytes must be positive")
	}
	if err := o.resolveEdge(fl, f); err != nil {
		return err
	}
	if o.ToolResultLimit < 1000 {
		return usageErrorf("--tool-result-limit must be at least 1000 characters")
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
	return resolveLog(fl, f.Getenv, &o.LogLevel, &o.LogFormat)
}

// resolveSecretKeys reads OUTPOST_SECRET_KEY and OUTPOST_SECRET_KEYS_OLD.
// Errors never show a key.
func (o *ServerOptions) resolveSecretKeys(f *Factory) error {
	if v := envSecretKey.Get(f.Getenv); v != "" {
		k, err := sealed.ParseKey(v)
		if err != nil {
			return usageErrorf("%s: %v", envSecretKey.Name, err)
		}
		o.SecretKey = k
	}
	old := strings.FieldsFunc(envSecretKeysOld.Get(f.Getenv), func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	for i, v := range old {
		k, err := sealed.ParseKey(v)
		if err != nil {
			return usageErrorf("%s, key %d of %d: %v", envSecretKeysOld.Name, i+1, len(old), err)
		}
		o.OldSecretKeys = append(o.OldSecretKeys, k)
	}
	return nil
}

// defaultArtifactRetention keeps artifacts of ended sessions for 30 days.
const defaultArtifactRetention = 30 * 24 * time.Hour

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

// parseSeconds parses a Go duration or a bare number of seconds.
func parseSeconds(s string) (time.Duration, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	return time.ParseDuration(s)
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
	if o.Database != "" {
		where := "(unparsable URL)"
		if u, err := url.Parse(o.Database); err == nil {
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

// serverOptions maps the settings to the server's: the flags' 0 for "no
// bound" is the server's negative. The logger, stdout and model provider
// are runServer's to add.
func (o *ServerOptions) serverOptions() server.Options {
	return server.Options{
		ToolResultLimit: o.ToolResultLimit,
		Listen:          o.Listen,
		DataDir:         o.DataDir,
		DatabaseURL:     o.Database,
		BlobStore:       o.BlobStore,
		PublicURL:       o.PublicURL,
		ClaimTTL:        o.ClaimTTL,
		ReconnectGrace:  o.ReconnectGrace,
		AdminToken:      o.AdminToken,
		SecretKey:       o.SecretKey,
		SecretKeyFile:   o.SecretKeyFile,
		OldSecretKeys:   o.OldSecretKeys,

		ArtifactRetention:   o.ArtifactRetention,
		EndedEntryRetention: noBoundDuration(o.EndedEntryRetention),
		DistDir:             o.DistDir,
		SnapshotTTL:         o.SnapshotTTL,
		MaxSnapshotBytes:    o.MaxSnapshotBytes,
		SnapshotInterval:    o.SnapshotInterval,

		MaxCallOutputBytes:    noBound64(o.MaxCallOutputBytes),
		MaxSessionOutputBytes: noBound64(o.MaxSessionOutputBytes),

		TLSCertFile:             o.TLSCert,
		TLSKeyFile:              o.TLSKey,
		IdleTimeout:             o.IdleTimeout,
		ReadHeaderTimeout:       o.ReadHeaderTimeout,
		MaxHeaderBytes:          o.MaxHeaderBytes,
		MaxUnauthenticatedConns: noBound(o.MaxUnauthenticatedConns),
		MaxStreamsPerToken:      noBound(o.MaxStreamsPerToken),
		MetricsListen:           o.MetricsListen,
		MetricsTokenRequired:    o.MetricsTokenRequired,

		ReplicaID:  o.ReplicaID,
		ReplicaURL: o.ReplicaURL,
	}
}
