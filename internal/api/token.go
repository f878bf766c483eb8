package api

// Token scopes.
const (
	ScopeMachine       = "outposts.machine"
	ScopeOrchestrator  = "outposts.orchestrator"
	ScopeSessionsRead  = "sessions.read"
	ScopeSessionsWrite = "sessions.write"
	ScopeAdmin         = "admin"
)

// Scopes lists every scope a token can hold.
var Scopes = []string{ScopeMachine, ScopeOrchestrator, ScopeSessionsRead, ScopeSessionsWrite, ScopeAdmin}

// Token describes an API token. The secret itself is shown once, in
// CreateTokenResponse.
type Token struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	Scopes    []string `json:"scopes"`
	OutpostID string   `json:"outpost_id,omitempty"`
	// Outpost is the name of the outpost OutpostID names, when it exists.
	Outpost   string `json:"outpost,omitempty"`
	CreatedAt int64  `json:"created_at"`
	ExpiresAt *int64 `json:"expires_at"`
	RevokedAt *int64 `json:"revoked_at"`
}

// CreateTokenRequest is the body of POST /v1/tokens.
type CreateTokenRequest struct {
	Name       string   `json:"name"`
	Scopes     []string `json:"scopes"`
	Outpost    string   `json:"outpost,omitempty"`
	ExpiresInS int64    `json:"expires_in_s,omitempty"`
}

// CreateTokenResponse is the answer of POST /v1/tokens; Token is shown once.
type CreateTokenResponse struct {
	Token
	Secret string `json:"token"`
}

// TokenList is the answer of GET /v1/tokens.
type TokenList struct {
	Items []Token `json:"items"`
}
