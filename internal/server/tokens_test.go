package server

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// tokenIDOf returns the id of the token whose secret is secret.
func (ts *testServer) tokenIDOf(secret string) string {
	ts.t.Helper()
	var me api.WhoAmI
	ts.mustDo(200, "GET", "/v1/whoami", secret, nil, &me)
	return me.ID
}

// tokenIDs lists the ids of the tokens token may see.
func (ts *testServer) tokenIDs(token string) map[string]api.Token {
	ts.t.Helper()
	var l api.TokenList
	ts.mustDo(200, "GET", "/v1/tokens", token, nil, &l)
	out := map[string]api.Token{}
	for _, t := range l.Items {
		out[t.ID] = t
	}
	return out
}

// TestLimitedAdminStaysInItsOutpost: an admin token limited to one outpost
// sees, creates and revokes only tokens limited to that outpost. It cannot
// mint a token without the limit (which would read every outpost's
// sessions), cannot name another outpost, and revoking a token it may not
// see answers as a missing one.
func TestLimitedAdminStaysInItsOutpost(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	alpha := ts.outpost("alpha")
	beta := ts.outpost("beta")
	alphaSession := ts.session("alpha").Metadata.SessionID

	limited := ts.token([]string{api.ScopeAdmin}, "beta")
	alphaMachine := ts.token([]string{api.ScopeMachine}, "alpha")
	betaReader := ts.token([]string{api.ScopeSessionsRead}, "beta")
	unlimitedReader := ts.token([]string{api.ScopeSessionsRead}, "")
	alphaMachineID, betaReaderID := ts.tokenIDOf(alphaMachine), ts.tokenIDOf(betaReader)
	adminID, unlimitedReaderID := ts.tokenIDOf(ts.admin), ts.tokenIDOf(unlimitedReader)
	total := len(ts.tokenIDs(ts.admin))

	// It lists the tokens of its own outpost, itself among them, and no
	// other.
	seen := ts.tokenIDs(limited)
	if _, ok := seen[betaReaderID]; !ok || len(seen) != 2 {
		t.Fatalf("the limited token lists %v; want itself and %s only", seen, betaReaderID)
	}
	for id, tok := range seen {
		if tok.OutpostID != beta.Metadata.OutpostID {
			t.Errorf("the limited token lists %s of outpost %q", id, tok.OutpostID)
		}
	}

	// A token without the limit is refused with a sentence that says what
	// to send instead; nothing is created.
	wide := ts.answer("POST", "/v1/tokens", limited, "", `{"name":"wide","scopes":["admin"]}`)
	if wide.status != http.StatusForbidden || !strings.Contains(string(wide.body), `set outpost to \"beta\"`) {
		t.Fatalf("an unlimited token from a limited one: %d %s", wide.status, wide.body)
	}
	// Another outpost does not exist for it: the same 404 as a missing one.
	f := ts.answer("POST", "/v1/tokens", limited, "", `{"name":"x","scopes":["admin"],"outpost":"alpha"}`)
	m := ts.answer("POST", "/v1/tokens", limited, "", `{"name":"x","scopes":["admin"],"outpost":"alxxa"}`)
	m.body = bytes.ReplaceAll(m.body, []byte("alxxa"), []byte("alpha"))
	sameAnswer(t, "POST /v1/tokens for another outpost", f, m)
	f = ts.answer("POST", "/v1/tokens", limited, "", `{"name":"x","scopes":["admin"],"outpost":"`+alpha.Metadata.OutpostID+`"}`)
	if f.status != http.StatusNotFound {
		t.Fatalf("a token for another outpost by id: %d %s", f.status, f.body)
	}
	if n := len(ts.tokenIDs(ts.admin)); n != total {
		t.Fatalf("refused creations changed the tokens: %d, were %d", n, total)
	}

	// A token of its own outpost works, and is limited like its maker.
	var made api.CreateTokenResponse
	ts.mustDo(201, "POST", "/v1/tokens", limited, api.CreateTokenRequest{Name: "sub", Scopes: []string{api.ScopeAdmin}, Outpost: "beta"}, &made)
	if made.OutpostID != beta.Metadata.OutpostID {
		t.Fatalf("the new token is limited to %q, want beta", made.OutpostID)
	}
	ts.mustDo(404, "GET", "/v1/sessions/"+alphaSession, made.Secret, nil, nil)

	// Revoking a token of another outpost, or an unlimited one, answers as
	// a missing one, and the token keeps working.
	for _, id := range []string{alphaMachineID, adminID, unlimitedReaderID} {
		missing := "tok_" + strings.Repeat("z", len(id)-len("tok_"))
		f := ts.answer("DELETE", "/v1/tokens/"+id, limited, "", "")
		m := ts.answer("DELETE", "/v1/tokens/"+missing, limited, "", "")
		m.body = bytes.ReplaceAll(m.body, []byte(missing), []byte(id))
		sameAnswer(t, "DELETE a token the limited one may not see", f, m)
	}
	ts.mustDo(200, "GET", "/v1/whoami", alphaMachine, nil, nil)
	ts.mustDo(200, "GET", "/v1/whoami", unlimitedReader, nil, nil)
	ts.mustDo(200, "GET", "/v1/whoami", ts.admin, nil, nil)
	// One of its own outpost it may revoke.
	ts.mustDo(204, "DELETE", "/v1/tokens/"+betaReaderID, limited, nil, nil)
	ts.mustDo(401, "GET", "/v1/whoami", betaReader, nil, nil)

	// An unlimited admin still sees and manages every token.
	if all := ts.tokenIDs(ts.admin); len(all) != total+1 {
		t.Fatalf("the admin lists %d tokens, want %d", len(all), total+1)
	}
	ts.mustDo(204, "DELETE", "/v1/tokens/"+alphaMachineID, ts.admin, nil, nil)
}

// csrfField is the CSRF value of a form on a page.
var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// uiRequest sends one request to the web UI signed in with token.
func (ts *testServer) uiRequest(method, path, token string, form url.Values) (int, string) {
	ts.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, ts.url+path, body)
	if err != nil {
		ts.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.AddCookie(&http.Cookie{Name: "outpost_token", Value: token})
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, string(b)
}

// TestTokensPageOfLimitedAdmin: the web UI's Tokens page, signed in with an
// admin token limited to one outpost, shows only that outpost's tokens,
// offers no unlimited token, refuses to make one and cannot revoke another
// outpost's token.
func TestTokensPageOfLimitedAdmin(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("alpha")
	ts.outpost("beta")
	limited := ts.token([]string{api.ScopeAdmin}, "beta")
	alphaMachine := ts.token([]string{api.ScopeMachine}, "alpha")
	alphaID, adminID := ts.tokenIDOf(alphaMachine), ts.tokenIDOf(ts.admin)
	total := len(ts.tokenIDs(ts.admin))

	status, page := ts.uiRequest("GET", "/ui/tokens", limited, nil)
	if status != 200 {
		t.Fatalf("tokens page: %d %s", status, page)
	}
	for _, id := range []string{alphaID, adminID} {
		if strings.Contains(page, id) {
			t.Errorf("the tokens page of a limited admin shows token %s", id)
		}
	}
	if !strings.Contains(page, ts.tokenIDOf(limited)) {
		t.Error("the tokens page does not show the signed-in token")
	}
	if strings.Contains(page, "Any outpost") || strings.Contains(page, `value="alpha"`) {
		t.Error("the tokens page offers an unlimited token or another outpost")
	}
	csrf := csrfField.FindStringSubmatch(page)
	if csrf == nil {
		t.Fatal("no CSRF value on the tokens page")
	}

	status, page = ts.uiRequest("POST", "/ui/tokens", limited, url.Values{"csrf": {csrf[1]}, "name": {"wide"}, "scope": {"admin"}})
	if status != http.StatusForbidden || !strings.Contains(page, "limited to outpost beta") {
		t.Fatalf("creating an unlimited token in the UI: %d %s", status, page)
	}
	status, page = ts.uiRequest("POST", "/ui/tokens", limited, url.Values{"csrf": {csrf[1]}, "name": {"other"}, "scope": {"admin"}, "outpost": {"alpha"}})
	if status != http.StatusNotFound {
		t.Fatalf("creating a token of another outpost in the UI: %d %s", status, page)
	}
	if n := len(ts.tokenIDs(ts.admin)); n != total {
		t.Fatalf("refused creations in the UI changed the tokens: %d, were %d", n, total)
	}
	status, page = ts.uiRequest("POST", "/ui/tokens/"+alphaID+"/revoke", limited, url.Values{"csrf": {csrf[1]}})
	if status != http.StatusNotFound {
		t.Fatalf("revoking another outpost's token in the UI: %d %s", status, page)
	}
	ts.mustDo(200, "GET", "/v1/whoami", alphaMachine, nil, nil)
	status, page = ts.uiRequest("POST", "/ui/tokens", limited, url.Values{"csrf": {csrf[1]}, "name": {"mine"}, "scope": {"sessions.read"}, "outpost": {"beta"}})
	if status != http.StatusCreated || !strings.Contains(page, "opt_") {
		t.Fatalf("creating a token of its own outpost in the UI: %d %s", status, page)
	}
}

// TestTokenCannotOutliveItsCreator: a token that expires creates only
// tokens that expire by the same time; one that would live longer, or
// never expire, is refused with the most it may ask for, and nothing is
// created.
func TestTokenCannotOutliveItsCreator(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	var created api.CreateTokenResponse
	ts.mustDo(201, "POST", "/v1/tokens", ts.admin, api.CreateTokenRequest{Name: "short", Scopes: []string{api.ScopeAdmin}, ExpiresInS: 3600}, &created)
	short := created.Secret
	total := len(ts.tokenIDs(ts.admin))
	for _, body := range []string{
		`{"name":"forever","scopes":["admin"]}`,
		`{"name":"longer","scopes":["admin"],"expires_in_s":7200}`,
	} {
		a := ts.answer("POST", "/v1/tokens", short, "", body)
		if a.status != http.StatusForbidden || !strings.Contains(string(a.body), "must expire by then") {
			t.Errorf("%s from a token that expires in an hour: %d %s", body, a.status, a.body)
		}
	}
	if n := len(ts.tokenIDs(ts.admin)); n != total {
		t.Fatalf("refused creations changed the tokens: %d, were %d", n, total)
	}
	ts.mustDo(201, "POST", "/v1/tokens", short, api.CreateTokenRequest{Name: "within", Scopes: []string{api.ScopeSessionsRead}, ExpiresInS: 600}, &created)
	if created.Token.ExpiresAt == nil {
		t.Errorf("the token created within its creator's life never expires: %+v", created.Token)
	}
}

// An expires_in_s so large that it would overflow the duration it becomes
// is refused, and nothing is created: it once gave a token that expired at
// a wrong time, maybe already.
func TestTokenExpiryOutOfRange(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	total := len(ts.tokenIDs(ts.admin))
	for _, body := range []string{
		`{"name":"huge","scopes":["admin"],"expires_in_s":9223372036854775807}`,
		`{"name":"past","scopes":["admin"],"expires_in_s":-1}`,
	} {
		a := ts.answer("POST", "/v1/tokens", ts.admin, "", body)
		if a.status != http.StatusBadRequest || !strings.Contains(string(a.body), "expires_in_s must be between 0 and") {
			t.Errorf("%s: %d %s", body, a.status, a.body)
		}
	}
	if n := len(ts.tokenIDs(ts.admin)); n != total {
		t.Fatalf("refused creations changed the tokens: %d, were %d", n, total)
	}
}
