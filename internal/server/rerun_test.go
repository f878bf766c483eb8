package server

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestRerunSession: a rerun is a new session on the same outpost with the
// old one's spec and secrets — the caller sees neither the secrets nor has
// to send them — and its own network policy; a session the caller cannot
// see, or whose outpost is gone (with an error naming that outpost), is
// refused and creates nothing.
func TestRerunSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts := startServer(t, Options{})
	ts.outpost("nightly")
	own := &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "proxy.golang.org"}}}
	req := api.CreateSessionRequest{Outpost: "nightly", Title: "nightly build", Prompt: "build with $API_TOKEN",
		Repos:   []api.Repo{{URL: "https://git.example/app.git", Name: "app", Ref: "main"}},
		Env:     map[string]string{"GOFLAGS": "-mod=mod"},
		Secrets: map[string]string{"API_TOKEN": "tok-0123456789abcdef"},
		Limits:  api.Limits{MaxDurationS: 600, MaxAttempts: 2}, Priority: 5, RemoteBinarySHA: "abcdef1",
		NetworkPolicy: own,
		Agent:         api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"make"}`)}}}}
	var first, again api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, req, &first)
	ts.mustDo(201, "POST", "/v1/sessions/"+first.Metadata.SessionID+"/rerun", ts.admin, nil, &again)
	if again.Metadata.SessionID == first.Metadata.SessionID || again.Status.Status != api.StatusNew {
		t.Fatalf("the rerun is %s, %s", again.Metadata.SessionID, again.Status.Status)
	}
	a, _ := json.Marshal(first.Spec)
	b, _ := json.Marshal(again.Spec)
	if string(a) != string(b) {
		t.Errorf("the rerun's spec differs:\n first %s\n again %s", a, b)
	}
	if !again.Spec.NetworkPolicyOwn {
		t.Error("the rerun lost its own network policy")
	}
	old, err := ts.srv.store.GetSession(ctx, first.Metadata.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := ts.srv.store.GetSession(ctx, again.Metadata.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(stored.Secrets, req.Secrets) || stored.OutpostID != old.OutpostID {
		t.Errorf("the rerun's secrets %v on %s, want the first's on %s", maps.Keys(stored.Secrets), stored.OutpostID, old.OutpostID)
	}
	raw := ts.rawGet("/v1/sessions/" + again.Metadata.SessionID)
	if strings.Contains(raw, "tok-0123456789abcdef") {
		t.Errorf("the rerun's answer shows the secret: %s", raw)
	}

	// Not the caller's session: as a missing one, and nothing is created.
	ts.outpost("other")
	elsewhere := ts.token([]string{api.ScopeSessionsWrite}, "other")
	if code := ts.do("POST", "/v1/sessions/"+first.Metadata.SessionID+"/rerun", elsewhere, nil, nil); code != 404 {
		t.Errorf("a rerun through another outpost's token: %d, want 404", code)
	}
	if code := ts.do("POST", "/v1/sessions/ses_nope/rerun", ts.admin, nil, nil); code != 404 {
		t.Errorf("a rerun of an unknown session: %d, want 404", code)
	}
	// Its outpost deleted: refused with an error that names the outpost
	// that is gone, not as a missing session.
	gone := ts.outpost("gone")
	var onGone api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, api.CreateSessionRequest{Outpost: "gone",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}}, &onGone)
	ts.mustDo(204, "DELETE", "/v1/outposts/"+gone.Metadata.OutpostID+"?force=true", ts.admin, nil, nil)
	code, msg := ts.errorOf("POST", "/v1/sessions/"+onGone.Metadata.SessionID+"/rerun", ts.admin)
	if code != 409 {
		t.Errorf("a rerun of a session whose outpost was deleted: %d, want 409", code)
	}
	if !strings.Contains(msg, `Outpost "gone"`) || !strings.Contains(msg, "was deleted") || !strings.Contains(msg, "--outpost") {
		t.Errorf("a rerun of a session whose outpost was deleted says %q, want the outpost named as deleted and what to do", msg)
	}
	var list api.SessionList
	ts.mustDo(200, "GET", "/v1/sessions?outpost=nightly", ts.admin, nil, &list)
	if list.Total != 2 {
		t.Errorf("outpost nightly holds %d sessions, want the first and its rerun", list.Total)
	}
}
