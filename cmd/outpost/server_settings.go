package main

import (
	"strings"
	"time"

	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/server"
)

// serverSetting is one setting of `outpost server`, bound to a field of
// server.Options; its check sees the whole ServerOptions.
type serverSetting = commandSetting[ServerOptions, server.Options]

// serverSettings are the settings of `outpost server` but the model
// provider's (llm.ConfigFromEnv reads those) and the log's (every
// long-running command shares them). Their checks run in this order, so
// the first of several mistakes reported is always the same one; the
// secret keys, which only the environment gives, have a row without a flag
// for that alone.
var serverSettings = []serverSetting{
	{flag: "listen", env: envListen, def: "127.0.0.1:7420", field: func(o *server.Options) any { return &o.Listen },
		usage: "address to listen on (env $ENV)"},
	{flag: "data-dir", env: envDataDir, def: "", field: func(o *server.Options) any { return &o.DataDir },
		usage: "data directory (env $ENV; default $XDG_DATA_HOME/outpost or ~/.local/share/outpost)"},
	{flag: "public-url", env: envPublicURL, def: "", field: func(o *server.Options) any { return &o.PublicURL },
		usage: "URL workers and remotes reach the server at (env $ENV; default http://<listen>, https:// with --tls-cert)"},
	{flag: "dist-dir", env: envDistDir, def: "", field: func(o *server.Options) any { return &o.DistDir },
		usage: "directory of remote builds to publish at /dist/ (env $ENV; default only this executable's)"},
	{flag: "blob-store", env: envBlobStore, def: "", field: func(o *server.Options) any { return &o.BlobStore },
		usage: "where workspace snapshots, artifacts and spilled output are kept: fs (files in the data dir), postgres (the --database, shared by every server on it) or s3://bucket[/prefix][?endpoint=host:port&region=…&insecure=true] (an S3-compatible bucket; credentials in AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) (env $ENV; default postgres with --database, else fs)",
		check: checkBlobStore},
	{flag: "secret-key-file", env: envSecretKeyFile, def: "", field: func(o *server.Options) any { return &o.SecretKeyFile },
		usage: "file holding the key session secrets are encrypted with, when " + envSecretKey.Name + " is not set (env $ENV; default <data-dir>/secret-key, created on first start)"},
	{flag: "replica-id", env: envReplicaID, def: "", field: func(o *server.Options) any { return &o.ReplicaID },
		usage: "name of this server among several replicas on one PostgreSQL database, the label replica of every metric (env $ENV; default the hostname and a random suffix, new at each start)"},
	{flag: "replica-url", env: envReplicaURL, def: "", field: func(o *server.Options) any { return &o.ReplicaURL },
		usage: "URL the other replicas reach this one at, e.g. http://10.0.0.5:7420 (env $ENV; default http://<listen>, https:// with --tls-cert, unless it is a wildcard address, else none: requests are then not forwarded here)"},
	// The keys have no flag: they are only ever given in the environment.
	{check: (*ServerOptions).resolveSecretKeys},
	{flag: "database", env: envDatabaseURL, def: "", field: func(o *server.Options) any { return &o.DatabaseURL },
		usage: "PostgreSQL URL, postgres://user:password@host:port/db (env $ENV; default the embedded SQLite database in the data dir)",
		check: func(o *ServerOptions) error {
			if o.DatabaseURL != "" && !server.IsPostgresURL(o.DatabaseURL) {
				// Not the URL itself: it may hold a password.
				return usageErrorf("--database must be a PostgreSQL URL starting with postgres:// or postgresql://")
			}
			return nil
		}},
	{flag: "claim-ttl", env: envClaimTTL, def: 300 * time.Second, field: func(o *server.Options) any { return &o.ClaimTTL },
		usage:       "how long a claimer has to get a remote connected, after claiming or renewing; a connected remote holds the claim past it (env $ENV)",
		bareSeconds: true, want: "a duration such as 300s or 5m", least: 1, refuse: "--claim-ttl must be positive"},
	{flag: "reconnect-grace", env: envReconnectGrace, def: 60 * time.Second, field: func(o *server.Options) any { return &o.ReconnectGrace },
		usage:       "how long a claim holds after its remote's connection is gone, so the remote can reconnect (env $ENV)",
		bareSeconds: true, want: "a duration such as 60s or 2m", least: 1, refuse: "--reconnect-grace must be positive"},
	{flag: "artifact-retention", env: envArtifactRetention, def: defaultArtifactRetention, field: func(o *server.Options) any { return &o.ArtifactRetention },
		usage:  "how long artifacts of ended sessions are kept after they end, e.g. 720h (30 days); 0 keeps them forever (env $ENV)",
		want:   "a duration such as 720h (30 days), or 0 to keep artifacts forever",
		refuse: "--artifact-retention must not be negative: give a duration such as 720h (30 days), or 0 to keep artifacts forever"},
	{flag: "audit-retention", env: envAuditRetention, def: defaultAuditRetention, field: func(o *server.Options) any { return &o.AuditRetention },
		usage:  "how long audit log entries are kept, e.g. 9600h (400 days); older ones are removed from the oldest end and the chain stays verifiable; 0 keeps them forever (env $ENV)",
		want:   "a duration such as 9600h (400 days), or 0 to keep the audit log forever",
		refuse: "--audit-retention must not be negative: give a duration such as 9600h (400 days), or 0 to keep the audit log forever"},
	{flag: "ended-entry-retention", env: envEndedRetention, def: server.DefaultEndedEntryRetention, field: func(o *server.Options) any { return &o.EndedEntryRetention },
		usage:      "how long the queue entry of an ended session stays listed, unclaimable, with session_status terminated, so that watchers see the session end before the entry is deleted; 0 deletes it at once (env $ENV)",
		want:       "a duration such as 10m, or 0 to delete the entries of ended sessions at once",
		refuse:     "--ended-entry-retention must not be negative: give a duration such as 10m, or 0 to delete the entries of ended sessions at once",
		zeroIsNone: true},
	{flag: "snapshot-interval", env: envSnapshotInterval, def: time.Duration(0), field: func(o *server.Options) any { return &o.SnapshotInterval },
		usage:  "how often a running session that ran a call since its latest snapshot is checkpointed (its machine uploads a workspace snapshot and goes on), so that a machine that dies without suspending loses only what changed since; 0 never (env $ENV)",
		want:   "a duration such as 15m, or 0 for no checkpoints",
		refuse: "--snapshot-interval must not be negative: give a duration such as 15m, or 0 for no checkpoints"},
	{flag: "max-call-output-bytes", env: envMaxCallOutput, def: int64(server.DefaultMaxCallOutputBytes), field: func(o *server.Options) any { return &o.MaxCallOutputBytes },
		usage:      "most output of one call the server keeps, in bytes: the transcript's first MiB and the rest spilled beside it; past it output is dropped and the transcript says how much (env $ENV; 0: no bound)",
		want:       "a number of bytes such as 104857600, or 0 for no bound",
		refuse:     "--max-call-output-bytes must not be negative: give a number of bytes, or 0 for no bound",
		zeroIsNone: true},
	{flag: "max-session-output-bytes", env: envMaxSessionOutput, def: int64(server.DefaultMaxSessionOutputBytes), field: func(o *server.Options) any { return &o.MaxSessionOutputBytes },
		usage:      "most output one session's calls spill past the transcript's cap, in bytes, all calls together; past it output is dropped and the transcript says how much (env $ENV; 0: no bound)",
		want:       "a number of bytes such as 104857600, or 0 for no bound",
		refuse:     "--max-session-output-bytes must not be negative: give a number of bytes, or 0 for no bound",
		zeroIsNone: true},
	{flag: "snapshot-ttl", def: server.DefaultSnapshotTTL, field: func(o *server.Options) any { return &o.SnapshotTTL },
		usage: "how long a suspended session waits for its resume; past it the session ends and its workspace snapshot is deleted",
		least: 1, refuse: "--snapshot-ttl and --max-snapshot-bytes must be positive"},
	{flag: "max-snapshot-bytes", def: server.DefaultMaxSnapshotBytes, field: func(o *server.Options) any { return &o.MaxSnapshotBytes },
		usage: "the largest workspace snapshot stored on suspend; a larger one fails the suspend and the session goes on running",
		least: 1, refuse: "--snapshot-ttl and --max-snapshot-bytes must be positive"},
	{flag: "tls-cert", env: envTLSCert, def: "", field: func(o *server.Options) any { return &o.TLSCertFile },
		usage: "PEM certificate chain to serve HTTPS and WSS with, read again when it changes (env $ENV; needs --tls-key)"},
	{flag: "tls-key", env: envTLSKey, def: "", field: func(o *server.Options) any { return &o.TLSKeyFile },
		usage: "PEM private key of --tls-cert (env $ENV)",
		check: func(o *ServerOptions) error {
			if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
				return usageErrorf("--tls-cert and --tls-key go together (or %s and %s)", envTLSCert.Name, envTLSKey.Name)
			}
			return nil
		}},
	{flag: "oidc-issuer", env: envOIDCIssuer, def: "", field: func(o *server.Options) any { return &o.SSO.Issuer },
		usage: "issuer URL of the OpenID Connect provider people sign in with; its client's redirect URL is <public-url>/ui/auth/callback (env $ENV; default none: API tokens only)"},
	{flag: "oidc-client-id", env: envOIDCClientID, def: "", field: func(o *server.Options) any { return &o.SSO.ClientID },
		usage: "the server's client id at the OpenID Connect provider (env $ENV)"},
	{flag: "oidc-client-secret", env: envOIDCClientSecret, def: "", field: func(o *server.Options) any { return &o.SSO.ClientSecret },
		usage: "the server's client secret at the provider; prefer the environment, which ps does not show (env $ENV; default none: a public client, PKCE alone)",
		check: func(o *ServerOptions) error {
			if o.SSO.Issuer != "" && o.SSO.ClientID == "" {
				return usageErrorf("--oidc-issuer needs --oidc-client-id (or %s)", envOIDCClientID.Name)
			}
			return nil
		}},
	{flag: "oidc-name", def: "", field: func(o *server.Options) any { return &o.SSO.DisplayName },
		usage: "the provider's name on the sign-in page's button, \"Sign in with <name>\" (default single sign-on)"},
	{flag: "oidc-scopes", def: []string(nil), field: func(o *server.Options) any { return &o.SSO.Scopes },
		usage: "scopes asked for besides openid, repeated (default profile, email, offline_access)"},
	{flag: "oidc-allowed-domain", def: []string(nil), field: func(o *server.Options) any { return &o.SSO.AllowedDomains },
		usage: "admit only users whose verified email is in this domain, repeated (default any)"},
	{flag: "oidc-groups-claim", def: "groups", field: func(o *server.Options) any { return &o.SSO.GroupsClaim },
		usage: "the ID token or userinfo claim that lists a user's groups"},
	{flag: "oidc-group-role", def: []string(nil), field: func(o *server.Options) any { return &o.SSO.GroupRoles },
		usage: "give a provider group a role everywhere, group=role (admin, operator, member or viewer), repeated; per-outpost roles are given with outpost roles grant"},
	{flag: "oidc-recheck-interval", def: 5 * time.Minute, field: func(o *server.Options) any { return &o.SSO.RecheckInterval },
		usage: "how often, at most, the provider is asked again whether a signed-in user may still use the server; a user it refuses loses access then",
		least: 1, refuse: "--oidc-recheck-interval and --oidc-session-lifetime must be positive"},
	{flag: "oidc-session-lifetime", def: 12 * time.Hour, field: func(o *server.Options) any { return &o.SSO.SessionLifetime },
		usage: "how long a sign-in through the provider lasts",
		least: 1, refuse: "--oidc-recheck-interval and --oidc-session-lifetime must be positive"},
	{flag: "idle-timeout", def: server.DefaultIdleTimeout, field: func(o *server.Options) any { return &o.IdleTimeout },
		usage: "close a keep-alive connection idle this long",
		least: 1, refuse: "--idle-timeout and --read-header-timeout must be positive"},
	{flag: "read-header-timeout", def: server.DefaultReadHeaderTimeout, field: func(o *server.Options) any { return &o.ReadHeaderTimeout },
		usage: "how long a client has to send a request's headers (and finish a TLS handshake)",
		least: 1, refuse: "--idle-timeout and --read-header-timeout must be positive"},
	{flag: "max-header-bytes", def: server.DefaultMaxHeaderBytes, field: func(o *server.Options) any { return &o.MaxHeaderBytes },
		usage: "largest request line and headers, in bytes; larger requests get 431",
		least: 4096, refuse: "--max-header-bytes must be at least 4096"},
	{flag: "max-unauthenticated-conns", def: server.DefaultMaxUnauthenticatedConns, field: func(o *server.Options) any { return &o.MaxUnauthenticatedConns },
		usage:  "most connections open that have not made an authenticated request; past it a new one takes the place of the oldest that sent nothing, else part of a request (0: no bound)",
		refuse: "--max-unauthenticated-conns and --max-streams-per-token must not be negative (0: no bound)", zeroIsNone: true},
	{flag: "max-streams-per-token", def: server.DefaultMaxStreamsPerToken, field: func(o *server.Options) any { return &o.MaxStreamsPerToken },
		usage:  "most queue watches and transcript follows open at once with one API token; more get 429 (0: no bound)",
		refuse: "--max-unauthenticated-conns and --max-streams-per-token must not be negative (0: no bound)", zeroIsNone: true},
	{flag: "metrics-listen", def: "", field: func(o *server.Options) any { return &o.MetricsListen },
		usage: "serve /metrics on this address (plain HTTP) instead of the main listener, e.g. 127.0.0.1:9420"},
	{flag: "metrics-token-required", def: false, field: func(o *server.Options) any { return &o.MetricsTokenRequired },
		usage: "make /metrics ask for a valid API token (any scope)"},
	{flag: "pprof-listen", env: envPprofListen, def: "", field: func(o *server.Options) any { return &o.PprofListen },
		usage: "serve Go's runtime profiles at /debug/pprof/ on this address (plain HTTP, no token: keep it private, e.g. 127.0.0.1:6060); off by default (env $ENV)"},
	{flag: "webhook-allow-internal", def: false, field: func(o *server.Options) any { return &o.Webhooks.AllowInternal },
		usage: "let webhook subscriptions send to loopback and link-local addresses (the cloud metadata address among them), which are refused by default"},
	{flag: "tool-result-limit", def: 16000, field: func(o *server.Options) any { return &o.ToolResultLimit },
		usage: "characters of one tool result shown to a model; the whole result stays on the transcript",
		least: 1000, refuse: "--tool-result-limit must be at least 1000 characters"},
}

// defaultArtifactRetention keeps artifacts of ended sessions for 30 days.
const defaultArtifactRetention = 30 * 24 * time.Hour

// defaultAuditRetention keeps audit log entries for 400 days.
const defaultAuditRetention = 400 * 24 * time.Hour

// checkBlobStore checks --blob-store, which must name a store the server
// has and, for postgres, a database to keep it in.
func checkBlobStore(o *ServerOptions) error {
	switch b := o.BlobStore; {
	case b == "", b == server.BlobStoreFS:
	case b == server.BlobStorePostgres:
		if o.DatabaseURL == "" {
			return usageErrorf("--blob-store postgres keeps blobs in the PostgreSQL database: give --database postgres://… too, or use --blob-store fs")
		}
	case strings.HasPrefix(b, "s3://"):
		if _, err := blob.ParseS3URL(b); err != nil {
			return usageErrorf("--blob-store: %v", err)
		}
	default:
		return usageErrorf("--blob-store must be fs, postgres or s3://bucket[/prefix][?endpoint=host:port&region=…&insecure=true], not %q", b)
	}
	return nil
}
