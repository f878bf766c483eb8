package api

// Queue entry kinds (spec.kind).
const (
	KindNew    = "new"
	KindResume = "resume"
)

// Queue phases (status.phase).
const (
	PhasePending = "pending"
	PhaseClaimed = "claimed"
)

// Coarse session states shown on queue entries (status.session_status).
const (
	QueueSessionPending    = "pending"
	QueueSessionRunning    = "running"
	QueueSessionSuspended  = "suspended"
	QueueSessionTerminated = "terminated"
)

// Watch event types.
const (
	WatchModified = "MODIFIED"
	WatchDeleted  = "DELETED"
	// WatchBookmark carries only a cursor, past changes the stream did
	// not show: sent on streams narrowed to one acceptor's entries
	// (QueryHeldBy), never on the contract's streams.
	WatchBookmark = "BOOKMARK"
)

// QueryHeldBy narrows a queue watch (?watch=true) to the entries one
// acceptor holds: the changes of the entries claimed by it, and the change
// that ends each such claim it showed; bookmark events (WatchBookmark)
// move the cursor past the rest. An Outpost extension: the contract's
// acceptor_id does not apply to watches. A worker that claims through
// waiting claim-next requests needs no other entries.
const QueryHeldBy = "held_by"

// HeaderWatchRelist is set to "true" on a queue watch stream that starts
// with the current state of the queue (a re-list: one MODIFIED event per
// live entry, oldest change first, then every later change) because the
// server did not issue the stream's cursor, or because the cursor is
// older than the deletions the server still keeps (it prunes those of
// ended sessions after a while, so a replay could miss one). Tombstones
// from before the
// stream are not sent: a client that keeps the entries it saw forgets them
// when the header is set and rebuilds them from the stream's events.
// Streams from a cursor of this server replay its changes and lack the
// header.
const HeaderWatchRelist = "X-Outpost-Watch-Relist"

// QueueEntry is a session's place in an outpost's queue, as the fleet API
// shows it.
type QueueEntry struct {
	Metadata QueueMetadata `json:"metadata"`
	Spec     QueueSpec     `json:"spec"`
	Status   QueueStatus   `json:"status"`
}

// QueueMetadata identifies a queue entry.
type QueueMetadata struct {
	// SessionID is the session the entry is for.
	SessionID string `json:"session_id"`
	// OutpostID is the id of the outpost whose queue holds it.
	OutpostID string `json:"outpost_id"`
	// CreatedAt and UpdatedAt are Unix seconds.
	CreatedAt int64 `json:"created_at"`
	UpdatedAt int64 `json:"updated_at"`
	// CreatedAtMS is CreatedAt in Unix milliseconds: within one priority
	// entries are claimed in its order.
	CreatedAtMS int64 `json:"created_at_ms"`
}

// QueueSpec says what a claimer is asked to serve.
type QueueSpec struct {
	// Kind is KindNew, or KindResume for a session whose machine went away.
	Kind string `json:"kind"`
	// Platform is the outpost's: the claimer must run on it.
	Platform string `json:"platform"`
	// RemoteBinarySHA is the remote build to run (the session's pin, else
	// its outpost's); null for the claimer's default.
	RemoteBinarySHA *string `json:"remote_binary_sha"`
	// Priority is the session's: claimers take higher priorities first,
	// FIFO within one.
	Priority int `json:"priority"`
	// NetworkPolicy is the session's effective network policy: its own
	// when it has one, else its outpost's. Null (omitted) when the session
	// is unrestricted. A claimer must enforce it or refuse the session.
	NetworkPolicy *NetworkPolicy `json:"network_policy,omitempty"`
	// Desktop, on the answer of a claim, says the session's outpost gives
	// its sessions a desktop (OutpostDesktop.Enabled): the claimer starts
	// the remote with OUTPOST_DESKTOP=true. Lists and watch events leave
	// it out.
	Desktop bool `json:"desktop,omitempty"`
	// Requirements are the session's effective requirements (its own,
	// else its outpost's); null (omitted) when it has none. A claimer that
	// provisions machines (an orchestrator, the Kubernetes operator)
	// provisions one that meets them.
	Requirements *Requirements `json:"requirements,omitempty"`
}

// NetworkPolicy says what a session's code may reach on the network. It is
// set on an outpost (the default of its sessions) and on a session (which
// may only narrow its outpost's unless a token with ScopeNetworkAdmin sets
// it).
type NetworkPolicy struct {
	// Enabled says the policy applies: connections are allowed only when
	// a rule of Allow admits them. False means unrestricted, and Allow is
	// ignored. A request whose policy has Allow rules must send "enabled"
	// explicitly: the server refuses one without it, which would
	// otherwise read as false and store the rules unenforced. This type
	// always encodes the key.
	Enabled bool `json:"enabled"`
	// Allow lists what is reachable while Enabled (at most
	// MaxNetworkPolicyRules rules); an empty list reaches nothing but the
	// resolver.
	Allow []NetworkPolicyRule `json:"allow"`
}

// MaxNetworkPolicyRules bounds NetworkPolicy.Allow and
// MaxNetworkPolicyPorts NetworkPolicyRule.Ports.
const (
	MaxNetworkPolicyRules = 1000
	MaxNetworkPolicyPorts = 100
)

// NetworkPolicyRule allows one host name (or name glob) or address range,
// on every port or on the listed ones.
type NetworkPolicyRule struct {
	// Exactly one of Hostname, IPv4 and IPv6 is set. Hostname is a DNS
	// name ("api.example.test") or a glob whose first label is "*"
	// ("*.example.test": any name below example.test, not example.test
	// itself), matched case-insensitively against a connection's TLS SNI
	// or HTTP Host. IPv4 and IPv6 are an address or a CIDR range of their
	// family.
	Hostname string `json:"hostname,omitempty"`
	IPv4     string `json:"ipv4,omitempty"`
	IPv6     string `json:"ipv6,omitempty"`
	// Ports limits the rule to these destination ports (1 to 65535, at
	// most MaxNetworkPolicyPorts); empty allows every port.
	Ports []int `json:"ports,omitempty"`
}

// QueueStatus is the claim state of a queue entry.
type QueueStatus struct {
	// Phase is PhasePending or PhaseClaimed.
	Phase string `json:"phase"`
	// AcceptorID is the claim's holder; null while pending.
	AcceptorID *string `json:"acceptor_id"`
	// ClaimDeadline is when the claim lapses unless a remote has connected
	// or the holder claims again (Unix seconds); null while pending.
	ClaimDeadline *int64 `json:"claim_deadline"`
	// SessionStatus is one of the QueueSession… constants.
	SessionStatus string `json:"session_status"`
	// Attempts counts the session's claims that ended without the session
	// ending (a lapse, or a release while it was not over); at MaxAttempts
	// the session ends in error.
	Attempts    int `json:"attempts"`
	MaxAttempts int `json:"max_attempts"`
	// ConnectToken is set only in a successful claim answer.
	ConnectToken string `json:"connect_token,omitempty"`
	// GatewayURL is set only in a successful claim answer.
	GatewayURL string `json:"gateway_url,omitempty"`
}

// QueueList is a page of queue entries.
type QueueList struct {
	Items []QueueEntry `json:"items"`
	// Cursor continues the list (the cursor query parameter) and starts a
	// watch from this page's state (?watch=true&cursor=…).
	Cursor      string `json:"cursor"`
	HasNextPage bool   `json:"has_next_page"`
	// Total counts the matching entries on all pages.
	Total int `json:"total"`
}

// WatchEvent is one `data:` line of a queue watch stream.
type WatchEvent struct {
	// Type is WatchModified or WatchDeleted; WatchBookmark (Cursor alone)
	// on a stream with QueryHeldBy.
	Type string `json:"type"`
	// Object is the entry as it is after the change.
	Object QueueEntry `json:"object"`
	// Cursor resumes a watch right after this event.
	Cursor string `json:"cursor"`
}

// MaxClaimNextExclude bounds ClaimNextRequest.Exclude.
const MaxClaimNextExclude = 100

// MaxClaimNextWait bounds ClaimNextRequest.WaitSeconds.
const MaxClaimNextWait = 60

// HeaderClaimWait is set on every 200 and 204 answer of a server that parks
// claim-next requests (ClaimNextRequest.WaitSeconds), to the longest wait
// it grants in seconds. A server without it answers at once whatever the
// request asks, so a claimer that finds it missing asks as it did before.
const HeaderClaimWait = "X-Outpost-Claim-Wait"

// ClaimNextRequest is the body of POST /v1/outposts/{outpost}/queue:claim,
// a server-assigned claim: the server claims for AcceptorID the first
// pending session of the outpost in claim order (higher priority first,
// then oldest) that the claimer can take, as a claim by id would, or
// answers 204 No Content when there is none. It is for Outpost's own
// claimers, so that concurrent claimers never race for one session; the
// claim by id stays for everyone.
type ClaimNextRequest struct {
	// AcceptorID names the claimer (see ValidateAcceptorID).
	AcceptorID string `json:"acceptor_id"`
	// Platform, when set, skips sessions pinned to another platform
	// (PlatformLinux, ...); sessions that pin none are taken.
	Platform string `json:"platform,omitempty"`
	// Exclude lists sessions the claimer does not want now (at most
	// MaxClaimNextExclude), such as ones it postponed.
	Exclude []string `json:"exclude,omitempty"`
	// NetworkPolicy says the claimer enforces spec.network_policy. Only
	// such a claimer is given a restricted session (one whose policy is
	// enabled): a claimer that leaves it out — one that cannot enforce, or
	// a build from before policies existed — is never handed one to serve
	// open. A claim by id is the contract's and takes any entry.
	NetworkPolicy bool `json:"network_policy,omitempty"`
	// Desktop says the claimer gives sessions a desktop. Only such a
	// claimer is handed a session of an outpost whose desktop is enabled.
	Desktop bool `json:"desktop,omitempty"`
	// Machine describes the machine the claimer would serve the session
	// on, so that it is given only a session whose requirements (its own,
	// else its outpost's) the machine meets. A claimer that leaves it out
	// is given only sessions without requirements.
	Machine *ClaimMachine `json:"machine,omitempty"`
	// Provisions says the claimer provisions a machine for each session to
	// meet its requirements (spec.requirements), as an orchestrator or
	// the Kubernetes operator does: it is given sessions with requirements
	// without a Machine to check them against.
	Provisions bool `json:"provisions,omitempty"`
	// WaitSeconds, 0 to MaxClaimNextWait, is how long the server may hold
	// the request when nothing is claimable for it: it parks it and
	// claims for it the first fitting session that becomes pending in
	// that time, else answers 204 when it is over (or when the server
	// stops). 0 answers at once. One parked request per idle claimer
	// replaces a request per claimer for each new session.
	WaitSeconds int `json:"wait_seconds,omitempty"`
}

// ClaimMachine is a claimer's machine as a claim-next states it: what a
// worker's heartbeat says of it.
type ClaimMachine struct {
	// Capabilities are the machine's (CPUs, memory, GPUs).
	Capabilities *Capabilities `json:"capabilities,omitempty"`
	// Labels are the worker's (see ValidateLabel).
	Labels map[string]string `json:"labels,omitempty"`
}

// ClaimRequest is the body of claim and release.
type ClaimRequest struct {
	// AcceptorID names the claimer (see ValidateAcceptorID); a claim by the
	// holder renews it.
	AcceptorID string `json:"acceptor_id"`
	// Reason, on a release only, says why the claim is given back (for
	// example why provisioning failed); it goes onto the session's status
	// and transcript. At most 1,000 characters.
	Reason string `json:"reason,omitempty"`
	// Shutdown, on a release only, says the claimer gives the session
	// back because it is shutting down, not because its machine failed:
	// the release is not a failed attempt (see OutpostSpec.MaxAttempts)
	// even with a Reason.
	Shutdown bool `json:"shutdown,omitempty"`
}
