package server

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// gatewaySession GETs api.GatewaySessionPath with a connect token and, when
// sessionID is set, the session header, as a direct-serve worker does.
func (ts *testServer) gatewaySession(token, sessionID string) (int, api.GatewaySession) {
	ts.t.Helper()
	req, err := http.NewRequest("GET", ts.url+api.GatewaySessionPath, nil)
	if err != nil {
		ts.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if sessionID != "" {
		req.Header.Set(api.HeaderSessionID, sessionID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out api.GatewaySession
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &out); err != nil {
			ts.t.Fatalf("decode %s: %v", raw, err)
		}
	} else {
		var e api.ErrorResponse
		if err := json.Unmarshal(raw, &e); err != nil || e.Error.Message == "" {
			ts.t.Errorf("status %d without a JSON error: %s", resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, out
}

// TestGatewaySessionPin: a connect token reads the pin of its own session's
// queue entry (the session's, else its outpost's, else null) and nothing of
// another session's: naming another session is refused, and so is a token
// whose claim moved, or none.
func TestGatewaySessionPin(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	const outpostPin, sessionPin = "0e2e0000beef", "abcdef123456"
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "pinned", Platform: "linux", RemoteBinarySHA: outpostPin}, nil)
	ts.outpost("plain")
	create := func(outpost, pin string) string {
		var s api.Session
		ts.mustDo(201, "POST", "/v1/sessions", ts.admin, api.CreateSessionRequest{Outpost: outpost, RemoteBinarySHA: pin,
			Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}}, &s)
		return s.Metadata.SessionID
	}
	own, inherited, none := create("pinned", sessionPin), create("pinned", ""), create("plain", "")
	tokens := map[string]string{}
	for _, id := range []string{own, inherited, none} {
		tokens[id] = ts.claimFor(id, "claimer-1").Status.ConnectToken
	}
	for id, want := range map[string]string{own: sessionPin, inherited: outpostPin, none: ""} {
		code, got := ts.gatewaySession(tokens[id], id)
		if code != http.StatusOK || got.SessionID != id {
			t.Fatalf("session %s: %d %+v", id, code, got)
		}
		if pin := ""; got.RemoteBinarySHA != nil {
			pin = *got.RemoteBinarySHA
			if pin != want {
				t.Errorf("session %s pins %q, want %q", id, pin, want)
			}
		} else if want != "" {
			t.Errorf("session %s pins nothing, want %q", id, want)
		}
	}
	// Without the session header the token still names its own session.
	if code, got := ts.gatewaySession(tokens[own], ""); code != http.StatusOK || got.SessionID != own {
		t.Errorf("without the header: %d %+v", code, got)
	}

	// Another session's token reads nothing of this one.
	if code, got := ts.gatewaySession(tokens[none], own); code != http.StatusUnauthorized || got.RemoteBinarySHA != nil {
		t.Errorf("another session's token: %d %+v, want 401", code, got)
	}
	for what, token := range map[string]string{"no token": "", "an unknown token": "ct-unknown", "an API token": ts.admin} {
		if code, _ := ts.gatewaySession(token, own); code != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", what, code)
		}
	}
	// A claim taken again kills the token it had.
	ts.mustDo(200, "POST", "/v1/queue/"+own+"/release", ts.admin, api.ClaimRequest{AcceptorID: "claimer-1"}, nil)
	ts.claimFor(own, "claimer-2")
	if code, _ := ts.gatewaySession(tokens[own], own); code != http.StatusUnauthorized {
		t.Errorf("the token of a released claim: %d, want 401", code)
	}
}
