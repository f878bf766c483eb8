package api

// Token scopes.
const (
	ScopeMachine       = "outposts.machine"
	ScopeOrchestrator  = "outposts.orchestrator"
	ScopeSessionsRead  = "sessions.read"
	ScopeSessionsWrite = "sessions.write"
	ScopeAdmin         = "admin"
	// ScopeNetworkAdmin lets a token give a session a network policy that
	// widens its outpost's (sessions.write is still needed to change a
	// session). Admin implies it.
	ScopeNetworkAdmin = "network.admin"
)

// Scopes lists every scope a token can hold.
var Scopes = []string{ScopeMachine, ScopeOrchestrator, ScopeSessionsRead, ScopeSessionsWrite, ScopeNetworkAdmin, ScopeAdmin}

// HasScope reports whether a token holding scopes may act with scope want,
// counting the implications: admin implies every scope,
// outposts.orchestrator implies outposts.machine, and sessions.write
// implies sessions.read.
func HasScope(scopes []string, want string) bool {
	for _, s := range scopes {
		switch {
		case s == want, s == ScopeAdmin:
			return true
		case s == ScopeOrchestrator && want == ScopeMachine:
			return true
		case s == ScopeSessionsWrite && want == ScopeSessionsRead:
			return true
		}
	}
	return false
}

// Token describes an API token. The secret itself is shown once, in
// CreateTokenResponse.
type Token struct {
	// ID is the token's id, "tok_…", not its secret.
	ID string `json:"id"`
	// Name is a label for people.
	Name string `json:"name"`
	// Scopes are Scope… constants (see HasScope for what they imply).
	Scopes []string `json:"scopes"`
	// Role, when set, is the role the token was created with (Scopes are
	// that role's).
	Role string `json:"role,omitempty"`
	// UserID is the user the token belongs to: it never does more than
	// that user may, and dies with the user's access. "" for a token of a
	// service account, which is only what its scopes say.
	UserID string `json:"user_id,omitempty"`
	// OutpostID is the outpost the token is limited to; "" when it is not.
	// Any other outpost, and what is in it, does not exist for the token:
	// the server answers 404 as for a missing one.
	OutpostID string `json:"outpost_id,omitempty"`
	// Outpost is the name of the outpost OutpostID names, when it exists.
	Outpost string `json:"outpost,omitempty"`
	// SessionID is the session the token is limited to; "" when it is not.
	// Such a token reaches only that session's routes (and its MCP
	// endpoint), holds sessions scopes only, and stops working when the
	// session ends. OutpostID is the session's outpost.
	SessionID string `json:"session_id,omitempty"`
	// CreatedAt, ExpiresAt and RevokedAt are Unix seconds; null when it
	// never expires or is not revoked.
	CreatedAt int64  `json:"created_at"`
	ExpiresAt *int64 `json:"expires_at"`
	RevokedAt *int64 `json:"revoked_at"`
}

// CreateTokenRequest is the body of POST /v1/tokens.
type CreateTokenRequest struct {
	// Name is a label for people.
	Name string `json:"name"`
	// Scopes are Scope… constants; at least one unless Role is set.
	Scopes []string `json:"scopes,omitempty"`
	// Role (one of Roles) gives the token that role's scopes instead.
	Role string `json:"role,omitempty"`
	// ServiceAccount makes a signed-in admin's token a service account's
	// rather than the admin's own, so it outlives the admin's access. A
	// token made with a service account's token is always one.
	ServiceAccount bool `json:"service_account,omitempty"`
	// Outpost, a name or id, limits the token to that outpost.
	Outpost string `json:"outpost,omitempty"`
	// Session limits the token to one session, for an outside agent: it
	// reaches that session's routes only (every other answers 404 or 403)
	// and stops working when the session ends. Its scopes must be
	// sessions.read or sessions.write (the default when none are given);
	// the caller needs sessions.write on the session, not admin.
	Session string `json:"session,omitempty"`
	// ExpiresInS makes the token expire that many seconds from now; 0
	// never.
	ExpiresInS int64 `json:"expires_in_s,omitempty"`
}

// CreateTokenResponse is the answer of POST /v1/tokens; Token is shown once.
type CreateTokenResponse struct {
	Token
	// Secret is the bearer token itself, "opt_…", shown this once.
	Secret string `json:"token"`
}

// TokenList is the answer of GET /v1/tokens.
type TokenList struct {
	Items []Token `json:"items"`
}

// WhoAmI is the answer of GET /v1/whoami: the token the request was made
// with (never its secret) and, when it is limited to an outpost, that
// outpost's name.
type WhoAmI struct {
	Token
	// Outpost is the name of the outpost the token is limited to; empty
	// when it is not limited (OutpostID is empty too) or that outpost was
	// deleted.
	Outpost string `json:"outpost,omitempty"`
}
