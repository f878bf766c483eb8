package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// raw sends a request with an optional body and content type and returns
// the answer with its whole body.
func (ts *testServer) raw(method, path, token, contentType, body string) (*http.Response, []byte) {
	ts.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.url+path, rd)
	if err != nil {
		ts.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp, b
}

// TestEveryErrorCarriesDetail checks that each error status, whichever
// part of the server writes it (handlers, the decoder, the router's 404
// and 405, the MCP transport), answers JSON with the message both in
// error.message and in the public fleet API's top-level detail.
func TestEveryErrorCarriesDetail(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("home")
	sess := ts.session("home")
	id := sess.Metadata.SessionID
	machine := ts.token([]string{api.ScopeMachine}, "")
	orch := ts.token([]string{api.ScopeOrchestrator}, "")
	writer := ts.token([]string{api.ScopeSessionsWrite}, "")
	ts.mustDo(200, "POST", "/opbeta/outposts/devins/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: "a"}, nil)

	cases := []struct {
		name                    string
		method, path, token, ct string
		body                    string
		status                  int
		code                    string
		allow                   string // the Allow header a 405 must carry
	}{
		{name: "bad query", method: "GET", path: "/opbeta/outposts/devins?first=0", token: machine, status: 400, code: api.CodeBadRequest},
		{name: "bad JSON", method: "POST", path: "/opbeta/outposts", token: orch, ct: "application/json", body: "{", status: 400, code: api.CodeBadRequest},
		{name: "unknown field", method: "POST", path: "/opbeta/outposts", token: orch, ct: "application/json", body: `{"name":"x","owner":"me"}`, status: 400, code: api.CodeBadRequest},
		{name: "no token", method: "GET", path: "/opbeta/outposts", status: 401, code: api.CodeUnauthorized},
		{name: "bad token", method: "GET", path: "/opbeta/outposts/devins", token: "cog_not-a-token", status: 401, code: api.CodeUnauthorized},
		{name: "wrong scope", method: "POST", path: "/opbeta/outposts", token: machine, ct: "application/json", body: `{"name":"x"}`, status: 403, code: api.CodeForbidden},
		{name: "missing entry", method: "GET", path: "/opbeta/outposts/devins/devin-nosuch", token: machine, status: 404, code: api.CodeNotFound},
		{name: "missing outpost", method: "DELETE", path: "/opbeta/outposts/outpost_nosuch", token: orch, status: 404, code: api.CodeNotFound},
		{name: "no endpoint", method: "GET", path: "/opbeta/nosuch", token: machine, status: 404, code: api.CodeNotFound},
		{name: "method on the fleet prefix", method: "PUT", path: "/opbeta/outposts", token: orch, status: 405, code: api.CodeMethodNotAllowed, allow: "GET, HEAD, POST"},
		{name: "method on a claim", method: "GET", path: "/opbeta/outposts/devins/" + id + "/claim", token: machine, status: 405, code: api.CodeMethodNotAllowed, allow: "POST"},
		{name: "method on MCP", method: "GET", path: "/v1/sessions/" + id + "/mcp", token: writer, status: 405, code: api.CodeMethodNotAllowed, allow: "POST"},
		{name: "claimed by another", method: "POST", path: "/opbeta/outposts/devins/" + id + "/claim", token: machine, ct: "application/json", body: `{"acceptor_id":"b"}`, status: 409, code: api.CodeConflict},
		{name: "release by another", method: "POST", path: "/opbeta/outposts/devins/" + id + "/release", token: machine, ct: "application/json", body: `{"acceptor_id":"b"}`, status: 409, code: api.CodeConflict},
		{name: "duplicate outpost", method: "POST", path: "/opbeta/outposts", token: orch, ct: "application/json", body: `{"name":"home"}`, status: 409, code: api.CodeConflict},
		{name: "body too large", method: "POST", path: "/opbeta/outposts", token: orch, ct: "application/json", body: `{"name":"` + strings.Repeat("x", maxBodyBytes) + `"}`, status: 413, code: api.CodeTooLarge},
		{name: "not JSON", method: "POST", path: "/opbeta/outposts", token: orch, ct: "text/plain", body: "name=x", status: 415, code: api.CodeBadRequest},
		{name: "bad org ids", method: "POST", path: "/opbeta/outposts", token: orch, ct: "application/json", body: `{"name":"x","allowed_org_ids":[""]}`, status: 422, code: api.CodeUnprocessable},
	}
	for _, tc := range cases {
		resp, body := ts.raw(tc.method, tc.path, tc.token, tc.ct, tc.body)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, resp.StatusCode, tc.status, body)
			continue
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: content type %q", tc.name, ct)
		}
		var env struct {
			Error  api.ErrorBody `json:"error"`
			Detail *string       `json:"detail"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			t.Errorf("%s: body is not JSON: %s", tc.name, body)
			continue
		}
		if env.Error.Code != tc.code || env.Detail == nil || *env.Detail != env.Error.Message {
			t.Errorf("%s: body %s, want code %s and detail equal to error.message", tc.name, body, tc.code)
			continue
		}
		if msg := env.Error.Message; !strings.HasSuffix(msg, ".") {
			t.Errorf("%s: message %q is not a whole sentence", tc.name, msg)
		}
		if tc.allow != "" && resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s: Allow %q, want %q", tc.name, resp.Header.Get("Allow"), tc.allow)
		}
	}
}
