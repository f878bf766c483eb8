package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// signedIn records a user as a sign-in would and returns the secret of its
// sign-in token.
func (ts *testServer) signedIn(subject, email string, groups ...string) (store.User, string) {
	ts.t.Helper()
	ctx := context.Background()
	now := time.Now()
	u, err := ts.srv.store.UpsertUser(ctx, store.User{ID: newID("usr_"), Subject: subject, Email: email, Name: email,
		Groups: groups, CreatedAt: now, LastLoginAt: now, CheckedAt: now})
	if err != nil {
		ts.t.Fatal(err)
	}
	secret := newSecret("opt_")
	if err := ts.srv.store.CreateToken(ctx, store.Token{ID: newID("tok_"), Name: "sign-in", Hash: hashSecret(secret),
		Scopes: []string{}, CreatedAt: now, UserID: u.ID}); err != nil {
		ts.t.Fatal(err)
	}
	return u, secret
}

func newSessionBody(outpost string) map[string]any {
	return map[string]any{"outpost": outpost, "agent": map[string]any{"kind": "script"}}
}

// TestUserRoles: a user's roles, from its groups and its own bindings,
// globally and per outpost, decide what its sign-in and its tokens may do;
// a token a user creates never exceeds the user, even later.
func TestUserRoles(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("home")
	ts.outpost("other")
	u, me := ts.signedIn("sub-1", "ann@example.com", "eng")

	ts.mustDo(403, "GET", "/v1/sessions", me, nil, nil)

	// A group's global viewer role: read, not write.
	ts.mustDo(201, "POST", "/v1/role-bindings", ts.admin, api.CreateRoleBindingRequest{Role: api.RoleViewer, Group: "eng"}, nil)
	ts.mustDo(200, "GET", "/v1/sessions", me, nil, nil)
	ts.mustDo(403, "POST", "/v1/sessions", me, newSessionBody("home"), nil)

	// member on home, for the user by email: sessions there, not elsewhere.
	var member api.RoleBinding
	ts.mustDo(201, "POST", "/v1/role-bindings", ts.admin, api.CreateRoleBindingRequest{Role: api.RoleMember, User: "ANN@example.com", Outpost: "home"}, &member)
	if member.Subject != u.ID || member.Outpost != "home" {
		t.Fatalf("binding = %+v", member)
	}
	ts.mustDo(201, "POST", "/v1/sessions", me, newSessionBody("home"), nil)
	ts.mustDo(404, "POST", "/v1/sessions", me, newSessionBody("other"), nil)
	ts.mustDo(403, "POST", "/v1/tokens", me, api.CreateTokenRequest{Role: api.RoleViewer}, nil)

	// admin on home: tokens, but never more than the user holds.
	var adminHome api.RoleBinding
	ts.mustDo(201, "POST", "/v1/role-bindings", ts.admin, api.CreateRoleBindingRequest{Role: api.RoleAdmin, User: u.ID, Outpost: "home"}, &adminHome)
	raw, _ := json.Marshal(api.CreateTokenRequest{Role: api.RoleMember})
	req, _ := http.NewRequest("POST", ts.url+"/v1/tokens", bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+me)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e api.ErrorResponse
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(e.Error.Message, "sessions.write") {
		t.Errorf("exceeding token: %d %q, want 403 naming sessions.write", resp.StatusCode, e.Error.Message)
	}
	// An admin of one outpost cannot make itself an admin of all, nor
	// see or revoke the tokens of the rest.
	ts.mustDo(403, "POST", "/v1/role-bindings", me, api.CreateRoleBindingRequest{Role: api.RoleAdmin, User: u.ID}, nil)
	ts.mustDo(403, "GET", "/v1/role-bindings", me, nil, nil)
	ts.mustDo(403, "GET", "/v1/users", me, nil, nil)
	var global api.CreateTokenResponse
	ts.mustDo(201, "POST", "/v1/tokens", ts.admin, api.CreateTokenRequest{Name: "global", Role: api.RoleViewer}, &global)
	ts.mustDo(404, "DELETE", "/v1/tokens/"+global.ID, me, nil, nil)
	var tok api.CreateTokenResponse
	ts.mustDo(201, "POST", "/v1/tokens", me, api.CreateTokenRequest{Name: "ci", Role: api.RoleMember, Outpost: "home"}, &tok)
	var seen api.TokenList
	ts.mustDo(200, "GET", "/v1/tokens", me, nil, &seen)
	if len(seen.Items) != 1 || seen.Items[0].ID != tok.ID {
		t.Errorf("tokens an admin of home sees = %+v, want only %s", seen.Items, tok.ID)
	}
	if tok.UserID != u.ID || tok.Role != api.RoleMember {
		t.Errorf("user's token = %+v, want user %s, role member", tok.Token, u.ID)
	}
	ts.mustDo(201, "POST", "/v1/sessions", tok.Secret, newSessionBody("home"), nil)
	ts.mustDo(400, "POST", "/v1/role-bindings", ts.admin, api.CreateRoleBindingRequest{Role: "owner", Group: "eng"}, nil)
	ts.mustDo(409, "POST", "/v1/role-bindings", ts.admin, api.CreateRoleBindingRequest{Role: api.RoleViewer, Group: "eng"}, nil)

	var users api.UserList
	ts.mustDo(200, "GET", "/v1/users", ts.admin, nil, &users)
	if len(users.Items) != 1 || len(users.Items[0].Roles) != 3 {
		t.Errorf("users = %+v, want ann with 3 roles", users.Items)
	}

	// Revoking the user's roles takes them from its tokens too.
	ts.mustDo(204, "DELETE", "/v1/role-bindings/"+adminHome.ID, ts.admin, nil, nil)
	ts.mustDo(204, "DELETE", "/v1/role-bindings/"+member.ID, ts.admin, nil, nil)
	ts.mustDo(404, "DELETE", "/v1/role-bindings/"+member.ID, ts.admin, nil, nil)
	ts.mustDo(403, "POST", "/v1/sessions", tok.Secret, newSessionBody("home"), nil)
	ts.mustDo(403, "POST", "/v1/sessions", me, newSessionBody("home"), nil)

	// Sign-out ends a sign-in's token, and refuses any other.
	ts.mustDo(400, "DELETE", "/v1/auth/session", ts.admin, nil, nil)
	ts.mustDo(204, "DELETE", "/v1/auth/session", me, nil, nil)
	ts.mustDo(401, "GET", "/v1/sessions", me, nil, nil)

	// A disabled user's tokens stop working.
	now := time.Now()
	if err := ts.srv.store.SetUserChecked(context.Background(), u.ID, now, "", &now); err != nil {
		t.Fatal(err)
	}
	ts.mustDo(401, "GET", "/v1/whoami", tok.Secret, nil, nil)
}

// TestTokenRoleRequest: role and scopes exclude each other, and a role must
// be known.
func TestTokenRoleRequest(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(400, "POST", "/v1/tokens", ts.admin, api.CreateTokenRequest{Role: "owner"}, nil)
	ts.mustDo(400, "POST", "/v1/tokens", ts.admin, api.CreateTokenRequest{Role: api.RoleViewer, Scopes: []string{api.ScopeSessionsRead}}, nil)
	var tok api.CreateTokenResponse
	ts.mustDo(201, "POST", "/v1/tokens", ts.admin, api.CreateTokenRequest{Role: api.RoleOperator}, &tok)
	if tok.Role != api.RoleOperator || tok.UserID != "" || strings.Join(tok.Scopes, " ") != "network.admin outposts.orchestrator sessions.read" {
		t.Errorf("operator token = %+v", tok.Token)
	}
}
