package server

import (
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestSessionToken tries to reach beyond a token limited to one session:
// every route but that session's answers 403 (another session 404), it
// cannot mint tokens, widen its session's network policy, answer its
// network requests or approve its held calls, and it stops working when
// the session ends.
func TestSessionToken(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("home")
	ts.outpost("other")
	var mine, near api.Session
	ext := map[string]any{"outpost": "home", "agent": map[string]any{"kind": api.AgentExternal}}
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, ext, &mine)
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, ext, &near)
	far := ts.session("other")
	id := mine.Metadata.SessionID

	// Who may make one, and with what.
	writer := ts.token([]string{api.ScopeSessionsWrite}, "home")
	var tok api.CreateTokenResponse
	ts.mustDo(201, "POST", "/v1/tokens", writer, api.CreateTokenRequest{Session: id}, &tok)
	if tok.SessionID != id || tok.Outpost != "home" || strings.Join(tok.Scopes, ",") != api.ScopeSessionsWrite || tok.Secret == "" {
		t.Fatalf("session token = %+v", tok)
	}
	for name, c := range map[string]struct {
		token string
		req   api.CreateTokenRequest
		want  int
	}{
		"a reader":                  {ts.token([]string{api.ScopeSessionsRead}, "home"), api.CreateTokenRequest{Session: id}, 403},
		"a writer of another":       {ts.token([]string{api.ScopeSessionsWrite}, "other"), api.CreateTokenRequest{Session: id}, 404},
		"a writer without session":  {writer, api.CreateTokenRequest{Scopes: []string{api.ScopeSessionsRead}}, 403},
		"the admin scope":           {ts.admin, api.CreateTokenRequest{Session: id, Scopes: []string{api.ScopeAdmin}}, 400},
		"the machine scope":         {ts.admin, api.CreateTokenRequest{Session: id, Scopes: []string{api.ScopeMachine}}, 400},
		"a role":                    {ts.admin, api.CreateTokenRequest{Session: id, Role: api.RoleMember}, 400},
		"a missing session":         {ts.admin, api.CreateTokenRequest{Session: "ses_nosuch"}, 404},
		"another outpost named":     {ts.admin, api.CreateTokenRequest{Session: id, Outpost: "other"}, 400},
		"the session token itself":  {tok.Secret, api.CreateTokenRequest{Session: id}, 403},
		"the session token, widely": {tok.Secret, api.CreateTokenRequest{Scopes: []string{api.ScopeSessionsRead}}, 403},
	} {
		if got := ts.do("POST", "/v1/tokens", c.token, c.req, nil); got != c.want {
			t.Errorf("%s: POST /v1/tokens = %d, want %d", name, got, c.want)
		}
	}

	// What it reaches.
	nearID := near.Metadata.SessionID
	for _, c := range []struct {
		method, path string
		body         any
		want         int
	}{
		{"GET", "/v1/sessions/" + id, nil, 200},
		{"GET", "/v1/sessions/" + id + "/events", nil, 200},
		{"GET", "/v1/sessions/" + id + "/artifacts", nil, 200},
		{"GET", "/v1/whoami", nil, 200},
		{"GET", "/v1/sessions", nil, 403},
		{"GET", "/v1/sessions?outpost=home", nil, 403},
		{"POST", "/v1/sessions", ext, 403},
		{"GET", "/v1/sessions/" + nearID, nil, 404},
		{"GET", "/v1/sessions/" + nearID + "/events", nil, 404},
		{"POST", "/v1/sessions/" + nearID + "/messages", map[string]any{"text": "hi"}, 404},
		{"POST", "/v1/sessions/" + nearID + "/tools/exec", map[string]any{"command": "true"}, 404},
		{"POST", "/v1/sessions/" + nearID + "/mcp", nil, 404},
		{"GET", "/v1/sessions/" + far.Metadata.SessionID + "/events", nil, 404},
		{"POST", "/v1/sessions/" + id + "/rerun", nil, 403},
		{"POST", "/v1/sessions/" + id + "/fork", map[string]any{"count": 1}, 403},
		{"PATCH", "/v1/sessions/" + id, map[string]any{"network_policy": nil}, 403},
		{"POST", "/v1/sessions/" + id + "/network-requests/nrq_1/grant", nil, 403},
		{"POST", "/v1/sessions/" + id + "/network-requests/nrq_1/deny", nil, 403},
		{"POST", "/v1/sessions/" + id + "/calls/1/approve", nil, 403},
		{"POST", "/v1/sessions/" + id + "/calls/1/deny", nil, 403},
		{"GET", "/v1/sessions/" + id + "/approvals", nil, 200},
		{"GET", "/v1/sessions/" + id + "/network-requests", nil, 200},
		{"GET", "/v1/tokens", nil, 403},
		{"GET", "/v1/queue?outpost=home", nil, 403},
		{"GET", "/v1/queue/" + id, nil, 403},
		{"GET", "/v1/queue?outpost=home&watch=true", nil, 403},
		{"GET", "/v1/outposts", nil, 403},
		{"GET", "/v1/outposts/home", nil, 403},
		{"GET", "/v1/workers", nil, 403},
		{"GET", "/v1/outposts/home/secrets", nil, 403},
		{"GET", "/v1/audit-logs", nil, 403},
		{"GET", "/v1/webhooks", nil, 403},
		{"GET", "/v1/users", nil, 403},
	} {
		if got := ts.do(c.method, c.path, tok.Secret, c.body, nil); got != c.want {
			t.Errorf("%s %s with the session's token: %d, want %d", c.method, c.path, got, c.want)
		}
	}
	var me api.WhoAmI
	ts.mustDo(200, "GET", "/v1/whoami", tok.Secret, nil, &me)
	if me.SessionID != id || me.Outpost != "home" {
		t.Errorf("whoami = %+v, want session %s in home", me, id)
	}
	// Its session's MCP endpoint answers (initialize).
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	a := ts.answer("POST", "/v1/sessions/"+id+"/mcp", tok.Secret, "application/json, text/event-stream", init)
	if a.status != 200 || !strings.Contains(string(a.body), `"serverInfo"`) {
		t.Errorf("MCP initialize with the session's token: %d %s", a.status, a.body)
	}

	// It ends with its session.
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/terminate", ts.admin, api.TerminateRequest{Reason: "done"}, nil)
	if code, msg := ts.errorOf("GET", "/v1/sessions/"+id, tok.Secret); code != 401 || !strings.Contains(msg, id) || !strings.Contains(msg, "ended") {
		t.Errorf("after the session ended: %d %q, want 401 naming the session", code, msg)
	}
	if got := ts.do("POST", "/v1/tokens", ts.admin, api.CreateTokenRequest{Session: id}, nil); got != 409 {
		t.Errorf("a token for an ended session: %d, want 409", got)
	}
}
