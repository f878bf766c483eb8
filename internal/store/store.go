// Package store keeps Outpost's durable state: outposts, sessions with their
// queue entries, transcripts, tool calls and tokens. The control plane's
// state machine lives in the server; a Store persists it atomically. SQLite
// is the embedded implementation; PostgreSQL fills the same interface and
// passes the same suite (package storetest). What the two share of their
// SQL — columns, row scanners, statements, filters — is package sqlstore.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/budget"
)

// Errors a Store returns; wrap-compatible with errors.Is.
var (
	// ErrNotFound: no such row.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a unique key is taken (e.g. an outpost name).
	ErrConflict = errors.New("conflict")
	// ErrTokenRevoked: the token a claim was asked with was revoked,
	// had expired or was gone when the claim's transaction read it.
	ErrTokenRevoked = errors.New("the claimer's token is no longer valid")
)

// Outpost is a stored outpost.
type Outpost struct {
	ID          string
	Name        string
	Platform    string
	Description string
	// AllowedOrgIDs is nil when unset; an empty list is kept as empty.
	AllowedOrgIDs []string
	// RemoteBinarySHA is the remote build the outpost's sessions run unless
	// they pin their own; "" for the worker's default.
	RemoteBinarySHA string
	// MaxRunning caps the outpost's claims held at once; 0 means no cap.
	MaxRunning int
	// MaxAttempts is how many attempts its sessions get unless they set
	// their own; 0 means api.DefaultMaxAttempts.
	MaxAttempts int
	// MaxSnapshotBytes is the largest workspace snapshot stored for its
	// sessions; 0 means the server's limit.
	MaxSnapshotBytes int64
	// NetworkPolicy is the default network policy of its sessions; nil
	// when it has none (unrestricted).
	NetworkPolicy *api.NetworkPolicy
	// Desktop is its desktop setting; nil when it has none.
	Desktop *api.OutpostDesktop
	// Requirements are the default of its sessions that state none of
	// their own; nil when unset.
	Requirements *api.Requirements
	// ApprovalRules apply to its sessions' tool calls; nil when it has
	// none. CreateOutpost and SetOutpostApprovalRules write them.
	ApprovalRules []api.ApprovalRule
	CreatedAt     time.Time
}

// OutpostSecret is a stored secret of an outpost: a value sessions of the
// outpost name (rather than give inline) to have it copied into their own
// secrets when they are created.
type OutpostSecret struct {
	OutpostID string
	Name      string
	// Value is write-only through the API; only session creation reads it.
	Value string
	// SetBy is the id of the token that last set the value; "" when none
	// is known.
	SetBy     string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// OutpostLimits are the fleet controls of an outpost that can change after
// its creation.
type OutpostLimits struct {
	// MaxRunning and MaxAttempts are Outpost's.
	MaxRunning, MaxAttempts int
	// MaxSnapshotBytes is Outpost's.
	MaxSnapshotBytes int64
	// NetworkPolicy is Outpost's; nil removes it. The queue entries of
	// its sessions are the caller's to bring up to date.
	NetworkPolicy *api.NetworkPolicy
	// Desktop is Outpost's; nil removes it.
	Desktop *api.OutpostDesktop
}

// OutpostLoad is what a claim decides from besides its own rows.
type OutpostLoad struct {
	// MaxRunning is the outpost's (0: no cap).
	MaxRunning int
	// Held counts the outpost's other entries whose claims are held.
	Held int
	// Desktop is the outpost's desktop setting as the claim's transaction
	// read it (nil: none, or the outpost is gone).
	Desktop *api.OutpostDesktop
}

// NextFilter narrows ClaimNext's pick.
type NextFilter struct {
	// Platform, when set, skips entries pinned to another platform.
	Platform string
	// Exclude skips these sessions.
	Exclude []string
	// Restricted lets the pick be an entry with a network policy (its
	// network_policy_json set); false skips them, for a claimer that does
	// not enforce one.
	Restricted bool
	// Placed lets the pick be an entry with requirements; false skips
	// them, for a claimer that describes no machine. The claim's own check
	// decides whether the claimer's machine meets an entry's.
	Placed bool
}

// OutpostCounts are an outpost's queue and sessions by state, for metrics.
type OutpostCounts struct {
	// Pending counts pending entries but those of ended sessions (kept
	// listed for a while, never claimed); Held claimed ones whose claim
	// has not lapsed.
	Pending, Held int
	// OldestPending is the earliest UpdatedAt of the entries Pending
	// counts (when the longest-waiting one entered the queue); zero when
	// there is none.
	OldestPending time.Time
	// Running and Suspended count sessions of those statuses.
	Running, Suspended int
	// SnapshotBytes sums the sizes of its sessions' stored snapshots
	// (the outpost_snapshot_bytes gauge reads the store, so every replica
	// reports the same).
	SnapshotBytes int64
}

// Session is a stored session. Spec.SecretNames mirrors the keys of Secrets.
type Session struct {
	ID        string
	OutpostID string
	Spec      api.SessionSpec
	// Secrets are write-only through the API; only the gateway reads them.
	Secrets      map[string]string
	Status       string
	StatusDetail string
	Reason       string
	// LastSeq is the highest call sequence number whose result is stored.
	LastSeq      int64
	Capabilities *api.Capabilities
	// Usage counts an llm session's model calls and tokens.
	Usage     api.Usage
	CreatedAt time.Time
	UpdatedAt time.Time
	StartedAt *time.Time
	EndedAt   *time.Time
	// NetworkPolicy is the session's own network policy, which replaces
	// its outpost's; nil when it has none and follows its outpost's.
	// CreateSession writes it, and so does UpdateSession (it is part of
	// the state a Mutation's Session replaces).
	NetworkPolicy *api.NetworkPolicy
	// Worker is the acceptor (a worker or an orchestrator) that claimed
	// the session last; "" before any claim. It stays once the claim and
	// the session end: the claim writes it, as part of the session's state.
	Worker string
	// Approvals are the calls its ask rules held, pending and decided.
	// UpdateSession writes them (they are part of the state a Mutation's
	// Session replaces), under the session's lock, so each is decided
	// once.
	Approvals []api.Approval
	// ArtifactsPrunedAt is when the retention sweep deleted the session's
	// artifacts; nil while they are kept. Only MarkArtifactsPruned sets it:
	// CreateSession and UpdateSession never write it.
	ArtifactsPrunedAt *time.Time
}

// QueueEntry is a session's stored place in its outpost's queue.
type QueueEntry struct {
	SessionID string
	OutpostID string
	Kind      string // api.KindNew or api.KindResume
	Platform  string
	Phase     string // api.PhasePending or api.PhaseClaimed
	// AcceptorID is "" when unclaimed.
	AcceptorID string
	// ClaimDeadline is the time by which the claimer must have a remote
	// connected or renew; zero when unclaimed. Claim and renewal set it.
	ClaimDeadline time.Time
	// LiveUntil is how long the claim holds on the strength of its remote:
	// while a remote of the claim's epoch is connected to a gateway it is
	// kept a reconnect grace ahead of now (KeepAlive), and when the
	// connection goes it is left a grace past that moment. Zero until a
	// remote connects; a new claim or a requeue clears it.
	LiveUntil time.Time
	// Epoch grows each time the claim passes to a new holder (not on
	// renewal); connect tokens of older epochs are dead.
	Epoch         int64
	SessionStatus string // api.QueueSession*
	// RemoteBinarySHA is the remote build the claimer runs (the session's
	// pin, else its outpost's; "" for the claimer's default). CreateSession
	// writes it; UpdateSession never changes it.
	RemoteBinarySHA string
	// Priority orders the queue: higher first, FIFO within one. Written by
	// CreateSession; UpdateSession keeps what fn returns.
	Priority int
	// Attempts counts the claims of the session that ended without the
	// session ending (a lapse, or a release while it was not over), and
	// AttemptReasons says why, one per attempt, oldest first.
	Attempts       int
	AttemptReasons []string
	// MaxAttempts is how many attempts the session gets before it ends in
	// error, resolved when it is created; 0 (an entry from before
	// attempts were counted) means api.DefaultMaxAttempts.
	MaxAttempts int
	// Owner is the replica (server process) whose gateway holds the
	// session's remote connection, written when the remote says hello and
	// cleared when that replica stops gracefully; "" when none is known.
	// Requests that need the connection are forwarded to it, and the agent
	// loop of another replica may not write the session.
	Owner string
	// ClaimTokenID is the id of the token whose request took or last
	// renewed the claim; "" when unclaimed or claimed without a stored
	// token. Revoking that token releases the claim (ClaimsOfToken).
	ClaimTokenID string
	// NetworkPolicy is the session's effective network policy (its own,
	// else its outpost's); nil when it is unrestricted. The fleet API
	// shows it as spec.network_policy; writers keep it current when
	// either policy changes.
	NetworkPolicy *api.NetworkPolicy
	// Requirements are the session's effective requirements (its own,
	// else its outpost's when it was created); nil when it has none.
	// CreateSession writes them; UpdateSession keeps what fn returns.
	Requirements *api.Requirements
	// Rev is the global change counter at this entry's last change; the
	// store assigns it. Cursors are revs.
	Rev       int64
	Deleted   bool
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Replica is one server process sharing the store, as its heartbeat row
// records it.
type Replica struct {
	// ID names the process; a new one at each start by default.
	ID string
	// URL is where other replicas reach it; "" when they cannot.
	URL       string
	StartedAt time.Time
	SeenAt    time.Time
}

// Expiry is when the entry's claim lapses unless renewed or kept alive:
// the later of ClaimDeadline and LiveUntil.
func (e QueueEntry) Expiry() time.Time {
	if e.LiveUntil.After(e.ClaimDeadline) {
		return e.LiveUntil
	}
	return e.ClaimDeadline
}

// Held reports whether the entry is claimed and its claim has not lapsed
// at now.
func (e QueueEntry) Held(now time.Time) bool {
	return !e.Deleted && e.Phase == api.PhaseClaimed && now.Before(e.Expiry())
}

// Lease names one claim whose remote is connected: the session and the
// claim's epoch.
type Lease struct {
	SessionID string
	Epoch     int64
}

// Call is one tool call of a session, keyed by (SessionID, Seq).
type Call struct {
	SessionID string
	Seq       int64
	Tool      string
	Args      json.RawMessage
	Done      bool
	OK        bool
	Value     json.RawMessage
	Error     string
	CreatedAt time.Time
	DoneAt    *time.Time
}

// Token is a stored API token; only its hash is kept.
type Token struct {
	ID        string
	Name      string
	Hash      string // hex SHA-256 of the secret
	Scopes    []string
	OutpostID string // "" when not limited to one outpost
	CreatedAt time.Time
	ExpiresAt *time.Time
	RevokedAt *time.Time
	// UserID is the user the token belongs to; "" for a service account's.
	UserID string
	// Role is the role the token was created with, or "".
	Role string
	// SessionID is the session the token is limited to, "" when none: it
	// reaches that session's routes only, and OutpostID is its outpost.
	SessionID string
}

// User is a person known from the OpenID Connect provider, keyed by
// Subject (the provider's id of the user).
type User struct {
	ID          string
	Subject     string
	Email       string
	Name        string
	Groups      []string
	CreatedAt   time.Time
	LastLoginAt time.Time
	// CheckedAt is when the provider last confirmed the user.
	CheckedAt time.Time
	// RefreshToken is the provider's refresh token of the latest sign-in,
	// used to ask the provider again; "" when it gave none.
	RefreshToken string
	// DisabledAt is when the provider refused the user; nil while enabled.
	DisabledAt *time.Time
}

// RoleBinding gives Role to a user (SubjectKind "user", Subject its id) or
// a provider group (SubjectKind "group", Subject its name), on OutpostID
// or, when "", everywhere.
type RoleBinding struct {
	ID          string
	Role        string
	SubjectKind string
	Subject     string
	OutpostID   string
	CreatedAt   time.Time
}

// ConnectToken lets one remote speak for one session while the claim of
// epoch Epoch holds.
type ConnectToken struct {
	Hash      string
	SessionID string
	Epoch     int64
	CreatedAt time.Time
}

// Snapshot is the stored workspace snapshot of a session: where its archive
// is kept in the server's blob store and what it holds. A session has at
// most one; a later suspend replaces it.
type Snapshot struct {
	SessionID string
	// BlobKey names the archive in the blob store.
	BlobKey string
	// Size and SHA256 are the archive's, as stored.
	Size   int64
	SHA256 string
	// Files and Bytes are what the remote reported archiving.
	Files int64
	Bytes int64
	// Epoch is the claim epoch whose remote uploaded it.
	Epoch     int64
	CreatedAt time.Time
}

// Mutation is what one UpdateSession transaction writes. Nil and empty
// fields write nothing.
type Mutation struct {
	// Session replaces the stored session when set.
	Session *Session
	// Entry replaces the stored queue entry when set; the store assigns a
	// new Rev (written back into it). Within one epoch LiveUntil is never
	// lowered (a KeepAlive may have raised it since fn read the entry); a
	// new epoch writes it as given. Writing it also deletes the session's
	// connect tokens of epochs before Entry.Epoch: they can never be used
	// again.
	Entry *QueueEntry
	// Events are appended to the transcript; the store assigns Seq and
	// SessionID (written back into the slice).
	Events []api.Event
	// Calls are inserted, or replace the stored call with the same Seq.
	Calls []Call
	// ConnectTokens are inserted.
	ConnectTokens []ConnectToken
	// Webhooks are events whose deliveries are queued in the same
	// transaction, besides those the write implies
	// (SessionWebhookEvents): an emitter adds its event here.
	Webhooks []WebhookEvent
}

// QueueFilter selects queue entries. Rows are ordered by Rev ascending.
type QueueFilter struct {
	OutpostID  string // "" for all
	Phase      string // "" for all
	AcceptorID string // "" for all
	// AfterRev returns rows with Rev > AfterRev.
	AfterRev int64
	// Limit caps the rows returned; 0 means no cap.
	Limit int
	// IncludeDeleted returns tombstones too (for watch replay).
	IncludeDeleted bool
	// ByPriority orders the page by Priority descending, then CreatedAt
	// and SessionID ascending (the claim order) instead of by Rev;
	// AfterRev must then be 0.
	ByPriority bool
	// NoTotal skips counting the matching rows (ListQueue's total is then
	// 0): for readers that only page, such as watch streams.
	NoTotal bool
}

// SessionFilter selects sessions, newest first.
type SessionFilter struct {
	OutpostID string
	Status    string
	// Title matches sessions whose title contains it, case-insensitively.
	Title string
	// Worker matches sessions whose latest claim was that acceptor's.
	Worker string
	// ForkedFrom matches the sessions forked from that session.
	ForkedFrom string
	// BeforeCreated and BeforeID page: rows strictly older than the pair
	// (CreatedAt, ID) in (created_at DESC, id DESC) order. Zero for the first page.
	BeforeCreated time.Time
	BeforeID      string
	Limit         int
}

// Store is Outpost's durable state. Every method is safe for concurrent use.
//
// Revs are assigned in commit order: a reader never sees rev N+1 committed
// before rev N (watch cursors rely on it).
type Store interface {
	// CreateOutpost inserts an outpost; ErrConflict when the name is taken.
	CreateOutpost(ctx context.Context, o Outpost) error
	// GetOutpost finds an outpost by id or by name.
	GetOutpost(ctx context.Context, idOrName string) (Outpost, error)
	// ListOutposts returns every outpost, ordered by name.
	ListOutposts(ctx context.Context) ([]Outpost, error)
	// DeleteOutpost removes an outpost; ErrNotFound when absent.
	DeleteOutpost(ctx context.Context, id string) error
	// OutpostStats counts pending non-deleted entries but those of ended
	// sessions (session_status terminated), and claimed entries whose
	// Expiry is after now.
	OutpostStats(ctx context.Context, outpostID string, now time.Time) (queueDepth, activeClaims int, err error)
	// OutpostCounts counts the outpost's pending entries (as OutpostStats
	// does), held claims (at now) and running and suspended sessions.
	OutpostCounts(ctx context.Context, outpostID string, now time.Time) (OutpostCounts, error)
	// SetOutpostLimits writes an outpost's limits; ErrNotFound when absent.
	SetOutpostLimits(ctx context.Context, id string, l OutpostLimits) error
	// SetOutpostApprovalRules replaces an outpost's approval rules (nil
	// removes them); ErrNotFound when absent.
	SetOutpostApprovalRules(ctx context.Context, id string, rules []api.ApprovalRule) error
	// OutpostBudget returns an outpost's monthly budget, nil when it has
	// none; ErrNotFound when the outpost is absent.
	OutpostBudget(ctx context.Context, id string) (*api.OutpostBudget, error)
	// SetOutpostBudget replaces an outpost's budget (nil removes it);
	// ErrNotFound when absent.
	SetOutpostBudget(ctx context.Context, id string, b *api.OutpostBudget) error
	// OutpostSessionSpans lists, for an outpost's budget, the sessions
	// that were created at or after since or had not ended by then.
	OutpostSessionSpans(ctx context.Context, outpostID string, since time.Time) ([]budget.SessionSpan, error)

	// Stored secrets of an outpost (OutpostSecret), sealed like a
	// session's and deleted with their outpost.

	// PutOutpostSecret stores sec's value under its outpost and name,
	// replacing the value of one of that name (its CreatedAt is kept), and
	// reports whether it created one. ErrNotFound when the outpost does
	// not exist.
	PutOutpostSecret(ctx context.Context, sec OutpostSecret) (created bool, err error)
	// ListOutpostSecrets returns an outpost's secrets by name, without
	// their values (Value is "").
	ListOutpostSecrets(ctx context.Context, outpostID string) ([]OutpostSecret, error)
	// OutpostSecretValues opens the values of those of names the outpost
	// has, by name; names it lacks are not in the map.
	OutpostSecretValues(ctx context.Context, outpostID string, names []string) (map[string]string, error)
	// DeleteOutpostSecret removes one; ErrNotFound when absent.
	DeleteOutpostSecret(ctx context.Context, outpostID, name string) error

	// CreateSession inserts a session, its queue entry and its first events
	// in one transaction. The entry's Rev and the events' Seq are assigned.
	CreateSession(ctx context.Context, s Session, e *QueueEntry, events []api.Event) error
	// GetSession returns one session.
	GetSession(ctx context.Context, id string) (Session, error)
	// ListSessions returns a page of sessions and the total matching the
	// filter's OutpostID, Status and Title.
	ListSessions(ctx context.Context, f SessionFilter) ([]Session, int, error)
	// GetQueueEntry returns one queue entry, tombstones included.
	GetQueueEntry(ctx context.Context, sessionID string) (QueueEntry, error)
	// UpdateSession runs fn on the current session and queue entry inside
	// one write transaction, then writes what fn returns. An error from fn
	// aborts the transaction and is returned as is. The returned Mutation
	// carries the assigned revs and seqs.
	//
	// A session's Spec and Secrets never change after CreateSession: fn
	// sees them zero (so a write does not pay for decoding a long script),
	// and Mutation.Session writes every other field. fn runs while the
	// store's writer is held: it must be quick and call no Store method.
	UpdateSession(ctx context.Context, id string, fn func(s Session, e QueueEntry) (Mutation, error)) (Mutation, error)
	// ClaimSession is UpdateSession for a claim: fn also gets the load of
	// the session's outpost — its MaxRunning and how many of its other
	// entries' claims are held at now — read in the same transaction
	// after every other ClaimSession of that outpost committed, so claims
	// of one outpost never exceed MaxRunning however many race.
	//
	// tokenID is the API token the claimer asked with ("" for none). The
	// claim reads it again in its own transaction, ordered with
	// RevokeToken, and fails with ErrTokenRevoked (fn not called, nothing
	// written) when it is revoked, expired at now or gone: a claim either
	// commits before the revocation, where the revocation's release of
	// the token's claims (ClaimsOfToken) finds it, or is refused.
	ClaimSession(ctx context.Context, id string, now time.Time, tokenID string, fn func(s Session, e QueueEntry, load OutpostLoad) (Mutation, error)) (Mutation, error)

	// ClaimNext is ClaimSession of the first entry of
	// outpostID that is pending, not deleted, neither suspended nor
	// terminated (found through an index that holds no other entries), of platform f.Platform or none (when f.Platform is set)
	// and not in f.Exclude, in claim order (priority, then created_at, then
	// session id), picked in the same transaction as fn runs. Concurrent
	// ClaimNext calls pick different entries (SQLite: the single writer;
	// PostgreSQL: FOR UPDATE SKIP LOCKED on the session row). ErrNotFound
	// when no entry matches. fn may still see an entry another writer
	// changed between the pick and its lock; it decides. tokenID is
	// checked as ClaimSession checks it.
	ClaimNext(ctx context.Context, outpostID string, now time.Time, tokenID string, f NextFilter, fn func(s Session, e QueueEntry, load OutpostLoad) (Mutation, error)) (Mutation, error)

	// NextSkippedLocked reports whether a ClaimNext with f that found
	// nothing may have passed over a matching entry that another
	// transaction held locked: true when an entry f matches is claimable
	// now, locked or not. Always false where a pick skips nothing
	// (SQLite: the one writer orders every pick after the others).
	NextSkippedLocked(ctx context.Context, outpostID string, f NextFilter) (bool, error)

	// ListQueue returns entries matching f and the total matching f's
	// OutpostID, Phase and AcceptorID (ignoring AfterRev and Limit,
	// excluding tombstones).
	ListQueue(ctx context.Context, f QueueFilter) ([]QueueEntry, int, error)
	// MaxRev is the highest Rev assigned so far (0 when none).
	MaxRev(ctx context.Context) (int64, error)
	// Queue tombstones are pruned, so that lists and replays do not count
	// all of history.
	//
	// PruneQueue deletes up to limit tombstones (deleted entries) of
	// ended sessions (api.IsFinal) last written before before, oldest
	// first, and raises the QueueHorizon of each of their outposts to the
	// highest rev it deleted there. It returns how many it deleted. A session that is not over keeps its
	// tombstone: its epoch must keep counting if it is queued again.
	PruneQueue(ctx context.Context, before time.Time, limit int) (int, error)
	// QueueHorizon is the highest rev of a tombstone of the outpost ("":
	// of any) that PruneQueue deleted, 0 when none: a replay of its
	// changes after a lower cursor may miss deletions.
	QueueHorizon(ctx context.Context, outpostID string) (int64, error)
	// TombstoneEnded turns into tombstones up to limit entries of ended
	// sessions that are still listed — pending, not deleted, session
	// status terminated — last written before before, oldest first. Each
	// gets its own new Rev and UpdatedAt now, as a write of UpdateSession
	// would (watchers hear a deletion; PruneQueue later removes it). It
	// returns the entries as written. An entry another writer changes
	// meanwhile is left to it; so several servers may sweep at once.
	TombstoneEnded(ctx context.Context, before, now time.Time, limit int) ([]QueueEntry, error)
	// LapsedClaims returns ids of claimed, non-deleted entries whose
	// Expiry is at or before now.
	LapsedClaims(ctx context.Context, now time.Time) ([]string, error)
	// ClaimsOfToken returns ids of the claimed, non-deleted entries whose
	// ClaimTokenID is tokenID, oldest claim first; none for "".
	ClaimsOfToken(ctx context.Context, tokenID string) ([]string, error)
	// KeepAlive raises LiveUntil to until (it never lowers it) on each
	// lease's entry that is claimed, not deleted and still of the lease's
	// epoch, in one transaction; other leases are skipped. It assigns no
	// rev: liveness is not a change watchers are told of.
	KeepAlive(ctx context.Context, until time.Time, leases ...Lease) error
	// ActiveSessions returns ids of sessions whose status is not final.
	ActiveSessions(ctx context.Context) ([]string, error)
	// ListStartedSessions returns the sessions ActiveSessions lists that
	// have started (StartedAt set: a machine ran them, and they may wait
	// in the queue again), oldest first, in one read and without their
	// secrets (Secrets nil): what the periodic sweeps decide from, rather
	// than a read of each. Sessions that never started are left out: no
	// sweep acts on them, and a queue of thousands of them would be read
	// every second by every replica.
	ListStartedSessions(ctx context.Context) ([]Session, error)

	// ListArtifactsExpired returns ids of up to limit sessions whose
	// status is final, that ended strictly before endedBefore and whose
	// artifacts are not marked pruned, the earliest ended first (ties by
	// id). A session whose status is not final is never returned.
	ListArtifactsExpired(ctx context.Context, endedBefore time.Time, limit int) ([]string, error)
	// MarkArtifactsPruned sets ArtifactsPrunedAt to at on those of ids
	// whose status is final and whose artifacts are not yet marked, in one
	// short transaction, and returns how many it marked. Unknown ids are
	// skipped.
	MarkArtifactsPruned(ctx context.Context, ids []string, at time.Time) (int, error)

	// PutSnapshot stores s as its session's snapshot, replacing any, and
	// returns the one it replaced (ErrNotFound when none).
	PutSnapshot(ctx context.Context, s Snapshot) (Snapshot, error)
	// GetSnapshot returns a session's snapshot; ErrNotFound when none.
	GetSnapshot(ctx context.Context, sessionID string) (Snapshot, error)
	// DeleteSnapshot removes a session's snapshot row if it is still the
	// one under blobKey; absent rows are no error.
	DeleteSnapshot(ctx context.Context, sessionID, blobKey string) error
	// ListSnapshotsExpired returns up to limit snapshots (0: no cap) whose
	// session is final, or that were created strictly before createdBefore,
	// oldest first.
	ListSnapshotsExpired(ctx context.Context, createdBefore time.Time, limit int) ([]Snapshot, error)

	// AppendEvents appends events to a session's transcript in one
	// transaction, assigning Seq (written back into the slice).
	AppendEvents(ctx context.Context, sessionID string, events []api.Event) error
	// ListEvents returns up to limit events with Seq > after, in order.
	ListEvents(ctx context.Context, sessionID string, after int64, limit int) ([]api.Event, error)
	// TailEvents returns the last limit events of a session, in order.
	TailEvents(ctx context.Context, sessionID string, limit int) ([]api.Event, error)
	// ListCalls returns every call of a session in Seq order.
	ListCalls(ctx context.Context, sessionID string) ([]Call, error)

	// LookupConnectToken finds a connect token by hash.
	LookupConnectToken(ctx context.Context, hash string) (ConnectToken, error)

	// CreateToken inserts an API token.
	CreateToken(ctx context.Context, t Token) error
	// TokenByHash finds a token by the hash of its secret.
	TokenByHash(ctx context.Context, hash string) (Token, error)
	// ListTokens returns every token, newest first.
	ListTokens(ctx context.Context) ([]Token, error)
	// RevokeToken marks a token revoked at now; ErrNotFound when absent.
	RevokeToken(ctx context.Context, id string, now time.Time) error
	// CountTokens counts tokens, revoked ones included.
	CountTokens(ctx context.Context) (int, error)

	AuditLog
	// UpsertUser records a sign-in of u: a new user is inserted; a known
	// Subject keeps its id and creation time and takes the rest of u
	// (DisabledAt included). It returns the stored user.
	UpsertUser(ctx context.Context, u User) (User, error)
	// GetUser finds a user by id; ErrNotFound when absent.
	GetUser(ctx context.Context, id string) (User, error)
	// ListUsers returns every user, oldest first.
	ListUsers(ctx context.Context) ([]User, error)
	// SetUserChecked records the outcome of asking the provider about user
	// id at checkedAt: its refresh token now ("" keeps the stored one) and
	// disabledAt (nil: enabled); ErrNotFound when absent.
	SetUserChecked(ctx context.Context, id string, checkedAt time.Time, refreshToken string, disabledAt *time.Time) error
	// CreateRoleBinding inserts a role binding; ErrConflict when the same
	// role, subject and outpost are already bound.
	CreateRoleBinding(ctx context.Context, b RoleBinding) error
	// ListRoleBindings returns every role binding, oldest first.
	ListRoleBindings(ctx context.Context) ([]RoleBinding, error)
	// DeleteRoleBinding removes a role binding; ErrNotFound when absent.
	DeleteRoleBinding(ctx context.Context, id string) error
	// Device authorization grants (types in device.go).

	// CreateDeviceGrant inserts g, first deleting the grants that expired
	// before prune; ErrConflict when its user code or hash is taken,
	// ErrTooManyDeviceGrants when maxPending (0: no cap) unexpired grants are pending
	// already.
	CreateDeviceGrant(ctx context.Context, g DeviceGrant, prune time.Time, maxPending int) error
	// DeviceGrantByUserCode finds a grant by its user code; ErrNotFound
	// when none.
	DeviceGrantByUserCode(ctx context.Context, userCode string) (DeviceGrant, error)
	// UpdateDeviceGrant reads the grant of hash, locked, and writes what
	// fn returns in one transaction: the grant, and a token to insert
	// with it, so a grant becomes used exactly when its token exists.
	// ErrNotFound when absent; an error of fn rolls back and is returned
	// unchanged. fn may run more than once.
	UpdateDeviceGrant(ctx context.Context, hash string, fn func(DeviceGrant) (DeviceUpdate, error)) error
	// AddDeviceMiss counts one wrong user code of approver at now, in a
	// window of length window that starts at its first miss, and returns
	// the misses of the current window, this one included.
	AddDeviceMiss(ctx context.Context, approver string, now time.Time, window time.Duration) (int, error)
	// DeviceMisses returns the misses of approver in the window current
	// at now (0 when it ended).
	DeviceMisses(ctx context.Context, approver string, now time.Time, window time.Duration) (int, error)

	// Locks and worker presence, shared by every server on the store
	// (types in presence.go).

	// Lock takes the lock called name, shared (any number of holders) or
	// exclusive (one holder, no shared ones), waiting until it is held or
	// ctx ends, when it returns an error wrapping ctx's. ctx bounds only
	// the wait: the lock is held until unlock is called (again, a no-op).
	// Locks are not reentrant, and a waiting exclusive request holds off
	// new shared ones. PostgreSQL holds a session advisory lock on a
	// connection kept for the lock's life, so every server on the
	// database is excluded, and a lost connection releases the lock;
	// SQLite's are in process and do no database work.
	Lock(ctx context.Context, name string, shared bool) (unlock func(), err error)
	// PutWorker records a heartbeat of w.OutpostID's acceptor w.AcceptorID
	// at w.LastSeenAt, live until w.ExpiresAt, in one transaction: an
	// entry live at w.LastSeenAt under another Info.Instance (both
	// non-empty) refuses it with an *AcceptorInUseError naming the holder;
	// a new entry is refused with ErrTooManyWorkers when the outpost has
	// max live entries already (0: no cap). It returns the entry as
	// stored: ConnectedAt is kept from a live entry, else LastSeenAt.
	// Entries of the outpost expired for longer than WorkerOfflineKeep
	// are removed; ErrNotFound when the
	// outpost does not exist. Deleting an outpost deletes its entries.
	PutWorker(ctx context.Context, w Worker, max int) (Worker, error)
	// DeleteWorker takes an acceptor offline at now (its goodbye), only
	// while its instance is instance when instance and the entry's are
	// both non-empty, and reports whether a live entry went offline. The
	// entry stays, offline, for WorkerOfflineKeep.
	DeleteWorker(ctx context.Context, outpostID, acceptorID, instance string, now time.Time) (bool, error)
	// GetWorker returns an outpost's acceptor's entry, live or offline;
	// ErrNotFound when none is kept.
	GetWorker(ctx context.Context, outpostID, acceptorID string) (Worker, error)
	// RecentWorkers returns the entries whose ExpiresAt is after since —
	// the live ones and those offline since then — of outpostID, or of
	// every outpost when outpostID is "", by outpost and acceptor id.
	RecentWorkers(ctx context.Context, outpostID string, since time.Time) ([]Worker, error)
	// ListWorkers returns the outpost's entries live at now (ExpiresAt
	// after now), by acceptor id.
	ListWorkers(ctx context.Context, outpostID string, now time.Time) ([]Worker, error)
	// CountWorkers counts the entries live at now by outpost and kind.
	CountWorkers(ctx context.Context, now time.Time) ([]WorkerCount, error)

	// The fleet's series (types in stats.go; FleetStats puts them
	// together).

	// SessionTimes returns the moments of the sessions of outpostID (""
	// for every outpost) created before to and not ended before from.
	SessionTimes(ctx context.Context, outpostID string, from, to time.Time) ([]SessionTimes, error)
	// PutWorkerSamples writes samples, keeping any already written for an
	// outpost's minute (so several servers may sample at once), and
	// deletes those taken before pruneBefore, in one transaction. It
	// returns how many it wrote.
	PutWorkerSamples(ctx context.Context, samples []WorkerSample, pruneBefore time.Time) (int, error)
	// WorkerSamples returns the samples of outpostID ("" for every
	// outpost) taken in [from, to), by time.
	WorkerSamples(ctx context.Context, outpostID string, from, to time.Time) ([]WorkerSample, error)

	// Replicas: several servers on one database. Each server
	// process heartbeats its row; the live ones are those seen lately.

	// HeartbeatReplica inserts r, or updates its URL and SeenAt.
	HeartbeatReplica(ctx context.Context, r Replica) error
	// ListReplicas returns the replicas seen at or after since, by id.
	ListReplicas(ctx context.Context, since time.Time) ([]Replica, error)
	// DeleteReplica removes a replica's row; an absent one is no error.
	DeleteReplica(ctx context.Context, id string) error

	// Webhook subscriptions and their outbox (webhooks.go).
	Webhooks

	// Ping checks the store answers.
	Ping(ctx context.Context) error
	// Close releases the store.
	Close() error
}

// Cross-replica fan-out: the feed of committed changes that servers
// sharing one database wake each other with.

// Change is one committed write another server may be following: events
// appended to a session's transcript or its queue entry written (Session
// set), or an outpost created or deleted (Session empty), or, with
// Resync, the news that changes may have been missed.
type Change struct {
	// Origin is the replica id of the store that committed the change
	// (e.g. postgres.WithReplica); "" when it has none.
	Origin string
	// SessionID is the session written; "" for an outpost's change.
	SessionID string
	// OutpostID is the outpost of the session or the outpost created or
	// deleted; "" when the writer did not know it (an append of events).
	OutpostID string
	// Seq is the session's highest event seq once the change committed
	// (0 when it has none): the stored transcript goes at least that far.
	Seq int64
	// Rev and Epoch are the queue entry's when the change wrote it; 0
	// when it did not.
	Rev, Epoch int64
	// Resync says the feed (re)connected: changes committed before may
	// have been missed, so whatever the consumer follows must be read from
	// the store again. The other fields are zero.
	Resync bool
	// Err, on a Resync, is what broke the feed's previous connection (nil
	// on the first); for logs.
	Err error
}

// ChangeFeed is implemented by a store several servers can share (the
// PostgreSQL store): it tells each of them of the changes any of them
// commits. A store without it is used by one server, which knows its own
// changes in process.
type ChangeFeed interface {
	// Listen calls fn with each committed change until ctx ends, and
	// returns ctx's error. It calls fn with a Resync change when it starts
	// listening and again each time it had to reconnect. Changes that
	// write a queue entry come once each, in commit order; changes that
	// only append events may come after later ones, and several of one
	// session as one (with the highest Seq). fn runs on Listen's
	// goroutine, one change at a time: it must be quick.
	Listen(ctx context.Context, fn func(Change)) error
}
