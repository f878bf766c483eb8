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
)

// HeaderWatchRelist is set to "true" on a queue watch stream that starts
// with the current state of the queue (a re-list: one MODIFIED event per
// live entry, oldest change first, then every later change) because the
// server did not issue the stream's cursor. Tombstones from before the
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
	SessionID string `json:"session_id"`
	OutpostID string `json:"outpost_id"`
	CreatedAt int64  `json:"created_at"`
	UpdatedAt int64  `json:"updated_at"`
}

// QueueSpec says what a claimer is asked to serve.
type QueueSpec struct {
	Kind            string         `json:"kind"`
	Platform        string         `json:"platform"`
	RemoteBinarySHA *string        `json:"remote_binary_sha"`
	NetworkPolicy   *NetworkPolicy `json:"network_policy,omitempty"`
}

// NetworkPolicy is the effective network policy of a session.
type NetworkPolicy struct {
	Enabled bool                `json:"enabled"`
	Allow   []NetworkPolicyRule `json:"allow"`
}

// NetworkPolicyRule allows one host glob or address range.
type NetworkPolicyRule struct {
	Hostname string `json:"hostname,omitempty"`
	IPv4     string `json:"ipv4,omitempty"`
	IPv6     string `json:"ipv6,omitempty"`
}

// QueueStatus is the claim state of a queue entry.
type QueueStatus struct {
	Phase         string  `json:"phase"`
	AcceptorID    *string `json:"acceptor_id"`
	ClaimDeadline *int64  `json:"claim_deadline"`
	SessionStatus string  `json:"session_status"`
	// ConnectToken is set only in a successful claim answer.
	ConnectToken string `json:"connect_token,omitempty"`
	// GatewayURL is set only in a successful claim answer.
	GatewayURL string `json:"gateway_url,omitempty"`
}

// QueueList is a page of queue entries.
type QueueList struct {
	Items       []QueueEntry `json:"items"`
	Cursor      string       `json:"cursor"`
	HasNextPage bool         `json:"has_next_page"`
	Total       int          `json:"total"`
}

// WatchEvent is one `data:` line of a queue watch stream.
type WatchEvent struct {
	Type   string     `json:"type"`
	Object QueueEntry `json:"object"`
	Cursor string     `json:"cursor"`
}

// ClaimRequest is the body of claim and release.
type ClaimRequest struct {
	AcceptorID string `json:"acceptor_id"`
	// Reason, on a release only, says why the claim is given back (for
	// example why provisioning failed); it goes onto the session's status
	// and transcript. At most 1,000 characters.
	Reason string `json:"reason,omitempty"`
}
