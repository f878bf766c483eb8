package server

import (
	"bytes"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// rawAnswer is an answer as a client sees it, but for the headers every
// answer differs in.
type rawAnswer struct {
	status int
	header http.Header
	body   []byte
}

func (ts *testServer) answer(method, path, token, accept, body string) rawAnswer {
	ts.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.url+path, rd)
	if err != nil {
		ts.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
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
	h := resp.Header.Clone()
	h.Del("Date")
	return rawAnswer{status: resp.StatusCode, header: h, body: b}
}

// TestForeignIsMissing: for a token limited to one outpost, a session,
// queue entry or outpost of another outpost answers byte for byte as one
// that does not exist (with the same id in the path), on every endpoint
// that names one. Nothing in the answer tells that it exists.
func TestForeignIsMissing(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("alpha")
	ts.outpost("beta")
	ts.session("alpha")
	foreign := ts.session("beta").Metadata.SessionID
	// A missing id of the same length, so the bodies can be compared whole
	// once it is replaced by the foreign one.
	missing := "ses_" + strings.Repeat("z", len(foreign)-len("ses_"))
	if missing == foreign {
		t.Fatal("the missing id is the foreign one")
	}
	ts.mustDo(404, "GET", "/v1/sessions/"+missing, ts.admin, nil, nil)
	limited := ts.token([]string{api.ScopeSessionsWrite, api.ScopeOrchestrator}, "alpha")

	claim := `{"acceptor_id":"worker-1"}`
	sessionCases := []struct{ method, path, accept, body string }{
		{"GET", "/v1/sessions/{id}", "", ""},
		{"GET", "/v1/sessions/{id}/events", "", ""},
		{"GET", "/v1/sessions/{id}/events?tail=5", "", ""},
		{"GET", "/v1/sessions/{id}/events", "text/event-stream", ""},
		{"POST", "/v1/sessions/{id}/messages", "", `{"text":"hello"}`},
		{"GET", "/v1/sessions/{id}/artifacts", "", ""},
		{"GET", "/v1/sessions/{id}/artifacts/report.txt", "", ""},
		{"POST", "/v1/sessions/{id}/terminate", "", `{"reason":"x"}`},
		{"GET", "/v1/sessions/{id}/network-requests", "", ""},
		{"GET", "/v1/sessions/{id}/suspend", "", ""},
		{"POST", "/v1/sessions/{id}/suspend", "", `{"async":true}`},
		{"POST", "/v1/sessions/{id}/network-requests/1/grant", "", `{}`},
		{"POST", "/v1/sessions/{id}/network-requests/1/deny", "", `{"reason":"x"}`},
		{"POST", "/v1/sessions/{id}/tools/exec", "", `{"command":"true"}`},
		{"POST", "/v1/sessions/{id}/mcp", "application/json, text/event-stream", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`},
		{"GET", "/v1/queue/{id}", "", ""},
		{"POST", "/v1/queue/{id}/claim", "", claim},
		{"POST", "/v1/queue/{id}/release", "", claim},
		{"POST", "/v1/queue/{id}/events", "", `{"acceptor_id":"worker-1","step":"create"}`},
		{"GET", "/opbeta/outposts/devins/{id}", "", ""},
	}
	for _, c := range sessionCases {
		name := c.method + " " + c.path
		f := ts.answer(c.method, strings.ReplaceAll(c.path, "{id}", foreign), limited, c.accept, c.body)
		m := ts.answer(c.method, strings.ReplaceAll(c.path, "{id}", missing), limited, c.accept, c.body)
		m.body = bytes.ReplaceAll(m.body, []byte(missing), []byte(foreign))
		sameAnswer(t, name, f, m)
	}

	outpostCases := []struct{ method, path, body string }{
		{"GET", "/v1/outposts/{o}", ""},
		{"DELETE", "/v1/outposts/{o}", ""},
		{"GET", "/v1/queue?outpost={o}", ""},
		{"GET", "/v1/sessions?outpost={o}", ""},
		{"GET", "/v1/outposts/{o}/workers", ""},
		{"PUT", "/v1/outposts/{o}/workers/worker-1", `{}`},
		{"POST", "/v1/sessions", `{"outpost":"{o}","agent":{"kind":"script"}}`},
	}
	for _, c := range outpostCases {
		name := c.method + " " + c.path
		f := ts.answer(c.method, strings.ReplaceAll(c.path, "{o}", "beta"), limited, "", strings.ReplaceAll(c.body, "{o}", "beta"))
		m := ts.answer(c.method, strings.ReplaceAll(c.path, "{o}", "bexx"), limited, "", strings.ReplaceAll(c.body, "{o}", "bexx"))
		m.body = bytes.ReplaceAll(m.body, []byte("bexx"), []byte("beta"))
		sameAnswer(t, name, f, m)
	}
}

// sameAnswer fails unless foreign and missing are the same 404 answer.
func sameAnswer(t *testing.T, name string, foreign, missing rawAnswer) {
	t.Helper()
	if foreign.status != missing.status || !bytes.Equal(foreign.body, missing.body) {
		t.Errorf("%s: foreign %d %s; missing %d %s", name, foreign.status, foreign.body, missing.status, missing.body)
		return
	}
	if foreign.status != http.StatusNotFound {
		t.Errorf("%s: %d %s, want 404", name, foreign.status, foreign.body)
	}
	if fk, mk := slices.Sorted(maps.Keys(foreign.header)), slices.Sorted(maps.Keys(missing.header)); !slices.Equal(fk, mk) {
		t.Errorf("%s: headers %v, missing one's %v", name, fk, mk)
	}
	for k := range foreign.header {
		if !slices.Equal(foreign.header[k], missing.header[k]) {
			t.Errorf("%s: header %s %q, missing one's %q", name, k, foreign.header[k], missing.header[k])
		}
	}
}
