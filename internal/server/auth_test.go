package server

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestAuthMatrix calls every endpoint with no token, a token of the wrong
// scope, a token limited to another outpost (which sees a missing
// resource), and the right token.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("home")
	ts.outpost("other")
	sess := ts.session("home")
	id := sess.Metadata.SessionID

	scoped := func(scope string) string { return ts.token([]string{scope}, "home") }
	elsewhere := func(scope string) string { return ts.token([]string{scope}, "other") }

	type endpoint struct {
		method, path string
		body         any
		scope        string // the scope that is right
		wrongScope   string // "" when no scope is wrong
		want         int
		// elsewhere is what a token limited to another outpost gets: 404
		// where the answer is about one resource, which for it does not
		// exist; 0 when the endpoint does not care.
		elsewhere int
	}
	n := 0
	uniq := func() string { n++; return fmt.Sprintf("o%d", n) }
	eps := []endpoint{
		{method: "GET", path: "/v1/outposts/home", scope: api.ScopeMachine, wrongScope: "", want: 200, elsewhere: 404},
		{method: "POST", path: "/v1/outposts", scope: api.ScopeOrchestrator, wrongScope: api.ScopeMachine, want: 201, elsewhere: 403},
		{method: "DELETE", path: "/v1/outposts/{new}", scope: api.ScopeOrchestrator, wrongScope: api.ScopeMachine, want: 204, elsewhere: 404},
		{method: "GET", path: "/v1/queue?outpost=home", scope: api.ScopeMachine, wrongScope: api.ScopeSessionsWrite, want: 200, elsewhere: 404},
		{method: "GET", path: "/v1/queue/" + id, scope: api.ScopeMachine, wrongScope: api.ScopeSessionsWrite, want: 200, elsewhere: 404},
		{method: "POST", path: "/v1/queue/{claimable}/claim", body: api.ClaimRequest{AcceptorID: "x"}, scope: api.ScopeMachine, wrongScope: api.ScopeSessionsWrite, want: 200, elsewhere: 404},
		{method: "POST", path: "/v1/queue/{claimed}/release", body: api.ClaimRequest{AcceptorID: "x"}, scope: api.ScopeMachine, wrongScope: api.ScopeSessionsWrite, want: 200, elsewhere: 404},
		{method: "POST", path: "/v1/sessions", body: map[string]any{"outpost": "home", "agent": map[string]any{"kind": "script"}}, scope: api.ScopeSessionsWrite, wrongScope: api.ScopeSessionsRead, want: 201, elsewhere: 404},
		{method: "GET", path: "/v1/sessions", scope: api.ScopeSessionsRead, wrongScope: api.ScopeMachine, want: 200},
		{method: "GET", path: "/v1/workers?outpost=home", scope: api.ScopeMachine, wrongScope: "", want: 200, elsewhere: 404},
		{method: "GET", path: "/v1/stats?outpost=home&window=24h", scope: api.ScopeSessionsRead, wrongScope: api.ScopeNetworkAdmin, want: 200, elsewhere: 404},
		{method: "GET", path: "/v1/outposts/home/workers/nobody", scope: api.ScopeMachine, wrongScope: "", want: 404, elsewhere: 404},
		{method: "GET", path: "/v1/sessions/" + id, scope: api.ScopeSessionsRead, wrongScope: api.ScopeMachine, want: 200, elsewhere: 404},
		{method: "GET", path: "/v1/sessions/" + id + "/events", scope: api.ScopeSessionsRead, wrongScope: api.ScopeMachine, want: 200, elsewhere: 404},
		{method: "GET", path: "/v1/sessions/" + id + "/network-requests", scope: api.ScopeSessionsRead, wrongScope: api.ScopeMachine, want: 200, elsewhere: 404},
		{method: "POST", path: "/v1/sessions/" + id + "/rerun", scope: api.ScopeSessionsWrite, wrongScope: api.ScopeSessionsRead, want: 201, elsewhere: 404},
		// A new session is neither running nor suspended: the fork is
		// authorized, then refused.
		{method: "POST", path: "/v1/sessions/" + id + "/fork", body: api.ForkRequest{Count: 1}, scope: api.ScopeSessionsWrite, wrongScope: api.ScopeSessionsRead, want: 409, elsewhere: 404},
		{method: "GET", path: "/v1/sessions/" + id + "/suspend", scope: api.ScopeSessionsRead, wrongScope: api.ScopeMachine, want: 200, elsewhere: 404},
		{method: "POST", path: "/v1/sessions/{new-session}/terminate", scope: api.ScopeSessionsWrite, wrongScope: api.ScopeSessionsRead, want: 200, elsewhere: 404},
		{method: "POST", path: "/v1/tokens", body: api.CreateTokenRequest{Scopes: []string{api.ScopeSessionsRead}}, scope: api.ScopeAdmin, wrongScope: api.ScopeOrchestrator, want: 201},
		{method: "GET", path: "/v1/tokens", scope: api.ScopeAdmin, wrongScope: api.ScopeOrchestrator, want: 200},
		{method: "DELETE", path: "/v1/tokens/{token}", scope: api.ScopeAdmin, wrongScope: api.ScopeOrchestrator, want: 204},
		{method: "GET", path: "/v1/audit-logs", scope: api.ScopeAdmin, wrongScope: api.ScopeOrchestrator, want: 200, elsewhere: 403},
		{method: "GET", path: "/v1/audit-logs/verify", scope: api.ScopeAdmin, wrongScope: api.ScopeOrchestrator, want: 200, elsewhere: 403},
		{method: "GET", path: api.DeviceGrantPath + "?user_code={user_code}", scope: api.ScopeOrchestrator, wrongScope: api.ScopeSessionsWrite, want: 200},
		{method: "POST", path: api.DeviceApprovePath + "#{user_code}", scope: api.ScopeOrchestrator, wrongScope: api.ScopeSessionsWrite, want: 200},
		{method: "POST", path: api.DeviceDenyPath + "#{user_code}", scope: api.ScopeOrchestrator, wrongScope: api.ScopeSessionsWrite, want: 200},
		// The bare and devins prefixes reach the same handlers.
		{method: "GET", path: "/opbeta/outposts/devins?outpost=home", scope: api.ScopeMachine, wrongScope: api.ScopeSessionsWrite, want: 200, elsewhere: 404},
		{method: "GET", path: "/opbeta/outposts/outposts/home", scope: api.ScopeMachine, wrongScope: "", want: 200, elsewhere: 404},
		{method: "GET", path: "/opbeta/outposts/home", scope: api.ScopeMachine, wrongScope: "", want: 200, elsewhere: 404},
		// Stored secrets of an outpost: orchestrator (or admin) only.
		{method: "GET", path: "/v1/outposts/home/secrets", scope: api.ScopeOrchestrator, wrongScope: api.ScopeSessionsWrite, want: 200, elsewhere: 404},
		{method: "GET", path: "/v1/outposts/home/secrets/SEEDED", scope: api.ScopeOrchestrator, wrongScope: api.ScopeMachine, want: 200, elsewhere: 404},
		{method: "PUT", path: "/v1/outposts/home/secrets/{fresh-secret}", body: api.PutOutpostSecretRequest{Value: "v"}, scope: api.ScopeOrchestrator, wrongScope: api.ScopeMachine, want: 201, elsewhere: 404},
		{method: "DELETE", path: "/v1/outposts/home/secrets/{secret}", scope: api.ScopeOrchestrator, wrongScope: api.ScopeSessionsWrite, want: 204, elsewhere: 404},
		// Users and roles are the whole server's: admin everywhere only,
		// so an admin of one outpost answers 403 (elsewhere).
		{method: "GET", path: "/v1/users", scope: api.ScopeAdmin, wrongScope: api.ScopeOrchestrator, want: 200, elsewhere: 403},
		{method: "GET", path: "/v1/role-bindings", scope: api.ScopeAdmin, wrongScope: api.ScopeOrchestrator, want: 200, elsewhere: 403},
		{method: "POST", path: "/v1/role-bindings", scope: api.ScopeAdmin, wrongScope: api.ScopeOrchestrator, want: 201, elsewhere: 403},
		{method: "DELETE", path: "/v1/role-bindings/{binding}", scope: api.ScopeAdmin, wrongScope: api.ScopeOrchestrator, want: 204, elsewhere: 403},
	}
	ts.mustDo(201, "PUT", "/v1/outposts/home/secrets/SEEDED", ts.admin, api.PutOutpostSecretRequest{Value: "seeded"}, nil)
	machine := ts.token([]string{api.ScopeMachine}, "")
	var sessTok api.CreateTokenResponse
	ts.mustDo(201, "POST", "/v1/tokens", scoped(api.ScopeSessionsWrite), api.CreateTokenRequest{Session: id}, &sessTok)
	sessionToken := sessTok.Secret
	roleTokens := map[string]string{}
	for _, role := range api.Roles {
		var tok api.CreateTokenResponse
		ts.mustDo(201, "POST", "/v1/tokens", ts.admin, api.CreateTokenRequest{Name: role, Role: role}, &tok)
		roleTokens[role] = tok.Secret
	}
	// Signed-in users whose role is on one outpost only: on home (where
	// the rows' resources are) and on other.
	onHome, onOther := map[string]string{}, map[string]string{}
	for _, role := range api.Roles {
		for outpost, secrets := range map[string]map[string]string{"home": onHome, "other": onOther} {
			u, secret := ts.signedIn("sub-"+role+"-"+outpost, role+"@"+outpost+".example.com")
			ts.mustDo(201, "POST", "/v1/role-bindings", ts.admin, api.CreateRoleBindingRequest{Role: role, User: u.ID, Outpost: outpost}, nil)
			secrets[role] = secret
		}
	}
	var lastUserCode string // the code resolve made for the next body
	resolve := func(path string) string {
		switch {
		case strings.Contains(path, "{new}"):
			name := uniq()
			ts.outpost(name)
			return strings.Replace(path, "{new}", name, 1)
		case strings.Contains(path, "{claimable}"):
			return strings.Replace(path, "{claimable}", ts.session("home").Metadata.SessionID, 1)
		case strings.Contains(path, "{claimed}"):
			s := ts.session("home").Metadata.SessionID
			ts.mustDo(200, "POST", "/v1/queue/"+s+"/claim", machine, api.ClaimRequest{AcceptorID: "x"}, nil)
			return strings.Replace(path, "{claimed}", s, 1)
		case strings.Contains(path, "{new-session}"):
			return strings.Replace(path, "{new-session}", ts.session("home").Metadata.SessionID, 1)
		case strings.Contains(path, "{fresh-secret}"):
			return strings.Replace(path, "{fresh-secret}", strings.ToUpper(uniq()), 1)
		case strings.Contains(path, "{secret}"):
			name := strings.ToUpper(uniq())
			ts.mustDo(201, "PUT", "/v1/outposts/home/secrets/"+name, ts.admin, api.PutOutpostSecretRequest{Value: "v"}, nil)
			return strings.Replace(path, "{secret}", name, 1)
		case strings.Contains(path, "{user_code}"):
			// A grant pending for each call; approve and deny carry the
			// code in the body (after "#", which is cut off here).
			dc := ts.deviceCode(url.Values{"client_id": {"matrix"}})
			if p, ok := strings.CutSuffix(path, "#{user_code}"); ok {
				lastUserCode = dc.UserCode
				return p
			}
			return strings.Replace(path, "{user_code}", dc.UserCode, 1)
		case strings.Contains(path, "{token}"):
			var tok api.CreateTokenResponse
			ts.mustDo(201, "POST", "/v1/tokens", ts.admin, api.CreateTokenRequest{Scopes: []string{api.ScopeSessionsRead}}, &tok)
			return strings.Replace(path, "{token}", tok.ID, 1)
		case strings.Contains(path, "{binding}"):
			var b api.RoleBinding
			ts.mustDo(201, "POST", "/v1/role-bindings", ts.admin, api.CreateRoleBindingRequest{Role: api.RoleViewer, Group: uniq()}, &b)
			return strings.Replace(path, "{binding}", b.ID, 1)
		}
		return path
	}
	body := func(ep endpoint) any {
		if ep.method == "POST" && ep.path == "/v1/outposts" {
			return api.CreateOutpostRequest{Name: uniq(), Platform: "linux"}
		}
		if ep.method == "POST" && ep.path == "/v1/role-bindings" {
			return api.CreateRoleBindingRequest{Role: api.RoleMember, Group: uniq()}
		}
		if strings.HasSuffix(ep.path, "#{user_code}") {
			return api.DeviceDecisionRequest{UserCode: lastUserCode}
		}
		return ep.body
	}
	for _, ep := range eps {
		name := ep.method + " " + ep.path
		if got := ts.do(ep.method, resolve(ep.path), "", body(ep), nil); got != 401 {
			t.Errorf("%s without a token: %d, want 401", name, got)
		}
		if got := ts.do(ep.method, resolve(ep.path), "opt_not-a-real-token", body(ep), nil); got != 401 {
			t.Errorf("%s with a bad token: %d, want 401", name, got)
		}
		// Reading outposts is open to every scope but admin-only ones, so
		// those rows have no wrong scope.
		if ep.wrongScope != "" {
			wrong := ts.token([]string{ep.wrongScope}, "")
			if got := ts.do(ep.method, resolve(ep.path), wrong, body(ep), nil); got != 403 {
				t.Errorf("%s with scope %s: %d, want 403", name, ep.wrongScope, got)
			}
		}
		if ep.elsewhere != 0 {
			if got := ts.do(ep.method, resolve(ep.path), elsewhere(ep.scope), body(ep), nil); got != ep.elsewhere {
				t.Errorf("%s with a token for another outpost: %d, want %d", name, got, ep.elsewhere)
			}
		}
		right := scoped(ep.scope)
		if ep.scope == api.ScopeAdmin || strings.HasPrefix(ep.path, "/v1/outposts") && ep.method != "GET" {
			right = ts.token([]string{ep.scope}, "")
		}
		if got := ts.do(ep.method, resolve(ep.path), right, body(ep), nil); got != ep.want {
			t.Errorf("%s with scope %s: %d, want %d", name, ep.scope, got, ep.want)
		}
		// A token limited to the home session (sessions.write): that
		// session's routes answer as for the right token, another session
		// does not exist, and everything else is forbidden.
		{
			path := resolve(ep.path)
			want := 403
			if rest, ok := strings.CutPrefix(path, "/v1/sessions/"); ok && ep.scope != api.ScopeMachine && !strings.HasSuffix(path, "/rerun") && !strings.HasSuffix(path, "/fork") && ep.method != "PATCH" {
				if strings.HasPrefix(rest, id) {
					want = ep.want
				} else if rest != "" {
					want = 404
				}
			}
			if got := ts.do(ep.method, path, sessionToken, body(ep), nil); got != want {
				t.Errorf("%s with a token limited to session %s: %d, want %d", name, id, got, want)
			}
		}
		// A column per role: a role is its scopes, so each route answers
		// a role's token as it answers a token of those scopes.
		for _, role := range api.Roles {
			want := ep.want
			// Rows without a wrong scope are open to every scope.
			if ep.wrongScope != "" && !slices.ContainsFunc(api.RoleScopes(role), func(sc string) bool { return api.HasScope([]string{sc}, ep.scope) }) {
				want = 403
			}
			if got := ts.do(ep.method, resolve(ep.path), roleTokens[role], body(ep), nil); got != want {
				t.Errorf("%s with role %s: %d, want %d", name, role, got, want)
			}
			// A user with the role on the other outpost only: as a
			// token limited there, once the role has the scope.
			if ep.elsewhere != 0 {
				if want == ep.want {
					want = ep.elsewhere
				}
				if got := ts.do(ep.method, resolve(ep.path), onOther[role], body(ep), nil); got != want {
					t.Errorf("%s by a user with role %s on another outpost: %d, want %d", name, role, got, want)
				}
			}
			// A user with the role on home only: as the role's token on
			// what is in home; what is the whole server's is refused.
			if ep.elsewhere == 404 && !strings.Contains(ep.path, "{new}") {
				want := ep.want
				if ep.wrongScope != "" && !api.HasScope(api.RoleScopes(role), ep.scope) {
					want = 403
				}
				if got := ts.do(ep.method, resolve(ep.path), onHome[role], body(ep), nil); got != want {
					t.Errorf("%s by a user with role %s on its outpost: %d, want %d", name, role, got, want)
				}
			}
		}
	}
}

func TestScopeImplications(t *testing.T) {
	t.Parallel()
	p := principal{scopes: []string{api.ScopeOrchestrator}}
	if !p.has(api.ScopeMachine) || p.has(api.ScopeSessionsRead) {
		t.Fatal("orchestrator must imply machine and nothing else")
	}
	p = principal{scopes: []string{api.ScopeSessionsWrite}}
	if !p.has(api.ScopeSessionsRead) || p.has(api.ScopeMachine) {
		t.Fatal("sessions.write must imply sessions.read and nothing else")
	}
	p = principal{scopes: []string{api.ScopeAdmin}}
	for _, s := range api.Scopes {
		if !p.has(s) {
			t.Fatalf("admin must imply %s", s)
		}
	}
}

func TestExpiredAndRevokedTokens(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	var tok api.CreateTokenResponse
	ts.mustDo(201, "POST", "/v1/tokens", ts.admin, api.CreateTokenRequest{Scopes: []string{api.ScopeSessionsRead}}, &tok)
	ts.mustDo(200, "GET", "/v1/sessions", tok.Secret, nil, nil)
	ts.mustDo(204, "DELETE", "/v1/tokens/"+tok.ID, ts.admin, nil, nil)
	ts.mustDo(401, "GET", "/v1/sessions", tok.Secret, nil, nil)
	ts.mustDo(404, "DELETE", "/v1/tokens/tok_nosuch", ts.admin, nil, nil)
}
