package api

import "slices"

// Roles a user, a provider group or a token can hold, globally or on one
// outpost. Each is a set of scopes (RoleScopes), so every route keeps its
// scope check and a role is only a name for scopes people reason about.
const (
	// RoleAdmin may do everything, tokens and roles included.
	RoleAdmin = "admin"
	// RoleOperator runs the fleet: outposts, their settings and machine
	// tokens, and reads sessions.
	RoleOperator = "operator"
	// RoleMember creates and steers sessions on the outposts granted.
	RoleMember = "member"
	// RoleViewer reads outposts and sessions and changes nothing.
	RoleViewer = "viewer"
)

// Roles lists every role, strongest first.
var Roles = []string{RoleAdmin, RoleOperator, RoleMember, RoleViewer}

// RoleScopes are the scopes of a role; nil for an unknown one.
func RoleScopes(role string) []string {
	switch role {
	case RoleAdmin:
		return []string{ScopeAdmin}
	case RoleOperator:
		return []string{ScopeOrchestrator, ScopeSessionsRead, ScopeNetworkAdmin}
	case RoleMember:
		return []string{ScopeSessionsWrite}
	case RoleViewer:
		return []string{ScopeSessionsRead}
	}
	return nil
}

// RoleRank orders roles: a lower rank is a stronger role; -1 for an
// unknown one.
func RoleRank(role string) int { return slices.Index(Roles, role) }

// User is a person who signed in through the server's OpenID Connect
// provider.
type User struct {
	// ID is the user's id, "usr_…".
	ID string `json:"id"`
	// Subject is the provider's id of the user (the ID token's sub).
	Subject string `json:"subject"`
	// Email and Name are as the provider last gave them.
	Email string `json:"email"`
	Name  string `json:"name"`
	// Groups are the provider groups of the user's latest sign-in.
	Groups []string `json:"groups"`
	// CreatedAt and LastLoginAt are Unix seconds.
	CreatedAt   int64 `json:"created_at"`
	LastLoginAt int64 `json:"last_login_at"`
	// DisabledAt is when the provider was found to refuse the user (Unix
	// seconds); null while the user may sign in.
	DisabledAt *int64 `json:"disabled_at"`
	// Roles are the role bindings that apply to the user, its groups'
	// included.
	Roles []RoleBinding `json:"roles"`
}

// UserList is the answer of GET /v1/users.
type UserList struct {
	Items []User `json:"items"`
}

// Subjects of a role binding.
const (
	SubjectUser  = "user"
	SubjectGroup = "group"
)

// RoleBinding gives a role to a user or a provider group, globally or on one
// outpost.
type RoleBinding struct {
	// ID is the binding's id, "rb_…"; empty for a binding of the server's
	// configuration (--oidc-group-roles), which the API cannot revoke.
	ID string `json:"id"`
	// Role is one of Roles.
	Role string `json:"role"`
	// SubjectKind is SubjectUser or SubjectGroup; Subject is the user's id
	// or the group's name as the provider spells it.
	SubjectKind string `json:"subject_kind"`
	Subject     string `json:"subject"`
	// OutpostID limits the role to one outpost; "" for every outpost.
	OutpostID string `json:"outpost_id,omitempty"`
	// Outpost is that outpost's name, when it exists.
	Outpost string `json:"outpost,omitempty"`
	// CreatedAt is Unix seconds.
	CreatedAt int64 `json:"created_at"`
}

// CreateRoleBindingRequest is the body of POST /v1/role-bindings. Exactly
// one of User (an id or an email) and Group is set.
type CreateRoleBindingRequest struct {
	Role  string `json:"role"`
	User  string `json:"user,omitempty"`
	Group string `json:"group,omitempty"`
	// Outpost, a name or id, limits the role to that outpost.
	Outpost string `json:"outpost,omitempty"`
}

// RoleBindingList is the answer of GET /v1/role-bindings.
type RoleBindingList struct {
	Items []RoleBinding `json:"items"`
}
