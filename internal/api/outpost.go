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
	OutpostID string `json:"outpost_id"`
	AccountID string `json:"account_id"`
	CreatedAt int64  `json:"created_at"`
}

// OutpostSpec is what its creator said about an outpost.
type OutpostSpec struct {
	Name        string `json:"name"`
	Platform    string `json:"platform"`
	Description string `json:"description"`
	// RemoteBinarySHA is the remote build (a version id of the /dist/
	// layout) the outpost's sessions run unless they pin their own; null
	// for the claimer's default.
	RemoteBinarySHA *string `json:"remote_binary_sha"`
}

// OutpostStatus is the live state of an outpost's queue.
type OutpostStatus struct {
	// QueueDepth counts pending, unclaimed sessions.
	QueueDepth int `json:"queue_depth"`
	// ActiveClaims counts claims that have not lapsed.
	ActiveClaims int `json:"active_claims"`
}

// CreateOutpostRequest is the body of POST /v1/outposts.
type CreateOutpostRequest struct {
	Name        string `json:"name"`
	Platform    string `json:"platform"`
	Description string `json:"description"`
	// RemoteBinarySHA pins the remote build of the outpost's sessions:
	// 6 to 40 lower-case hex digits.
	RemoteBinarySHA string `json:"remote_binary_sha,omitempty"`
}

// OutpostList is the answer of GET /v1/outposts.
type OutpostList struct {
	Items       []Outpost `json:"items"`
	Cursor      string    `json:"cursor"`
	HasNextPage bool      `json:"has_next_page"`
	Total       int       `json:"total"`
}
