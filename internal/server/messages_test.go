package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// errorOf sends a request and returns the status and the error message.
func (ts *testServer) errorOf(method, path, token string) (int, string) {
	ts.t.Helper()
	return ts.errorWith(method, path, token, nil)
}

// errorWith is errorOf for a request with a JSON body (nil for none).
func (ts *testServer) errorWith(method, path, token string, body any) (int, string) {
	ts.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			ts.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, ts.url+path, rd)
	if err != nil {
		ts.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.ErrorResponse
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e.Error.Message
}

// TestLimitedTokenMessages: a token limited to one outpost gets the same
// answer for another outpost's outpost, session or queue entry as for one
// that does not exist: the answer an unlimited token gets for a missing one.
func TestLimitedTokenMessages(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("alpha")
	ts.outpost("beta")
	other := ts.session("beta").Metadata.SessionID
	limited := ts.token([]string{api.ScopeSessionsRead, api.ScopeMachine}, "alpha")
	reader := ts.token([]string{api.ScopeSessionsRead, api.ScopeMachine}, "")

	for _, tc := range []struct {
		path, token string
		status      int
		msg         string
	}{
		{"/v1/outposts/beta", limited, 404, `Outpost "beta" does not exist.`},
		{"/v1/outposts/gamma", limited, 404, `Outpost "gamma" does not exist.`},
		{"/v1/outposts/gamma", reader, 404, `Outpost "gamma" does not exist.`},
		{"/v1/sessions/" + other, limited, 404, `Session ` + other + ` does not exist.`},
		{"/v1/sessions/ses_nope", limited, 404, `Session ses_nope does not exist.`},
		{"/v1/sessions/ses_nope", reader, 404, `Session ses_nope does not exist.`},
		{"/v1/queue/" + other, limited, 404, `Session ` + other + ` is not in any queue.`},
		{"/v1/queue/ses_nope", reader, 404, `Session ses_nope is not in any queue.`},
	} {
		if status, msg := ts.errorOf("GET", tc.path, tc.token); status != tc.status || msg != tc.msg {
			t.Errorf("GET %s: %d %q, want %d %q", tc.path, status, msg, tc.status, tc.msg)
		}
	}
}

// TestMessagesWithoutQueryWords: refusals that a person reads in the CLI
// or the web UI do not spell query parameters or Go slices.
func TestMessagesWithoutQueryWords(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("busy")
	for range 2 {
		id := ts.session("busy").Metadata.SessionID
		ts.claimFor(id, "holder-"+id)
	}
	status, msg := ts.errorOf("DELETE", "/v1/outposts/busy", ts.admin)
	if want := `Outpost "busy" has 2 claimed sessions; end them first, or delete with force, which ends them.`; status != 409 || msg != want {
		t.Errorf("delete: %d %q, want 409 %q", status, msg, want)
	}

	var e api.ErrorResponse
	body := `{"name":"x","scopes":["sessions.rite"]}`
	req, _ := http.NewRequest("POST", ts.url+"/v1/tokens", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+ts.admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if want := `Scope "sessions.rite" is unknown; scopes are ` + strings.Join(api.Scopes, ", ") + "."; e.Error.Message != want {
		t.Errorf("unknown scope: %q, want %q", e.Error.Message, want)
	}

	// Tokens name their outpost.
	ts.token([]string{api.ScopeMachine}, "busy")
	var l api.TokenList
	ts.mustDo(200, "GET", "/v1/tokens", ts.admin, nil, &l)
	named := false
	for _, tok := range l.Items {
		named = named || tok.OutpostID != "" && tok.Outpost == "busy"
	}
	if !named {
		t.Errorf("no token names outpost busy: %+v", l.Items)
	}
}
