package server

import (
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestWhoAmI: every valid token, whatever its scopes, learns who it is —
// name, scopes, outpost — and never a secret; others get 401.
func TestWhoAmI(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	home := ts.outpost("home")
	for _, scope := range api.Scopes {
		tok := ts.token([]string{scope}, "home")
		var me api.WhoAmI
		ts.mustDo(200, "GET", "/v1/whoami", tok, nil, &me)
		if len(me.Scopes) != 1 || me.Scopes[0] != scope || me.OutpostID != home.Metadata.OutpostID || me.Outpost != "home" ||
			me.Name != "t" || me.ID == "" || me.ExpiresAt != nil || me.RevokedAt != nil {
			t.Errorf("%s: %+v", scope, me)
		}
	}
	var me api.WhoAmI
	ts.mustDo(200, "GET", "/v1/whoami", ts.admin, nil, &me)
	if me.Name != "admin" || me.OutpostID != "" || me.Outpost != "" {
		t.Errorf("admin: %+v", me)
	}

	// A limited token whose outpost is gone still says which it was.
	gone := ts.outpost("gone")
	tok := ts.token([]string{api.ScopeMachine}, "gone")
	ts.mustDo(204, "DELETE", "/v1/outposts/gone", ts.admin, nil, nil)
	me = api.WhoAmI{}
	ts.mustDo(200, "GET", "/v1/whoami", tok, nil, &me)
	if me.OutpostID != gone.Metadata.OutpostID || me.Outpost != "" {
		t.Errorf("a deleted outpost: %+v", me)
	}

	var made api.CreateTokenResponse
	ts.mustDo(201, "POST", "/v1/tokens", ts.admin, api.CreateTokenRequest{Scopes: []string{api.ScopeSessionsRead}}, &made)
	revoked := made.Secret
	ts.mustDo(204, "DELETE", "/v1/tokens/"+made.ID, ts.admin, nil, nil)
	for _, bad := range []string{"", "opt_unknown", revoked} {
		if code := ts.do("GET", "/v1/whoami", bad, nil, nil); code != 401 {
			t.Errorf("token %q: %d, want 401", bad, code)
		}
	}
}
