package api

// Platforms an outpost can serve.
const (
	PlatformLinux   = "linux"
	PlatformMacOS   = "macos"
	PlatformWindows = "windows"
)

// Outpost is a named queue of sessions served by machines of one platform.
type Outpost struct {
	Metadata OutpostMetadata `json:"metadata"`
	Spec     OutpostSpec     `json:"spec"`
	Status   OutpostStatus   `json:"status"`
}

// OutpostMetadata identifies an outpost.
type OutpostMetadata struct {
	// OutpostID is the outpost's id, "outpost_env-…" (outposts created
	// before that shape keep their "outpost_…"); APIs take it or the name.
	OutpostID string `json:"outpost_id"`
	// AccountID is the public fleet API's field; Outpost has one account.
	AccountID string `json:"account_id"`
	// CreatedAt is Unix seconds.
	CreatedAt int64 `json:"created_at"`
}

// OutpostSpec is what its creator said about an outpost.
type OutpostSpec struct {
	// Name is a DNS label (lower-case letters, digits, '-'), unique.
	Name string `json:"name"`
	// Platform is PlatformLinux, PlatformMacOS or PlatformWindows: the
	// machines that may claim its sessions.
	Platform string `json:"platform"`
	// Description is free text for people.
	Description string `json:"description"`
	// AllowedOrgIDs are the organizations of the public fleet API whose
	// sessions may be routed to the outpost; null when unset. Outpost has
	// no organizations: the list is stored and returned, not enforced.
	AllowedOrgIDs []string `json:"allowed_org_ids"`
	// RemoteBinarySHA is the remote build (a version id of the /dist/
	// layout) the outpost's sessions run unless they pin their own; null
	// for the claimer's default.
	RemoteBinarySHA *string `json:"remote_binary_sha"`
	// MaxRunning caps how many of the outpost's sessions are claimed at
	// once, whatever the number of machines; 0 means no cap. Sessions
	// beyond it wait in the queue.
	MaxRunning int `json:"max_running"`
	// MaxAttempts is how many attempts (claims that end without the
	// session ending: its machine died, or could not be provisioned) a
	// session gets before it ends in error, unless it sets
	// limits.max_attempts. Shown as it applies (DefaultMaxAttempts when
	// unset).
	MaxAttempts int `json:"max_attempts"`
	// MaxSnapshotBytes is the largest workspace snapshot the server stores
	// for a session of the outpost; 0 means the server's limit (outpost
	// server --max-snapshot-bytes), which also caps it. A suspend whose
	// snapshot is larger fails and the session goes on running.
	MaxSnapshotBytes int64 `json:"max_snapshot_bytes"`
	// NetworkPolicy is the outpost's network policy, the default of its
	// sessions (see SessionSpec.NetworkPolicy); null when it has none
	// (unrestricted).
	NetworkPolicy *NetworkPolicy `json:"network_policy,omitempty"`
	// Desktop says whether the outpost's sessions get a desktop, and its
	// default size; null (omitted) when the outpost says nothing (its
	// machines decide, and sessions may be served by machines without one).
	Desktop *OutpostDesktop `json:"desktop,omitempty"`
	// Requirements are the default of its sessions that state none of
	// their own (see CreateSessionRequest.Requirements); null when unset.
	Requirements *Requirements `json:"requirements,omitempty"`
	// ApprovalRules apply to every tool call of the outpost's sessions
	// (ApprovalRule); omitted when it has none.
	ApprovalRules []ApprovalRule `json:"approval_rules,omitempty"`
	// Budget caps what the outpost's sessions spend per month; omitted
	// when it has none.
	Budget *OutpostBudget `json:"budget,omitempty"`
}

// OutpostDesktop is an outpost's desktop setting.
type OutpostDesktop struct {
	// Enabled says every session of the outpost gets a desktop: claimers
	// start their remotes with OUTPOST_DESKTOP=true, and a claimer that
	// cannot give one (capabilities.desktop false) is not handed the
	// outpost's sessions by a server-assigned claim. False: the outpost
	// asks for none; Width and Height still size the desktops its machines
	// give on their own.
	Enabled bool `json:"enabled"`
	// Width and Height are the size of a session's desktop when the
	// session gives none (spec.desktop); 0 for both means the default,
	// 1280×800. Each is MinDesktopSize to MaxDesktopSize, and both or
	// neither are set.
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`
}

// DefaultMaxAttempts is how many attempts a session gets when neither it
// (limits.max_attempts) nor its outpost (max_attempts) says.
const DefaultMaxAttempts = 3

// MaxAttemptsLimit bounds max_attempts and MaxRunningLimit max_running.
const (
	MaxAttemptsLimit = 100
	MaxRunningLimit  = 100000
)

// MaxLimitSeconds bounds a session's limits in seconds (max_duration_s,
// idle_s, suspend_after_idle_s): a hundred years, far beyond any session,
// and far inside what a time.Duration holds, so a limit is never a
// negative duration after the conversion.
const MaxLimitSeconds = 100 * 365 * 24 * 3600

// OutpostStatus is the live state of an outpost's queue.
type OutpostStatus struct {
	// QueueDepth counts pending, unclaimed sessions.
	QueueDepth int `json:"queue_depth"`
	// ActiveClaims counts claims that have not lapsed.
	ActiveClaims int `json:"active_claims"`
	// BudgetUsage is the month's usage of an outpost with a budget;
	// omitted otherwise.
	BudgetUsage *OutpostBudgetUsage `json:"budget_usage,omitempty"`
}

// MaxAllowedOrgIDs bounds CreateOutpostRequest.AllowedOrgIDs.
const MaxAllowedOrgIDs = 100

// CreateOutpostRequest is the body of POST /v1/outposts.
type CreateOutpostRequest struct {
	// Name, Platform and Description become the outpost's spec
	// (OutpostSpec); an empty Platform is PlatformLinux.
	Name        string `json:"name"`
	Platform    string `json:"platform"`
	Description string `json:"description"`
	// AllowedOrgIDs is the public fleet API's field: at most
	// MaxAllowedOrgIDs organization ids, stored and returned on
	// spec.allowed_org_ids. Nil (or JSON null) leaves it unset; an empty
	// list is kept as an empty list.
	AllowedOrgIDs []string `json:"allowed_org_ids,omitzero"`
	// RemoteBinarySHA pins the remote build of the outpost's sessions:
	// 6 to 40 lower-case hex digits.
	RemoteBinarySHA string `json:"remote_binary_sha,omitempty"`
	// MaxRunning and MaxAttempts are OutpostSpec's: 0 to MaxRunningLimit
	// (0: no cap) and 0 to MaxAttemptsLimit (0: DefaultMaxAttempts).
	MaxRunning  int `json:"max_running,omitempty"`
	MaxAttempts int `json:"max_attempts,omitempty"`
	// MaxSnapshotBytes is OutpostSpec's: 0 (the server's limit) up to the
	// server's limit.
	MaxSnapshotBytes int64 `json:"max_snapshot_bytes,omitempty"`
	// NetworkPolicy is OutpostSpec's; omitted for none (unrestricted).
	NetworkPolicy *NetworkPolicy `json:"network_policy,omitempty"`
	// Desktop is OutpostSpec's; omitted for none.
	Desktop *OutpostDesktop `json:"desktop,omitempty"`
	// Requirements are OutpostSpec's; omitted for none.
	Requirements *Requirements `json:"requirements,omitempty"`
	// ApprovalRules are OutpostSpec's: at most MaxApprovalRules.
	ApprovalRules []ApprovalRule `json:"approval_rules,omitempty"`
	// Budget is OutpostSpec's; omitted for none.
	Budget *OutpostBudget `json:"budget,omitempty"`
}

// UpdateOutpostRequest is the body of PATCH /v1/outposts/{outpost}: the
// fields to change, nil leaving one as it is. A new MaxAttempts applies to
// sessions created afterwards; a new MaxRunning to the next claims.
type UpdateOutpostRequest struct {
	// MaxRunning and MaxAttempts are as in CreateOutpostRequest.
	MaxRunning  *int `json:"max_running,omitempty"`
	MaxAttempts *int `json:"max_attempts,omitempty"`
	// MaxSnapshotBytes is as in CreateOutpostRequest; it applies to the
	// next suspends.
	MaxSnapshotBytes *int64 `json:"max_snapshot_bytes,omitempty"`
	// NetworkPolicy replaces the outpost's network policy ({"enabled":
	// false} lifts it). It applies at once to the outpost's sessions that
	// have no policy of their own, running ones included: their queue
	// entries change (a MODIFIED watch event each) and their workers
	// apply the new policy.
	NetworkPolicy *NetworkPolicy `json:"network_policy,omitempty"`
	// Desktop replaces the outpost's desktop setting ({"enabled": false}
	// with no size removes it). It applies to sessions created and claims
	// made afterwards; a session keeps the size it was created with.
	Desktop *OutpostDesktop `json:"desktop,omitempty"`
	// ApprovalRules replaces the outpost's approval rules ([] removes
	// them). They apply to the next tool call of every session of the
	// outpost, running ones included.
	ApprovalRules *[]ApprovalRule `json:"approval_rules,omitempty"`
	// Budget replaces the outpost's budget ({} removes it). A lower cap
	// applies at once: running sessions over it are suspended or ended.
	Budget *OutpostBudget `json:"budget,omitempty"`
}

// OutpostList is the answer of GET /v1/outposts: one page of outposts,
// ordered by name.
type OutpostList struct {
	Items []Outpost `json:"items"`
	// Cursor and EndCursor are the same opaque position after the page's
	// last item: pass it back as the after (or cursor) query parameter
	// while HasNextPage is true. EndCursor is the public fleet API's name;
	// it is null when the page is empty.
	Cursor      string  `json:"cursor"`
	EndCursor   *string `json:"end_cursor"`
	HasNextPage bool    `json:"has_next_page"`
	// Total counts every outpost the caller may see, on all pages.
	Total int `json:"total"`
}
