package api

// ToolNetworkAccessRequest asks a person for network access the session's
// policy does not give. It is the one tool the control plane answers
// itself: the call never reaches the remote, and its result is a person's
// answer (NetworkAccessResult), which may take minutes or hours.
const ToolNetworkAccessRequest = "network_access_request"

// Bounds of a network access request's arguments.
const (
	// MaxNetworkRequestDomains is how many domains one request may name.
	MaxNetworkRequestDomains = 20
	// MaxNetworkRequestReason is the longest reason, in bytes.
	MaxNetworkRequestReason = 2000
)

// NetworkAccessRequestArgs asks for access to domains, for a reason a
// person reads before answering.
type NetworkAccessRequestArgs struct {
	// Domains are host names (api.example.com) or "*." wildcards
	// (*.example.com), checked as a network policy's hostname rules are.
	Domains []string `json:"domains" jsonschema:"Host names (api.example.com) or wildcards (*.example.com) the task needs to reach; 1 to 20."`
	// Reason says why the task needs them.
	Reason string `json:"reason" jsonschema:"Why the task needs these domains, in a sentence or two for the person who decides."`
}

// NetworkAccessResult is what network_access_request returns: a person's
// answer. A denial is a result like a grant, not a failed call.
type NetworkAccessResult struct {
	// RequestID is the request's id (its call's sequence number).
	RequestID string `json:"request_id"`
	// Granted says whether the domains may now be reached.
	Granted bool `json:"granted"`
	// Scope is where a grant was written: NetworkGrantSession (the
	// session's own policy) or NetworkGrantOutpost (its outpost's, and the
	// session's own when it has one). Empty for a denial.
	Scope string `json:"scope,omitempty"`
	// Domains are the domains asked for, normalized.
	Domains []string `json:"domains"`
	// Reason is the answer's reason: a denial's, or a sentence about the
	// grant.
	Reason string `json:"reason,omitempty"`
}

// Scopes of a network grant (NetworkGrantRequest.Scope).
const (
	NetworkGrantSession = "session"
	NetworkGrantOutpost = "outpost"
)

// States of a network access request (NetworkRequest.State).
const (
	NetworkRequestPending = "pending"
	NetworkRequestGranted = "granted"
	NetworkRequestDenied  = "denied"
)

// NetworkRequest is a network access request as the transcript's
// network_request events show it: one event when the agent asks (State
// pending), one when a person answers, and the answer's view from the
// grant and deny endpoints.
type NetworkRequest struct {
	// ID is the request's id in the session: its call's sequence number,
	// in decimal. The grant and deny endpoints name it.
	ID string `json:"id"`
	// Domains are what the agent asked for, normalized.
	Domains []string `json:"domains"`
	// Reason is the agent's reason.
	Reason string `json:"reason"`
	// State is NetworkRequestPending, NetworkRequestGranted or
	// NetworkRequestDenied.
	State string `json:"state"`
	// Scope is where a grant was written (NetworkGrantSession or
	// NetworkGrantOutpost).
	Scope string `json:"scope,omitempty"`
	// AnsweredBy is the id of the token that answered.
	AnsweredBy string `json:"answered_by,omitempty"`
	// Answer is the reason given with a denial.
	Answer string `json:"answer,omitempty"`
}

// NetworkRequestList is GET /v1/sessions/{id}/network-requests: the
// session's requests that wait for an answer, oldest first. An ended
// session's requests can no longer be answered, so its list is empty.
type NetworkRequestList struct {
	Items []NetworkRequest `json:"items"`
}

// NetworkGrantRequest is the body of POST
// /v1/sessions/{id}/network-requests/{request_id}/grant.
type NetworkGrantRequest struct {
	// Scope is NetworkGrantSession (the default) or NetworkGrantOutpost.
	Scope string `json:"scope,omitempty"`
}

// NetworkDenyRequest is the body of POST
// /v1/sessions/{id}/network-requests/{request_id}/deny.
type NetworkDenyRequest struct {
	// Reason tells the agent why; it reads it as the tool's result.
	Reason string `json:"reason,omitempty"`
}
