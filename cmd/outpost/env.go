package main

import (
	"slices"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/llm"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// The environment variables of the outpost command that are neither the
// spawn contract's nor `worker start`'s (those are api.EnvVar values in
// package api). Each name is spelled once, here or there: flag help,
// lookups and messages take it from these values.
var (
	envListen            = api.EnvVar{Name: "OUTPOST_LISTEN", Meaning: "address the server listens on (--listen)"}
	envDataDir           = api.EnvVar{Name: "OUTPOST_DATA_DIR", Meaning: "the server's data directory (--data-dir)"}
	envDatabaseURL       = api.EnvVar{Name: "OUTPOST_DATABASE_URL", Meaning: "PostgreSQL URL of the server's state (--database)"}
	envPublicURL         = api.EnvVar{Name: "OUTPOST_PUBLIC_URL", Meaning: "URL workers and remotes reach the server at (--public-url)"}
	envClaimTTL          = api.EnvVar{Name: "OUTPOST_CLAIM_TTL", Meaning: "how long a claimer has to get a remote connected (--claim-ttl)"}
	envReconnectGrace    = api.EnvVar{Name: "OUTPOST_RECONNECT_GRACE", Meaning: "how long a claim outlives its remote's connection (--reconnect-grace)"}
	envArtifactRetention = api.EnvVar{Name: "OUTPOST_ARTIFACT_RETENTION", Meaning: "how long artifacts of ended sessions are kept (--artifact-retention)"}
	envAuditRetention    = api.EnvVar{Name: "OUTPOST_AUDIT_RETENTION", Meaning: "how long audit log entries are kept (--audit-retention)"}
	envEndedRetention    = api.EnvVar{Name: "OUTPOST_ENDED_ENTRY_RETENTION", Meaning: "how long the queue entries of ended sessions stay listed (--ended-entry-retention)"}
	envSnapshotInterval  = api.EnvVar{Name: "OUTPOST_SNAPSHOT_INTERVAL", Meaning: "how often running sessions are checkpointed (--snapshot-interval)"}
	envMaxCallOutput     = api.EnvVar{Name: "OUTPOST_MAX_CALL_OUTPUT_BYTES", Meaning: "most output of one call the server keeps (--max-call-output-bytes)"}
	envMaxSessionOutput  = api.EnvVar{Name: "OUTPOST_MAX_SESSION_OUTPUT_BYTES", Meaning: "most spilled output of one session the server keeps (--max-session-output-bytes)"}
	envBlobStore         = api.EnvVar{Name: "OUTPOST_BLOB_STORE", Meaning: "where snapshots, artifacts and spilled output are kept: fs, postgres or s3://… (--blob-store)"}
	envDistDir           = api.EnvVar{Name: "OUTPOST_DIST_DIR", Meaning: "directory of remote builds published at /dist/ (--dist-dir)"}
	envTLSCert           = api.EnvVar{Name: "OUTPOST_TLS_CERT", Meaning: "PEM certificate chain of HTTPS (--tls-cert)"}
	envTLSKey            = api.EnvVar{Name: "OUTPOST_TLS_KEY", Meaning: "PEM private key of --tls-cert (--tls-key)"}
	envOIDCIssuer        = api.EnvVar{Name: "OUTPOST_OIDC_ISSUER", Meaning: "OpenID Connect provider people sign in with (--oidc-issuer)"}
	envOIDCClientID      = api.EnvVar{Name: "OUTPOST_OIDC_CLIENT_ID", Meaning: "the server's client id at the OpenID Connect provider (--oidc-client-id)"}
	envOIDCClientSecret  = api.EnvVar{Name: "OUTPOST_OIDC_CLIENT_SECRET", Meaning: "the server's client secret at the OpenID Connect provider (--oidc-client-secret)"}
	envSecretKey         = api.EnvVar{Name: "OUTPOST_SECRET_KEY", Meaning: "key session secrets are sealed with, base64 or hex"}
	envSecretKeyFile     = api.EnvVar{Name: "OUTPOST_SECRET_KEY_FILE", Meaning: "file holding the secret key (--secret-key-file)"}
	envSecretKeysOld     = api.EnvVar{Name: "OUTPOST_SECRET_KEYS_OLD", Meaning: "earlier secret keys, comma-separated, to reseal under the new one"}
	envAdminToken        = api.EnvVar{Name: "OUTPOST_ADMIN_TOKEN", Meaning: "the server's admin token"}
	envReplicaID         = api.EnvVar{Name: "OUTPOST_REPLICA_ID", Meaning: "name of this server among replicas on one database (--replica-id)"}
	envReplicaURL        = api.EnvVar{Name: "OUTPOST_REPLICA_URL", Meaning: "URL the other replicas reach this server at (--replica-url)"}
	envPprofListen       = api.EnvVar{Name: "OUTPOST_PPROF_LISTEN", Meaning: "private address the server's runtime profiles are served on (--pprof-listen)"}
	envLogLevel          = api.EnvLogLevel
	envLogFormat         = api.EnvLogFormat
	// envCAFile is the global --ca-file's variable, applied in resolve by
	// the commands that take a config file so that it beats the file.
	envCAFile = api.EnvVar{Name: tlsconfig.EnvCAFile, Meaning: "PEM file of CA certificates to trust (--ca-file)"}
	// The model provider's settings, read by llm.ConfigFromEnv, which
	// spells them too.
	envLLMProvider = api.EnvVar{Name: llm.EnvProvider, Meaning: "model provider of llm sessions (--llm-provider)"}
	envLLMBaseURL  = api.EnvVar{Name: llm.EnvBaseURL, Meaning: "the provider's API base URL (--llm-base-url)"}
	envLLMModel    = api.EnvVar{Name: llm.EnvModel, Meaning: "default model of llm sessions (--llm-model)"}
	envLLMAPIKey   = api.EnvVar{Name: llm.EnvAPIKey, Meaning: "the provider's API key"}
	envLLMRetryFor = api.EnvVar{Name: llm.EnvRetryFor, Meaning: "how long a failing model call is retried (--llm-retry-for)"}
	envPrices      = api.EnvVar{Name: "OUTPOST_PRICES", Meaning: "price table of model calls as JSON (--prices)"}
	// How the computer tool and its screenshots reach models.
	envLLMComputerTool        = api.EnvVar{Name: llm.EnvComputerTool, Meaning: "native (default) or function: how Anthropic models get the computer tool"}
	envLLMComputerToolVersion = api.EnvVar{Name: llm.EnvComputerToolVersion, Meaning: "computer_20250124 (default) or computer_20251124: the native computer tool's version"}
	envLLMToolImages          = api.EnvVar{Name: llm.EnvToolImages, Meaning: "message (default) or text: how OpenAI-compatible servers get tool results' images"}
)

// serverEnv lists the variables `outpost server` reads.
var serverEnv = []api.EnvVar{
	envListen, envDataDir, envDatabaseURL, envPublicURL, envClaimTTL, envReconnectGrace, envArtifactRetention, envAuditRetention, envEndedRetention,
	envSnapshotInterval, envMaxCallOutput, envMaxSessionOutput, envBlobStore, envDistDir, envTLSCert, envTLSKey, envSecretKey, envSecretKeysOld, envSecretKeyFile, envAdminToken,
	envReplicaID, envReplicaURL, envPprofListen, envOIDCIssuer, envOIDCClientID, envOIDCClientSecret,
	envLLMProvider, envLLMBaseURL, envLLMModel, envLLMAPIKey, envLLMRetryFor, envLLMComputerTool, envLLMComputerToolVersion, envLLMToolImages,
	envLogLevel, envLogFormat, envPrices,
}

// cliEnv lists every variable the outpost command reads, under either of
// its names.
var cliEnv = slices.Concat(serverEnv, []api.EnvVar{envCAFile}, api.WorkerEnv, api.SpawnEnv)

// envNames is "OUTPOST_X, DEVIN_X": v's names for flag help.
func envNames(v api.EnvVar) string {
	n := v.Names()
	if len(n) == 2 {
		return n[0] + ", " + n[1]
	}
	return n[0]
}
