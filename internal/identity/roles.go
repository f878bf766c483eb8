package identity

import (
	"slices"

	"github.com/outpost-sh/outpost/api"
)

// Binding is a role bound to a user (SubjectKind api.SubjectUser, Subject
// its id) or a provider group (api.SubjectGroup, its name), on OutpostID or
// everywhere ("").
type Binding struct {
	Role        string
	SubjectKind string
	Subject     string
	OutpostID   string
}

// Grants is what a user may do: its strongest role everywhere and, where
// stronger, on single outposts.
type Grants struct {
	// Role is the strongest role held on every outpost; "" for none.
	Role string
	// Outposts maps an outpost id to the strongest role held there, for the
	// outposts where that is stronger than Role.
	Outposts map[string]string
}

// Resolve computes the grants of a user in groups from bindings.
// Bindings of unknown roles are ignored.
func Resolve(bindings []Binding, userID string, groups []string) Grants {
	g := Grants{Outposts: map[string]string{}}
	for _, b := range bindings {
		if api.RoleRank(b.Role) < 0 {
			continue
		}
		switch {
		case b.SubjectKind == api.SubjectUser && b.Subject == userID:
		case b.SubjectKind == api.SubjectGroup && slices.Contains(groups, b.Subject):
		default:
			continue
		}
		if b.OutpostID == "" {
			g.Role = stronger(g.Role, b.Role)
		} else {
			g.Outposts[b.OutpostID] = stronger(g.Outposts[b.OutpostID], b.Role)
		}
	}
	for id, r := range g.Outposts {
		if stronger(g.Role, r) == g.Role {
			delete(g.Outposts, id)
		}
	}
	return g
}

// stronger returns the stronger of two roles; "" is weaker than any.
func stronger(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	case api.RoleRank(b) < api.RoleRank(a):
		return b
	}
	return a
}
