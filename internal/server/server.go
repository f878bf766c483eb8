// Package server is Outpost's control plane: the REST and fleet API and the
// gateway remotes dial into. It runs the agent loop of every running
// session (package agent), handing it the store, the committed-event feed,
// the gateway's connections and the message locks.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/agent"
	"github.com/outpost-sh/outpost/internal/blob"
	"github.com/outpost-sh/outpost/internal/budget"
	"github.com/outpost-sh/outpost/internal/datadir"
	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/liveview"
	"github.com/outpost-sh/outpost/internal/llm"
	"github.com/outpost-sh/outpost/internal/queuefeed"
	"github.com/outpost-sh/outpost/internal/retention"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/postgres"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
	"github.com/outpost-sh/outpost/internal/suspend"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
	"github.com/outpost-sh/outpost/internal/web"
	"github.com/outpost-sh/outpost/internal/webhooks"
)

// Options configure a Server. Zero values mean the documented default.
type Options struct {
	// Listen is the TCP address to serve on; "" means 127.0.0.1:7420.
	// Port 0 picks a free port (see Server.URL).
	Listen string
	// DataDir holds the database, the admin token file and, with the file
	// blob store (BlobStore), snapshots, artifacts and spilled output;
	// required.
	DataDir string
	// PublicURL is the base URL workers are told; "" means http://<listen
	// address> (https:// with TLS). The gateway URL is derived from it:
	// ws:// from http://, wss:// from https://.
	PublicURL string
	// ClaimTTL is how long a claimer has, after claiming or renewing, to
	// get a remote connected; 0 means 300s. While the claim's remote is
	// connected the claim holds past it.
	ClaimTTL time.Duration
	// ReconnectGrace is how long a claim holds after its remote's gateway
	// connection is gone (closed, or silent past the gateway's ping), so
	// that a remote cut off for less can reconnect and go on; the claim
	// lapses at the later of this and its deadline. 0 means 60s.
	ReconnectGrace time.Duration
	// AdminToken, when set, is the admin token (instead of a generated one).
	AdminToken string
	// SweepInterval is how often lapsed claims are requeued (and, five
	// times slower, session limits checked); 0 means 1s.
	SweepInterval time.Duration
	// WatchMaxDuration bounds each queue watch stream; 0 means 4m30s.
	WatchMaxDuration time.Duration
	// EndedEntryRetention is how long the queue entry of an ended session
	// stays listed (pending, session_status terminated) before a sweep
	// deletes it; 0 means DefaultEndedEntryRetention, negative deletes it
	// when the session ends or its claim is released.
	EndedEntryRetention time.Duration
	// KeepaliveInterval spaces SSE keepalive comments; 0 means 15s.
	KeepaliveInterval time.Duration
	// SSO, when its Issuer is set, signs people in through an OpenID
	// Connect provider (sso.go); otherwise API tokens alone sign in.
	SSO SSOOptions
	// TokenRecheckInterval is how often a request that is still running
	// (a transcript follow, a queue watch, a live desktop) checks its API
	// token again, ending when the token was revoked or expired; 0 means
	// 15s. A token that expires sooner ends its requests at its expiry.
	TokenRecheckInterval time.Duration
	// DeviceCodeTTL is how long a device login's codes live (RFC 8628);
	// 0 means 10 minutes.
	DeviceCodeTTL time.Duration
	// DevicePollInterval is the least time between two polls of one
	// device code; 0 means 5s.
	DevicePollInterval time.Duration
	// OutputCapBytes is how much output of one call the transcript keeps;
	// the rest is spilled into the blob store. 0 means 1 MiB.
	OutputCapBytes int64
	// MaxCallOutputBytes bounds the output of one call the server keeps,
	// the transcript's part and the spilled rest together; past it output
	// is dropped and the transcript says how much. 0 means
	// DefaultMaxCallOutputBytes; negative, no bound.
	MaxCallOutputBytes int64
	// MaxSessionOutputBytes bounds the spilled output one session keeps
	// over all its calls; past it output is dropped as past
	// MaxCallOutputBytes. 0 means DefaultMaxSessionOutputBytes; negative,
	// no bound.
	MaxSessionOutputBytes int64
	// LLM is the model provider of llm sessions; nil means llm sessions
	// are refused.
	LLM llm.Provider
	// Prices is the price table that estimates the cost of model calls
	// (usage.cost_usd, limits.max_cost_usd, outpost budgets); nil means
	// budget.DefaultPrices. LLMModel names the model of sessions that name
	// none, for its price.
	Prices   map[string]budget.Price
	LLMModel string
	// ToolResultLimit is how many characters of one tool result a model
	// sees; the whole result stays on the transcript. 0 means 16000.
	ToolResultLimit int
	// DatabaseURL, when set, selects a PostgreSQL store at this URL
	// (postgres:// or postgresql://) instead of the embedded SQLite
	// database in DataDir; its migrations run at start.
	DatabaseURL string
	// Store replaces the embedded SQLite store (for tests of other stores).
	// It seals secrets as it was opened to: the key options below are not
	// used.
	Store store.Store
	// SecretKey is the 32-byte key session secrets are sealed with at rest
	// (AES-256-GCM). nil means the key in SecretKeyFile.
	SecretKey []byte
	// SecretKeyFile holds the key (base64 or hex) when SecretKey is nil;
	// "" means DataDir/secret-key, which the first start creates (0600)
	// with a random key. A file named here must exist. When SecretKey is
	// set, an existing key file's key is used as an old key.
	SecretKeyFile string
	// OldSecretKeys open secrets sealed under earlier keys. At start the
	// store seals every session's secrets anew under the current key, so
	// an old key is needed for one start after a rotation.
	OldSecretKeys [][]byte
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
	// Stdout receives the one-time admin token notice; nil means os.Stdout.
	Stdout io.Writer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// ArtifactRetention is how long the artifacts of a session that ended
	// are kept after it ended; a background sweep deletes older ones.
	// 0 keeps artifacts forever; negative is an error.
	ArtifactRetention time.Duration
	// AuditRetention is how long audit log entries are kept; the
	// retention sweep removes older ones from the oldest end, and the
	// chain stays verifiable from the last one removed. 0 keeps them
	// forever; negative is an error.
	AuditRetention time.Duration
	// ArtifactSweepInterval spaces the retention sweeps; 0 means 1h. The
	// first runs after a minute, or after the interval when shorter.
	ArtifactSweepInterval time.Duration
	// MaxSnapshotBytes is the largest workspace snapshot the server
	// stores; a larger one fails its suspend (413) and the session goes on
	// running. 0 means DefaultMaxSnapshotBytes.
	MaxSnapshotBytes int64
	// SnapshotTTL is how long a suspended session waits for its resume:
	// past it the session ends and its snapshot is deleted. 0 means
	// DefaultSnapshotTTL.
	SnapshotTTL time.Duration
	// SnapshotInterval, when positive, is how often a running session that
	// has run a call since its latest snapshot is checkpointed (its remote
	// uploads a snapshot and goes on), so that a claim that lapses loses
	// only what changed since; see checkpoint.go. 0 means never.
	SnapshotInterval time.Duration
	// BlobStore is where snapshots, artifacts and spilled output are kept
	// (blobs.go): "fs" for files in DataDir, "postgres"
	// for the PostgreSQL database of the store (shared by every replica on
	// it), s3://bucket[/prefix][?endpoint=host:port&region=…&insecure=true]
	// for an S3-compatible bucket (credentials from AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY). "" means postgres when the store is
	// PostgreSQL, else fs.
	BlobStore string

	// DistDir, when set, is a directory of remote builds in the /dist/
	// layout (`make dist`), published with this executable's own build.
	DistDir string

	// TLSCertFile and TLSKeyFile, set together, make the server speak
	// HTTPS (and the gateway WSS) with the PEM certificate chain and
	// private key of these files. They are read again when they change
	// (looked at once per TLSReloadInterval at most); a new pair that
	// cannot be loaded is logged and the previous one kept.
	TLSCertFile string
	TLSKeyFile  string
	// TLSReloadInterval is the least time between two looks at the TLS
	// files; 0 means tlsconfig.DefaultCheckInterval.
	TLSReloadInterval time.Duration
	// IdleTimeout closes a keep-alive connection idle this long; 0 means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ReadHeaderTimeout bounds reading a request's headers and a TLS
	// handshake; 0 means DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and headers, answering 431
	// past it; 0 means DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// MaxUnauthenticatedConns bounds the connections that have not made an
	// authenticated request yet; a connection past it is closed when it
	// arrives. 0 means DefaultMaxUnauthenticatedConns; negative, no bound.
	MaxUnauthenticatedConns int
	// MaxStreamsPerToken bounds the queue watches and transcript follows
	// open at once with one API token; more are answered 429. 0 means
	// DefaultMaxStreamsPerToken; negative, no bound.
	MaxStreamsPerToken int
	// MetricsListen, when set, is the address /metrics is served on
	// (plain HTTP), instead of the main listener.
	MetricsListen string
	// MetricsTokenRequired makes /metrics ask for a valid API token of any
	// scope.
	MetricsTokenRequired bool
	// PprofListen, when set, is the address Go's runtime profiles
	// (/debug/pprof/) are served on, plain HTTP without a token; "" serves
	// them nowhere. It must stay private (pprof.go).
	PprofListen string

	// Replicas: several servers on one PostgreSQL database.

	// ReplicaID names this server process among the replicas sharing its
	// database; "" means the hostname and a random suffix, new at each
	// start. Every metric carries it as the label replica.
	ReplicaID string
	// ReplicaURL is the base URL other replicas reach this one at, to
	// forward a session's requests to it and to tell it to drop a session
	// that moved; "" means http:// (https:// with TLS) and the bound
	// listen address when it is not a wildcard, else none (this replica
	// is then never forwarded to).
	ReplicaURL string
	// Webhooks configure webhook deliveries.
	Webhooks WebhookOptions

	// fanoutPoll, for tests, spaces the fan-out's backstop polls
	// (fanout.go); 0 means defaultFanoutPoll.
	fanoutPoll time.Duration

	// beforeFinish, for tests, runs when an llm runner is about to end a
	// session whose model is done, before it takes the session's message
	// lock.
	beforeFinish func(sessionID string)
}

// Server is a running control plane.
type Server struct {
	opts       Options
	log        *slog.Logger
	store      store.Store
	listener   net.Listener
	publicURL  string
	gatewayURL string
	adminToken string
	now        func() time.Time
	life       *lifecycle.Machine // the session state machine, over store
	retention  *retention.Sweeper // deletes the files of sessions past ArtifactRetention
	metrics    *metrics
	nextGate   *lifecycle.NextGate
	// claimTokens are the tokens claims verified a moment ago
	// (claimtokens.go).
	claimTokens *claimTokens
	// claimWaits are the parked claim-next requests (claimwait.go).
	claimWaits *claimWaits
	http       *http.Server
	dist       http.Handler // the /dist/ files
	// dirLock holds the data dir while the embedded database is in use
	// (nil with PostgreSQL or a given store), so two servers never share
	// one and a restore never runs under a server.
	dirLock *datadir.Lock

	// The network edge (edges.go): the connection guard under the
	// listener, the per-token stream bound, the TLS certificate (nil
	// without TLS) and the metrics listener (nil unless MetricsListen).
	guard       *connGuard
	streams     *streamLimiter
	edge        *edgeMetrics
	certs       *tlsconfig.CertReloader
	metricsLn   net.Listener
	metricsHTTP *http.Server
	// The profiling listener (pprof.go), nil unless PprofListen.
	pprofLn   net.Listener
	pprofHTTP *http.Server

	// queueFeed fans queue changes out to watches, per outpost, and
	// prunes the queue's tombstones.
	queueFeed    *queuefeed.Feed
	userMessages *gateway.Notifier // wakes llm runners waiting for the user
	// peers follows hijacked connections for their clients' close (peers.go).
	peers  peerSweep
	topics *topics
	hub    *gateway.Hub
	live   *liveview.Hub    // the live desktops' viewers (liveview.go)
	gw     *gateway.Gateway // serves the remotes' connections through hub

	// agents runs the sessions' runners (internal/agent).
	agents *agent.Loop
	// prices estimates the cost of model calls; budgetStops holds the
	// sessions being stopped at a limit, so one is stopped once (budget.go).
	prices      *budget.Prices
	budgetStops sync.Map

	// runCtx is canceled when the server stops; every runner derives from it.
	runCtx    context.Context
	runCancel context.CancelFunc
	wg        sync.WaitGroup

	// The blob store (blobs.go): blobs keeps workspace snapshots,
	// artifactBlobs artifacts and their metadata, outputBlobs spilled
	// output. suspends tracks the suspends in progress (suspend.go).
	blobs         blob.Store
	artifactBlobs blob.Store
	outputBlobs   blob.Store
	suspends      suspend.Ops

	// outpostNames caches outpost names by id for metric labels (an id's
	// name never changes): outpost id → name.
	outpostNames sync.Map

	// Replicas (replicas.go, forward.go): shared says the store may be
	// shared by other server processes (PostgreSQL); replicaKey signs
	// requests between them (nil without a secret key); replicas caches
	// the live ones; ready is set once serving and cleared when stopping.
	shared     bool
	replicaKey []byte
	// sso signs people in through an OpenID Connect provider; nil
	// without one (sso.go).
	sso           *ssoState
	startedAt     time.Time
	replicas      replicaSet
	forwardClient *http.Client
	ready         atomic.Bool

	// output turns remotes' output into transcript events and spills.
	output *gateway.Output

	// webhookSender sends the webhook outbox's deliveries (webhooks.go).
	webhookSender *webhooks.Sender

	mu       sync.Mutex // guards the following
	stopping bool       // no new gateway connections
}

// Default bounds of the output the server keeps (see gateway.Output).
const (
	// DefaultMaxCallOutputBytes bounds the output of one call.
	DefaultMaxCallOutputBytes = 100 << 20
	// DefaultMaxSessionOutputBytes bounds the spilled output of one
	// session.
	DefaultMaxSessionOutputBytes = 1 << 30
)

// plainHTTPWarning says, in a sentence with the fix, when a server without
// TLS listens beyond loopback while it tells clients an https:// URL: the
// usual sign of a TLS proxy on another machine, or of a forgotten
// --tls-cert, and either way tokens cross a network in clear between the
// proxy (or the client) and this server.
func plainHTTPWarning(tls bool, addr net.Addr, publicURL string) string {
	ta, ok := addr.(*net.TCPAddr)
	if tls || !ok || ta.IP.IsLoopback() || !strings.HasPrefix(publicURL, "https://") {
		return ""
	}
	return fmt.Sprintf("serving plain HTTP on %s while the public URL is %s: API tokens reach this server unencrypted from whatever terminates TLS, across the network; give the server --tls-cert and --tls-key (outpost certs create makes a pair), or listen on 127.0.0.1 behind a proxy on this machine", addr, publicURL)
}

// IsPostgresURL reports whether a database URL selects PostgreSQL.
func IsPostgresURL(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// openStore opens the PostgreSQL database of opts.DatabaseURL, or else the
// embedded SQLite database in the data dir, sealing secrets with keys.
func openStore(ctx context.Context, opts Options, keys *sealed.Keyring) (store.Store, error) {
	if opts.DatabaseURL == "" {
		return sqlite.Open(ctx, filepath.Join(opts.DataDir, datadir.Database), sqlite.WithKeyring(keys))
	}
	if !IsPostgresURL(opts.DatabaseURL) {
		return nil, errors.New("the database URL must start with postgres:// or postgresql://")
	}
	return postgres.Open(ctx, opts.DatabaseURL, postgres.WithKeyring(keys), postgres.WithReplica(opts.ReplicaID))
}

// New opens the store, creates the admin token on first start and binds
// the listener. Call Serve to start serving.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:7420"
	}
	if opts.ClaimTTL <= 0 {
		opts.ClaimTTL = 300 * time.Second
	}
	if opts.ReconnectGrace <= 0 {
		opts.ReconnectGrace = 60 * time.Second
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = time.Second
	}
	if opts.WatchMaxDuration <= 0 {
		opts.WatchMaxDuration = 270 * time.Second
	}
	if opts.EndedEntryRetention == 0 {
		opts.EndedEntryRetention = DefaultEndedEntryRetention
	}
	if opts.KeepaliveInterval <= 0 {
		opts.KeepaliveInterval = 15 * time.Second
	}
	if opts.TokenRecheckInterval <= 0 {
		opts.TokenRecheckInterval = 15 * time.Second
	}
	if opts.DeviceCodeTTL <= 0 {
		opts.DeviceCodeTTL = 10 * time.Minute
	}
	if opts.DevicePollInterval <= 0 {
		opts.DevicePollInterval = 5 * time.Second
	}
	if opts.ToolResultLimit <= 0 {
		opts.ToolResultLimit = 16000
	}
	if opts.OutputCapBytes <= 0 {
		opts.OutputCapBytes = 1 << 20
	}
	if opts.MaxCallOutputBytes == 0 {
		opts.MaxCallOutputBytes = DefaultMaxCallOutputBytes
	}
	if opts.MaxSessionOutputBytes == 0 {
		opts.MaxSessionOutputBytes = DefaultMaxSessionOutputBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.DataDir == "" {
		return nil, errors.New("server: a data directory is required")
	}
	if opts.ArtifactRetention < 0 {
		return nil, fmt.Errorf("server: artifact retention %s is negative; use 0 to keep artifacts forever", opts.ArtifactRetention)
	}
	if opts.AuditRetention < 0 {
		return nil, fmt.Errorf("server: audit retention %s is negative; use 0 to keep the audit log forever", opts.AuditRetention)
	}
	if opts.ArtifactSweepInterval <= 0 {
		opts.ArtifactSweepInterval = time.Hour
	}
	if opts.MaxSnapshotBytes <= 0 {
		opts.MaxSnapshotBytes = DefaultMaxSnapshotBytes
	}
	if opts.SnapshotTTL <= 0 {
		opts.SnapshotTTL = DefaultSnapshotTTL
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if opts.MaxUnauthenticatedConns == 0 {
		opts.MaxUnauthenticatedConns = DefaultMaxUnauthenticatedConns
	}
	if opts.MaxStreamsPerToken == 0 {
		opts.MaxStreamsPerToken = DefaultMaxStreamsPerToken
	}
	// Replicas: the id is set before the store opens, since the store's
	// change feed and the fan-out (fanout.go) must tell the same origin.
	if opts.ReplicaID == "" {
		opts.ReplicaID = defaultReplicaID()
	}
	if err := checkReplicaID(opts.ReplicaID); err != nil {
		return nil, err
	}
	if opts.fanoutPoll <= 0 {
		opts.fanoutPoll = defaultFanoutPoll
	}
	// TLS first: a bad certificate fails the start before anything is
	// opened.
	var certs *tlsconfig.CertReloader
	if opts.TLSCertFile != "" || opts.TLSKeyFile != "" {
		if opts.TLSCertFile == "" || opts.TLSKeyFile == "" {
			return nil, errors.New("server: TLS needs both a certificate file and a key file (--tls-cert and --tls-key)")
		}
		var err error
		certs, err = tlsconfig.NewCertReloader(opts.TLSCertFile, opts.TLSKeyFile, tlsconfig.ReloaderOptions{
			CheckInterval: opts.TLSReloadInterval, Logger: opts.Logger, Now: opts.Now})
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("server: create data dir: %w", err)
	}
	var lock *datadir.Lock
	if opts.Store == nil && opts.DatabaseURL == "" {
		var err error
		if lock, err = datadir.Acquire(opts.DataDir); errors.Is(err, datadir.ErrLocked) {
			return nil, fmt.Errorf("server: %w: stop that server first, or give this one another --data-dir", err)
		} else if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	started := false
	defer func() {
		if !started {
			lock.Release()
		}
	}()
	s := &Server{
		opts:         opts,
		log:          opts.Logger,
		now:          opts.Now,
		metrics:      newMetrics(opts.ReplicaID),
		userMessages: gateway.NewNotifier(),
		topics:       newTopics(),
		certs:        certs,
		dirLock:      lock,
	}
	s.hub = gateway.NewHub()
	s.live = s.newLiveView()
	dh, err := newDistHandler(opts)
	if err != nil {
		return nil, err
	}
	s.dist = dh
	// The address first: a port in use is the commonest failure to start,
	// and says so before the database is opened or migrated.
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("server: listen on %s: %w", opts.Listen, err)
	}
	if lock != nil {
		warning, err := datadir.Tighten(opts.DataDir)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("server: %w", err)
		}
		if warning != "" {
			s.log.Warn(warning)
		}
	}
	s.store = opts.Store
	if s.store == nil {
		st, err := s.openSealedStore(ctx)
		if err != nil {
			ln.Close()
			return nil, err
		}
		s.store = st
	}
	if err := s.openBlobs(ctx); err != nil {
		ln.Close()
		s.store.Close()
		return nil, err
	}
	s.output = gateway.NewOutput(gateway.OutputConfig{Store: s.store, Blobs: s.outputBlobs, Publish: s.topics.publish,
		Log: s.log, Now: s.now, CapBytes: opts.OutputCapBytes, MaxCallBytes: opts.MaxCallOutputBytes, MaxSessionBytes: opts.MaxSessionOutputBytes})
	s.gw = gateway.New(s.hub, s.output, gatewayHandler{s}, s.log, gateway.Options{PingEvery: s.pingEvery()})
	s.shared = sharedStore(s.store)
	s.life = s.newLifecycle()
	s.nextGate = s.newNextGate()
	s.claimTokens = newClaimTokens()
	s.claimWaits = newClaimWaits(s.metrics)
	s.retention = s.newRetention()
	s.queueFeed = queuefeed.New(queuefeed.Options{Store: s.store, Logger: s.log, Entry: toAPIEntry, Keepalive: opts.KeepaliveInterval,
		Go: func(fn func(context.Context)) { s.wg.Go(func() { fn(s.runCtx) }) }, Now: s.now, TombstoneAge: queuefeed.TombstoneAge(opts.WatchMaxDuration)})
	s.startedAt = time.Now()
	if s.replicaKey == nil {
		s.replicaKey = replicaAuthKey(opts.SecretKey)
	}
	s.prices = budget.NewPrices(opts.Prices, opts.LLMModel, s.log)
	s.agents = s.newAgentLoop()
	s.webhookSender = s.newWebhookSender()
	s.metrics.MustRegister(queueCollector{s})
	s.registerStoreMetrics()
	if err := s.bootstrapAdmin(ctx); err != nil {
		ln.Close()
		s.store.Close()
		return nil, err
	}
	s.guard = &connGuard{Listener: ln, max: int64(opts.MaxUnauthenticatedConns), log: func(open int64, shed string) {
		if shed == "refused" {
			s.log.Warn("closing new connections: the unauthenticated connections open are all being served", "open", open, "max", opts.MaxUnauthenticatedConns)
			return
		}
		s.log.Warn("shedding unauthenticated connections: the bound is reached, the oldest that got least far are closed for new ones", "open", open, "max", opts.MaxUnauthenticatedConns, "shed", shed)
	}}
	s.edge = newEdgeMetrics(s.metrics, func() float64 { return float64(s.guard.unauth.Load()) })
	s.guard.metrics = s.edge
	s.streams = &streamLimiter{max: opts.MaxStreamsPerToken, metrics: s.edge, open: map[string]int{}}
	s.listener = s.guard
	scheme := "http://"
	if certs != nil {
		s.listener = tls.NewListener(s.guard, tlsconfig.Server(certs.GetCertificate))
		scheme = "https://"
	}
	s.publicURL = strings.TrimRight(opts.PublicURL, "/")
	if s.publicURL == "" {
		s.publicURL = scheme + ln.Addr().String()
	}
	if warning := plainHTTPWarning(certs != nil, ln.Addr(), s.publicURL); warning != "" {
		s.log.Warn(warning)
	}
	if s.opts.ReplicaURL == "" {
		s.opts.ReplicaURL = defaultReplicaURL(scheme, ln.Addr())
	}
	if certs != nil && strings.HasPrefix(s.publicURL, "http://") {
		s.log.Warn("the server speaks TLS but its public URL is http://; workers and remotes told this URL cannot connect unless a proxy in front turns it into TLS", "public_url", s.publicURL)
	}
	gw, err := gatewayURL(s.publicURL)
	if err != nil {
		ln.Close()
		s.store.Close()
		return nil, err
	}
	s.gatewayURL = gw
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if certs != nil {
		tr.TLSClientConfig = s.replicaTLS()
	}
	s.forwardClient = &http.Client{Transport: tr}
	if opts.SSO.Issuer != "" {
		if s.sso, err = newSSO(opts.SSO, s.publicURL, formKey(s.replicaKey)); err != nil {
			ln.Close()
			s.store.Close()
			return nil, err
		}
	}
	if opts.MetricsListen != "" {
		if s.metricsLn, err = net.Listen("tcp", opts.MetricsListen); err != nil {
			ln.Close()
			s.store.Close()
			return nil, fmt.Errorf("server: listen for metrics on %s: %w", opts.MetricsListen, err)
		}
		s.metricsHTTP = s.newHTTPServer(s.metricsRoutes())
	}
	if opts.PprofListen != "" {
		if err := s.pprofListen(opts.PprofListen); err != nil {
			if s.metricsLn != nil {
				s.metricsLn.Close()
			}
			ln.Close()
			s.store.Close()
			return nil, err
		}
	}
	s.http = s.newHTTPServer(s.routes())
	s.http.ConnState = connState
	s.http.ConnContext = connContext
	started = true
	return s, nil
}

// newHTTPServer returns an http.Server of h with the edge's timeouts.
func (s *Server) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		// Larger than MaxHeaderBytes, so that withRequestChecks answers
		// the 431 in JSON; net/http's own text/plain 431 is left for
		// headers past this.
		MaxHeaderBytes: max(httpHeaderHardLimit, s.opts.MaxHeaderBytes),
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// gatewayURL derives the WebSocket gateway URL from the public URL.
func gatewayURL(public string) (string, error) {
	u, err := url.Parse(public)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("server: public URL %q is not an absolute URL", public)
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("server: public URL %q must start with http:// or https://", public)
	}
	u.Path = strings.TrimRight(u.Path, "/") + api.GatewayPath
	return u.String(), nil
}

// URL is the base URL clients use.
func (s *Server) URL() string { return s.publicURL }

// AdminToken is the admin token when it was given by option or generated on
// this first start; otherwise "".
func (s *Server) AdminToken() string { return s.adminToken }

// bootstrapAdmin creates the admin token on first start.
func (s *Server) bootstrapAdmin(ctx context.Context) error {
	secret := s.opts.AdminToken
	if secret != "" {
		_, err := s.store.TokenByHash(ctx, hashSecret(secret))
		if err == nil {
			s.adminToken = secret
			return nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("server: look up admin token: %w", err)
		}
	} else {
		n, err := s.store.CountTokens(ctx)
		if err != nil {
			return fmt.Errorf("server: count tokens: %w", err)
		}
		if n > 0 {
			return nil
		}
		secret = newSecret("opt_")
	}
	t := store.Token{
		ID:        newID("tok_"),
		Name:      "admin",
		Hash:      hashSecret(secret),
		Scopes:    []string{api.ScopeAdmin},
		CreatedAt: s.now(),
	}
	if err := s.store.CreateToken(ctx, t); err != nil {
		// Replicas starting together on an empty database with one
		// OUTPOST_ADMIN_TOKEN: another created it first.
		if s.opts.AdminToken != "" && errors.Is(err, store.ErrConflict) {
			if _, lerr := s.store.TokenByHash(ctx, t.Hash); lerr == nil {
				s.adminToken = secret
				return nil
			}
		}
		return fmt.Errorf("server: create admin token: %w", err)
	}
	s.adminToken = secret
	if s.opts.AdminToken != "" {
		return nil
	}
	path := filepath.Join(s.opts.DataDir, datadir.AdminToken)
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return fmt.Errorf("server: write %s: %w", path, err)
	}
	fmt.Fprintf(s.opts.Stdout, "Admin token (shown once; also saved to %s):\n  %s\n", path, secret)
	return nil
}

// Serve serves until ctx ends, then shuts down gracefully: it stops
// accepting, ends streams, stops runners and closes the store.
func (s *Server) Serve(ctx context.Context) error {
	s.runCtx, s.runCancel = context.WithCancel(context.WithoutCancel(ctx))
	s.http.BaseContext = func(net.Listener) context.Context { return s.runCtx }
	s.agents.Start(s.runCtx)
	errc := make(chan error, 1)
	go func() { errc <- s.http.Serve(s.listener) }()
	metricsDone := make(chan struct{})
	if s.metricsHTTP != nil {
		s.metricsHTTP.BaseContext = s.http.BaseContext
		go func() {
			defer close(metricsDone)
			if err := s.metricsHTTP.Serve(s.metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("metrics listener failed", "addr", s.opts.MetricsListen, "err", err)
			}
		}()
	} else {
		close(metricsDone)
	}
	pprofDone := make(chan struct{})
	if s.pprofHTTP != nil {
		go s.servePprof(pprofDone)
	} else {
		close(pprofDone)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.life.Run(s.runCtx) // the sweeps of lapsed claims, limits and ended entries
	}()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.keepClaimsAlive(s.runCtx)
	}()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.retention.Run(s.runCtx)
	}()
	s.wg.Go(func() { s.auditRetention(s.runCtx) })
	s.wg.Go(func() { s.sampleWorkers(s.runCtx) })
	s.wg.Go(func() { s.budgetSweep(s.runCtx) })
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.suspendSweep().Run(s.runCtx)
	}()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.checkpoints().Run(s.runCtx)
	}()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.fanout(s.runCtx)
	}()
	s.wg.Go(func() { s.queueFeed.Prune(s.runCtx) }) // queue tombstones of ended sessions
	s.wg.Go(func() { _ = s.webhookSender.Run(s.runCtx) })
	if s.shared {
		if s.opts.ReplicaURL == "" {
			s.log.Warn("this replica has no replica URL (it listens on a wildcard address): other replicas cannot forward its sessions' requests to it; set --replica-url", "replica", s.opts.ReplicaID)
		}
		if err := s.heartbeat(s.runCtx); err != nil {
			s.log.Warn("replica heartbeat", "replica", s.opts.ReplicaID, "err", err)
		}
		if err := s.refreshReplicas(s.runCtx); err != nil {
			s.log.Warn("list replicas", "err", err)
		}
		s.wg.Go(func() { s.heartbeatReplica(s.runCtx) })
	}
	s.ready.Store(true)
	s.log.Info("outpost server listening", "url", s.publicURL, "gateway", s.gatewayURL, "data_dir", s.opts.DataDir, "tls", s.certs != nil,
		"replica", s.opts.ReplicaID, "replica_url", s.opts.ReplicaURL)
	if s.metricsLn != nil {
		s.log.Info("metrics listening", "addr", s.metricsLn.Addr().String(), "token_required", s.opts.MetricsTokenRequired)
	}
	if s.pprofLn != nil {
		s.log.Info("profiling listening", "addr", s.pprofLn.Addr().String())
		if !isLoopbackAddr(s.opts.PprofListen) {
			s.log.Warn("the profiling listener is not on loopback: it asks for no token, so keep its address private",
				"addr", s.opts.PprofListen)
		}
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	s.log.Info("outpost server shutting down")
	s.ready.Store(false)
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Shutdown closes the listener at once, so remotes handed over below
	// reconnect through the load balancer to another replica.
	shutDone := make(chan error, 1)
	go func() { shutDone <- s.http.Shutdown(shutCtx) }()
	if s.shared {
		s.handOver()
	}
	// Streams and runners watch runCtx: cancel it so Shutdown does not
	// wait on long-lived responses.
	s.runCancel()
	s.hub.CloseAll()
	if err := <-shutDone; err != nil {
		s.log.Warn("http shutdown", "err", err)
	}
	if s.metricsHTTP != nil {
		if err := s.metricsHTTP.Shutdown(shutCtx); err != nil {
			s.log.Warn("metrics listener shutdown", "err", err)
		}
	}
	<-metricsDone
	if s.pprofHTTP != nil {
		// A CPU profile or trace in progress is cut short, not waited for.
		s.pprofHTTP.Close()
	}
	<-pprofDone
	s.agents.Stop()
	s.wg.Wait()
	if s.shared {
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.store.DeleteReplica(dctx, s.opts.ReplicaID); err != nil {
			s.log.Warn("delete this replica's row", "replica", s.opts.ReplicaID, "err", err)
		}
		dcancel()
	}
	err := s.store.Close()
	s.dirLock.Release()
	if err != nil {
		return fmt.Errorf("server: close store: %w", err)
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("server: serve: %w", serveErr)
	}
	return nil
}

// track counts a gateway connection in wg unless the server is stopping,
// so shutdown waits for its last writes before closing the store.
func (s *Server) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.wg.Add(1)
	return true
}

// routes builds the HTTP handler.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			s.writeError(w, r, &httpError{http.StatusServiceUnavailable, api.CodeUnavailable, "The server is starting or stopping."})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.store.Ping(ctx); err != nil {
			s.writeError(w, r, &httpError{http.StatusServiceUnavailable, api.CodeUnavailable, "The database does not answer."})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	if s.opts.MetricsListen == "" {
		mux.Handle("GET /metrics", s.metricsHandler())
	}

	read := []string{api.ScopeMachine, api.ScopeSessionsRead}
	for _, prefix := range []string{"/v1/outposts", "/opbeta/outposts/outposts", "/opbeta/outposts/pools", "/opbeta/outposts"} {
		mux.HandleFunc("GET "+prefix, s.authed(s.listOutposts, read...))
		mux.HandleFunc("POST "+prefix, s.authed(s.createOutpost, api.ScopeOrchestrator))
		mux.HandleFunc("GET "+prefix+"/{outpost}", s.authed(s.getOutpost, read...))
		mux.HandleFunc("DELETE "+prefix+"/{outpost}", s.authed(s.deleteOutpost, api.ScopeOrchestrator))
		mux.HandleFunc("PATCH "+prefix+"/{outpost}", s.authed(s.updateOutpost, api.ScopeOrchestrator))
	}
	for _, prefix := range []string{"/v1/queue", "/opbeta/outposts/devins"} {
		mux.HandleFunc("GET "+prefix, s.authed(s.listQueue, api.ScopeMachine))
		mux.HandleFunc("GET "+prefix+"/{session}", s.authed(s.getQueueEntry, api.ScopeMachine))
		mux.HandleFunc("POST "+prefix+"/{session}/claim", s.authedClaim(s.claimHandler, api.ScopeMachine))
		mux.HandleFunc("POST "+prefix+"/{session}/release", s.authed(s.releaseHandler, api.ScopeMachine))
		mux.HandleFunc("POST "+prefix+"/{session}/events", s.authed(s.machineEvent, api.ScopeMachine))
	}
	// Server-assigned claims, so that Outpost's own claimers do not race
	// for the same id (claimnext.go).
	mux.HandleFunc("POST /v1/outposts/{outpost}/queue:claim", s.authedClaim(s.claimNextHandler, api.ScopeMachine))
	// Connected workers and orchestrators: heartbeats kept in memory.
	wk := s.newWorkers()
	mux.HandleFunc("GET /v1/outposts/{outpost}/workers", s.authed(wk.list, read...))
	mux.HandleFunc("GET /v1/outposts/{outpost}/workers/{acceptor}", s.authed(wk.get, read...))
	mux.HandleFunc("GET /v1/workers", s.authed(wk.listAll, read...))
	mux.HandleFunc("GET "+api.StatsPath, s.authed(s.stats, read...))
	mux.HandleFunc("PUT /v1/outposts/{outpost}/workers/{acceptor}", s.authed(wk.heartbeat, api.ScopeMachine))
	mux.HandleFunc("DELETE /v1/outposts/{outpost}/workers/{acceptor}", s.authed(wk.goodbye, api.ScopeMachine))
	// Stored secrets of an outpost (osecrets.go): values go in, never out.
	mux.HandleFunc("GET /v1/outposts/{outpost}/secrets", s.authed(s.listOutpostSecrets, api.ScopeOrchestrator))
	mux.HandleFunc("GET /v1/outposts/{outpost}/secrets/{name}", s.authed(s.getOutpostSecret, api.ScopeOrchestrator))
	mux.HandleFunc("PUT /v1/outposts/{outpost}/secrets/{name}", s.authed(s.putOutpostSecret, api.ScopeOrchestrator))
	mux.HandleFunc("DELETE /v1/outposts/{outpost}/secrets/{name}", s.authed(s.deleteOutpostSecret, api.ScopeOrchestrator))
	mux.HandleFunc("POST /v1/sessions", s.authed(s.createSession, api.ScopeSessionsWrite))
	mux.HandleFunc("GET /v1/sessions", s.authed(s.listSessions, api.ScopeSessionsRead))
	mux.HandleFunc("GET /v1/sessions/{session}", s.authed(s.getSession, api.ScopeSessionsRead))
	mux.HandleFunc("GET /v1/sessions/{session}/events", s.authed(s.sessionEvents, api.ScopeSessionsRead))
	mux.HandleFunc("GET /v1/sessions/{session}/artifacts", s.authed(s.listArtifacts, api.ScopeSessionsRead))
	mux.HandleFunc("GET /v1/sessions/{session}/artifacts/{name}", s.authed(s.getArtifact, api.ScopeSessionsRead))
	mux.HandleFunc("GET /v1/sessions/{session}/output/{seq}", s.authed(s.getSpilledOutput, api.ScopeSessionsRead))
	// What needs the session's remote connection is served by the replica
	// that holds it (toOwner, forward.go).
	mux.HandleFunc("PATCH /v1/sessions/{session}", s.authed(s.toOwner(s.updateSession), api.ScopeSessionsWrite))
	mux.HandleFunc("POST /v1/sessions/{session}/rerun", s.authed(s.rerunSession, api.ScopeSessionsWrite))
	mux.HandleFunc("POST /v1/sessions/{session}/fork", s.authed(s.toOwner(s.forkSession), api.ScopeSessionsWrite))
	mux.HandleFunc("POST /v1/sessions/{session}/terminate", s.authed(s.toOwner(s.terminateSession), api.ScopeSessionsWrite))
	mux.HandleFunc("POST /v1/sessions/{session}/suspend", s.authed(s.toOwner(s.suspendHandler), api.ScopeSessionsWrite))
	mux.HandleFunc("GET /v1/sessions/{session}/suspend", s.authed(s.toOwner(s.suspendProgressHandler), api.ScopeSessionsRead))
	mux.HandleFunc("POST /v1/sessions/{session}/resume", s.authed(s.toOwner(s.resumeHandler), api.ScopeSessionsWrite))
	mux.HandleFunc("POST /v1/sessions/{session}/messages", s.authed(s.toOwner(s.sendMessage), api.ScopeSessionsWrite))
	mux.HandleFunc("GET /v1/sessions/{session}/network-requests", s.authed(s.listNetworkRequests, api.ScopeSessionsRead))
	mux.HandleFunc("POST /v1/sessions/{session}/network-requests/{request}/grant", s.authed(s.toOwner(s.grantNetworkRequest), api.ScopeSessionsWrite))
	mux.HandleFunc("POST /v1/sessions/{session}/network-requests/{request}/deny", s.authed(s.toOwner(s.denyNetworkRequest), api.ScopeSessionsWrite))
	// Approval of held tool calls (approvals.go).
	mux.HandleFunc("GET /v1/sessions/{session}/approvals", s.authed(s.listApprovals, api.ScopeSessionsRead))
	mux.HandleFunc("POST /v1/sessions/{session}/calls/{seq}/approve", s.authed(s.toOwner(s.approveCall), api.ScopeSessionsWrite))
	mux.HandleFunc("POST /v1/sessions/{session}/calls/{seq}/deny", s.authed(s.toOwner(s.denyCall), api.ScopeSessionsWrite))
	mux.HandleFunc("POST /v1/sessions/{session}/tools/{tool}", s.authed(s.toOwner(s.toolHandler), api.ScopeSessionsWrite))
	mcpH := withJSONErrors(s.mcpHandler(), true)
	mux.HandleFunc("/v1/sessions/{session}/mcp", s.authed(s.toOwner(func(w http.ResponseWriter, r *http.Request) error {
		if _, err := s.sessionFor(r.Context(), r.PathValue("session")); err != nil {
			return err
		}
		mcpH.ServeHTTP(w, r)
		return nil
	}), api.ScopeSessionsWrite))
	mux.HandleFunc("GET "+api.DesktopPath, s.withWebCookie(s.authed(s.toOwner(s.desktopView), api.ScopeSessionsRead)))
	mux.HandleFunc("POST /internal/v1/sessions/{session}/drop", s.dropHandler)

	mux.HandleFunc("POST /v1/tokens", s.authed(s.createToken, api.ScopeAdmin, api.ScopeSessionsWrite))
	mux.HandleFunc("GET /v1/tokens", s.authed(s.listTokens, api.ScopeAdmin))
	mux.HandleFunc("DELETE /v1/tokens/{token}", s.authed(s.revokeToken, api.ScopeAdmin))
	// The device authorization grant: code and token are open (the
	// device code is the credential); showing, approving and denying a
	// grant mint tokens, so they take what creating a token takes.
	mux.HandleFunc("POST "+api.DeviceCodePath, s.oauth(s.deviceCode))
	mux.HandleFunc("POST "+api.DeviceTokenPath, s.oauth(s.deviceToken))
	// Operators approve device logins too: a worker's registration asks
	// for a machine token, which an operator may make; a login's token
	// never holds more than its approver's scopes (deviceTokenFor).
	mux.HandleFunc("GET "+api.DeviceGrantPath, s.authed(s.deviceGrant, api.ScopeOrchestrator))
	mux.HandleFunc("POST "+api.DeviceApprovePath, s.authed(s.deviceApprove, api.ScopeOrchestrator))
	mux.HandleFunc("POST "+api.DeviceDenyPath, s.authed(s.deviceDeny, api.ScopeOrchestrator))
	// Every scope implies one of these, so any valid token may ask.
	// The audit log: read by admins, written by the changes themselves.
	mux.HandleFunc("GET "+api.AuditLogsPath, s.authed(everywhere(s.listAuditLogs), api.ScopeAdmin))
	mux.HandleFunc("GET "+api.AuditLogsVerifyPath, s.authed(everywhere(s.verifyAuditLog), api.ScopeAdmin))
	mux.HandleFunc("POST /v1/webhooks", s.authed(oneOrEvery(s.createWebhook), api.ScopeAdmin))
	mux.HandleFunc("GET /v1/webhooks", s.authed(oneOrEvery(s.listWebhooks), api.ScopeAdmin))
	mux.HandleFunc("DELETE /v1/webhooks/{webhook}", s.authed(oneOrEvery(s.deleteWebhook), api.ScopeAdmin))
	mux.HandleFunc("GET /v1/webhooks/{webhook}/deliveries", s.authed(oneOrEvery(s.listWebhookDeliveries), api.ScopeAdmin))
	mux.HandleFunc("POST /v1/webhooks/{webhook}/deliveries/{delivery}/redeliver", s.authed(oneOrEvery(s.redeliverWebhook), api.ScopeAdmin))

	mux.HandleFunc("GET /v1/whoami", s.authed(s.whoami, api.ScopeMachine, api.ScopeSessionsRead, api.ScopeNetworkAdmin))

	// Users and roles (users.go), sign-in through an OpenID Connect
	// provider (sso.go).
	mux.HandleFunc("GET /v1/users", s.authed(everywhere(s.listUsers), api.ScopeAdmin))
	mux.HandleFunc("GET /v1/role-bindings", s.authed(everywhere(s.listRoleBindings), api.ScopeAdmin))
	mux.HandleFunc("POST /v1/role-bindings", s.authed(everywhere(s.createRoleBinding), api.ScopeAdmin))
	mux.HandleFunc("DELETE /v1/role-bindings/{binding}", s.authed(everywhere(s.deleteRoleBinding), api.ScopeAdmin))
	mux.HandleFunc("DELETE /v1/auth/session", s.authed(s.endSignIn, api.ScopeMachine, api.ScopeSessionsRead, api.ScopeNetworkAdmin))
	ssoName := ""
	if s.sso != nil {
		ssoName = s.sso.opts.DisplayName
		mux.HandleFunc("GET /ui/auth/login", s.ssoLogin)
		mux.HandleFunc("GET /ui/auth/callback", s.ssoCallback)
	}

	mux.Handle("GET "+api.GatewayPath, s.gw)
	mux.HandleFunc("PUT "+api.SnapshotPath, s.gatewayHandler(s.toOwnerGateway(s.putSnapshot)))
	mux.HandleFunc("GET "+api.SnapshotPath, s.gatewayHandler(s.toOwnerGateway(s.getSnapshot)))
	mux.HandleFunc("GET "+api.GatewaySessionPath, s.gatewayHandler(s.gatewaySession))
	// Remote builds, public like any download of open-source binaries.
	mux.Handle("GET "+distPrefix, http.StripPrefix(distPrefix, s.dist))

	// The web UI answers /, /ui/… and /static/…; it calls this API
	// in-process with the signed-in user's token.
	ui, err := web.New(web.Options{API: mux, PublicURL: s.publicURL, Logger: s.log, FormKey: formKey(s.replicaKey), SignIn: s.recordSignIn, SSOName: ssoName})
	if err != nil {
		panic(err) // embedded templates that do not parse are a build bug
	}
	mux.Handle("GET /{$}", ui)
	mux.Handle("/ui/", ui)
	mux.Handle("/static/", ui)

	mux.HandleFunc("/", s.noRoute(mux, "/"))
	return s.withRecover(s.withRequestChecks(mux))
}

// metricsHandler serves the Prometheus metrics, asking for a valid API token
// of any scope when MetricsTokenRequired.
func (s *Server) metricsHandler() http.Handler {
	h := s.metrics.handler()
	if !s.opts.MetricsTokenRequired {
		return h
	}
	// Every scope implies one of these two, so any valid token passes.
	return s.authed(func(w http.ResponseWriter, r *http.Request) error {
		h.ServeHTTP(w, r)
		return nil
	}, api.ScopeMachine, api.ScopeSessionsRead)
}

// metricsRoutes is the handler of the metrics listener: /metrics alone.
func (s *Server) metricsRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metricsHandler())
	mux.HandleFunc("/", s.noRoute(mux, "/"))
	return s.withRecover(s.withRequestChecks(mux))
}

// allowedMethods lists the methods other than r's that mux routes r's
// path to a handler of its own for, rather than to the catch-all pattern.
func allowedMethods(mux *http.ServeMux, r *http.Request, catchAll string) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != catchAll {
			allow = append(allow, m)
		}
	}
	return allow
}

// withRecover turns a panic in a handler into a 500 so it never reaches a
// user as a dropped connection.
func (s *Server) withRecover(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", v)
				s.writeError(w, r, errors.New("panic"))
			}
		}()
		h.ServeHTTP(w, r)
	})
}
