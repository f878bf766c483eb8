package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// stepClock is a clock the test moves by hand.
type stepClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// oauthPost posts form to an OAuth endpoint and decodes the answer.
func (ts *testServer) oauthPost(path string, form url.Values, out any) (int, api.OAuthError) {
	ts.t.Helper()
	resp, body := ts.raw("POST", path, "", "application/x-www-form-urlencoded", form.Encode())
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		ts.t.Errorf("POST %s: Cache-Control %q, want no-store", path, cc)
	}
	var oe api.OAuthError
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(body, &oe); err != nil || oe.Error == "" || oe.ErrorDescription == "" {
			ts.t.Errorf("POST %s: status %d without an OAuth error: %s", path, resp.StatusCode, body)
		}
		return resp.StatusCode, oe
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			ts.t.Fatalf("POST %s: decode %s: %v", path, body, err)
		}
	}
	return resp.StatusCode, oe
}

func (ts *testServer) deviceCode(form url.Values) api.DeviceCodeResponse {
	ts.t.Helper()
	var dc api.DeviceCodeResponse
	if code, oe := ts.oauthPost(api.DeviceCodePath, form, &dc); code != 200 {
		ts.t.Fatalf("device code: %d %+v", code, oe)
	}
	return dc
}

// poll polls once and returns the OAuth error code ("" on success).
func (ts *testServer) poll(deviceCode string, out *api.DeviceTokenResponse) string {
	ts.t.Helper()
	_, oe := ts.oauthPost(api.DeviceTokenPath, url.Values{"grant_type": {api.DeviceGrantType}, "device_code": {deviceCode}}, out)
	return oe.Error
}

var userCodeRE = regexp.MustCompile(`^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$`)

func TestDeviceGrantLogin(t *testing.T) {
	t.Parallel()
	clock := &stepClock{t: time.Now()}
	ts := startServer(t, Options{Now: clock.now})
	dc := ts.deviceCode(url.Values{"client_id": {api.DeviceClientCLI}, "client_name": {"laptop"}})
	if !userCodeRE.MatchString(dc.UserCode) || dc.ExpiresIn != 600 || dc.Interval != 5 ||
		dc.VerificationURI != ts.url+"/ui/device" || dc.VerificationURIComplete != ts.url+"/ui/device?user_code="+dc.UserCode {
		t.Fatalf("device code answer %+v", dc)
	}
	if got := ts.poll(dc.DeviceCode, nil); got != api.OAuthAuthorizationPending {
		t.Fatalf("first poll = %q, want authorization_pending", got)
	}
	// Too soon: slow_down, and the interval grows by 5 s.
	clock.add(2 * time.Second)
	if got := ts.poll(dc.DeviceCode, nil); got != api.OAuthSlowDown {
		t.Fatalf("poll after 2s = %q, want slow_down", got)
	}
	clock.add(6 * time.Second) // 6 s < the 10 s interval now
	if got := ts.poll(dc.DeviceCode, nil); got != api.OAuthSlowDown {
		t.Fatalf("poll after 6s of a 10s interval = %q, want slow_down", got)
	}
	clock.add(16 * time.Second)
	if got := ts.poll(dc.DeviceCode, nil); got != api.OAuthAuthorizationPending {
		t.Fatalf("poll after waiting = %q, want authorization_pending", got)
	}

	// The approver sees what asks; the code may be typed loosely.
	var g api.DeviceGrant
	ts.mustDo(200, "GET", api.DeviceGrantPath+"?user_code="+url.QueryEscape(strings.ToLower(strings.ReplaceAll(dc.UserCode, "-", " "))), ts.admin, nil, &g)
	if g.ClientID != api.DeviceClientCLI || g.ClientName != "laptop" || g.SourceIP != "127.0.0.1" || g.State != "pending" || len(g.Scopes) != 0 {
		t.Errorf("grant as shown: %+v", g)
	}
	ts.mustDo(200, "POST", api.DeviceApprovePath, ts.admin, api.DeviceDecisionRequest{UserCode: dc.UserCode}, &g)
	if g.State != "approved" || !strings.HasPrefix(g.ApprovedBy, "tok_") {
		t.Errorf("approved grant: %+v", g)
	}
	ts.mustDo(409, "POST", api.DeviceApprovePath, ts.admin, api.DeviceDecisionRequest{UserCode: dc.UserCode}, nil)

	clock.add(11 * time.Second)
	var tok api.DeviceTokenResponse
	if got := ts.poll(dc.DeviceCode, &tok); got != "" {
		t.Fatalf("poll after approval = %q", got)
	}
	if tok.TokenType != "Bearer" || !strings.HasPrefix(tok.AccessToken, "opt_") || tok.Scope != api.ScopeAdmin || tok.ExpiresIn != 0 {
		t.Errorf("token answer %+v", tok)
	}
	// The token works, and records who approved it.
	var list api.TokenList
	ts.mustDo(200, "GET", "/v1/tokens", tok.AccessToken, nil, &list)
	var found bool
	for _, x := range list.Items {
		if x.ID == tok.TokenID {
			found = strings.Contains(x.Name, "approved by "+g.ApprovedBy) && strings.Contains(x.Name, "laptop")
		}
	}
	if !found {
		t.Errorf("minted token %s not listed with its approver: %+v", tok.TokenID, list.Items)
	}
	// Single use.
	clock.add(20 * time.Second)
	if got := ts.poll(dc.DeviceCode, nil); got != api.OAuthInvalidGrant {
		t.Errorf("second poll after the token = %q, want invalid_grant", got)
	}
	if got := ts.poll("opd_not-a-code", nil); got != api.OAuthInvalidGrant {
		t.Errorf("poll with an unknown code = %q, want invalid_grant", got)
	}
}

func TestDeviceGrantDenyAndExpiry(t *testing.T) {
	t.Parallel()
	clock := &stepClock{t: time.Now()}
	ts := startServer(t, Options{Now: clock.now})
	denied := ts.deviceCode(url.Values{"client_id": {"x"}})
	ts.mustDo(200, "POST", api.DeviceDenyPath, ts.admin, api.DeviceDecisionRequest{UserCode: denied.UserCode}, nil)
	if got := ts.poll(denied.DeviceCode, nil); got != api.OAuthAccessDenied {
		t.Errorf("poll of a denied code = %q, want access_denied", got)
	}
	ts.mustDo(409, "POST", api.DeviceApprovePath, ts.admin, api.DeviceDecisionRequest{UserCode: denied.UserCode}, nil)

	late := ts.deviceCode(url.Values{"client_id": {"x"}})
	clock.add(10*time.Minute + time.Second)
	if got := ts.poll(late.DeviceCode, nil); got != api.OAuthExpiredToken {
		t.Errorf("poll of an expired code = %q, want expired_token", got)
	}
	ts.mustDo(404, "POST", api.DeviceApprovePath, ts.admin, api.DeviceDecisionRequest{UserCode: late.UserCode}, nil)

	// Bad requests are OAuth errors and store nothing.
	for _, tc := range []struct {
		path string
		form url.Values
		want string
	}{
		{api.DeviceCodePath, url.Values{}, api.OAuthInvalidRequest},
		{api.DeviceCodePath, url.Values{"client_id": {"x"}, "scope": {"root"}}, api.OAuthInvalidScope},
		{api.DeviceCodePath, url.Values{"client_id": {"a\nb"}}, api.OAuthInvalidRequest},
		{api.DeviceTokenPath, url.Values{"device_code": {late.DeviceCode}}, api.OAuthUnsupportedGrantType},
		{api.DeviceTokenPath, url.Values{"grant_type": {api.DeviceGrantType}}, api.OAuthInvalidRequest},
	} {
		if code, oe := ts.oauthPost(tc.path, tc.form, nil); code != 400 || oe.Error != tc.want {
			t.Errorf("POST %s %v: %d %q, want 400 %q", tc.path, tc.form, code, oe.Error, tc.want)
		}
	}
	resp, _ := ts.raw("POST", api.DeviceCodePath, "", "text/plain", "client_id=x")
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain body: %d", resp.StatusCode)
	}
	// JSON works as well as a form.
	resp, body := ts.raw("POST", api.DeviceCodePath, "", "application/json", `{"client_id":"x"}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"user_code"`) {
		t.Errorf("JSON body: %d %s", resp.StatusCode, body)
	}
}

func TestDeviceGrantMachineToken(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{DevicePollInterval: time.Nanosecond})
	gpu := ts.outpost("gpu")
	ts.outpost("cpu")
	ask := url.Values{"client_id": {api.DeviceClientWorker}, "scope": {api.ScopeMachine}, "outpost": {"gpu"}}

	// Only a token that may create tokens approves; one limited to
	// another outpost may not give this one.
	dc := ts.deviceCode(ask)
	writer := ts.token([]string{api.ScopeSessionsWrite}, "")
	ts.mustDo(403, "POST", api.DeviceApprovePath, writer, api.DeviceDecisionRequest{UserCode: dc.UserCode}, nil)
	cpuAdmin := ts.token([]string{api.ScopeAdmin}, "cpu")
	ts.mustDo(403, "POST", api.DeviceApprovePath, cpuAdmin, api.DeviceDecisionRequest{UserCode: dc.UserCode}, nil)
	if got := ts.poll(dc.DeviceCode, nil); got != api.OAuthAuthorizationPending {
		t.Fatalf("poll after refused approvals = %q", got)
	}
	// An admin limited to gpu may.
	gpuAdmin := ts.token([]string{api.ScopeAdmin}, "gpu")
	ts.mustDo(200, "POST", api.DeviceApprovePath, gpuAdmin, api.DeviceDecisionRequest{UserCode: dc.UserCode}, nil)
	var tok api.DeviceTokenResponse
	if got := ts.poll(dc.DeviceCode, &tok); got != "" {
		t.Fatalf("poll = %q", got)
	}
	if tok.Scope != api.ScopeMachine || tok.OutpostID != gpu.Metadata.OutpostID {
		t.Errorf("machine token %+v, want %s limited to %s", tok, api.ScopeMachine, gpu.Metadata.OutpostID)
	}
	var who api.WhoAmI
	ts.mustDo(200, "GET", "/v1/whoami", tok.AccessToken, nil, &who)
	if who.OutpostID != gpu.Metadata.OutpostID {
		t.Errorf("whoami of the machine token: %+v", who)
	}
	ts.mustDo(404, "GET", "/v1/outposts/cpu", tok.AccessToken, nil, nil)

	// An unknown outpost is refused at approval, not when asked.
	nope := ts.deviceCode(url.Values{"client_id": {"w"}, "scope": {api.ScopeMachine}, "outpost": {"nope"}})
	ts.mustDo(404, "POST", api.DeviceApprovePath, ts.admin, api.DeviceDecisionRequest{UserCode: nope.UserCode}, nil)
	// A login approved by a limited token is limited alike.
	login := ts.deviceCode(url.Values{"client_id": {api.DeviceClientCLI}})
	ts.mustDo(200, "POST", api.DeviceApprovePath, gpuAdmin, api.DeviceDecisionRequest{UserCode: login.UserCode}, nil)
	if got := ts.poll(login.DeviceCode, &tok); got != "" || tok.OutpostID != gpu.Metadata.OutpostID || tok.Scope != api.ScopeAdmin {
		t.Errorf("login approved by a limited admin: %q %+v", got, tok)
	}
}

func TestDeviceGrantWrongCodeLimit(t *testing.T) {
	t.Parallel()
	clock := &stepClock{t: time.Now()}
	ts := startServer(t, Options{Now: clock.now, DeviceCodeTTL: time.Hour})
	dc := ts.deviceCode(url.Values{"client_id": {"x"}})
	guesser := ts.token([]string{api.ScopeAdmin}, "")
	wrong := "BBBB-BBBB"
	if wrong == dc.UserCode {
		wrong = "CCCC-CCCC"
	}
	for range deviceMissLimit {
		ts.mustDo(404, "POST", api.DeviceApprovePath, guesser, api.DeviceDecisionRequest{UserCode: wrong}, nil)
	}
	// Now even the right code is refused for this token, and nothing was
	// approved.
	ts.mustDo(429, "POST", api.DeviceApprovePath, guesser, api.DeviceDecisionRequest{UserCode: dc.UserCode}, nil)
	ts.mustDo(429, "GET", api.DeviceGrantPath+"?user_code="+dc.UserCode, guesser, nil, nil)
	if got := ts.poll(dc.DeviceCode, nil); got != api.OAuthAuthorizationPending {
		t.Fatalf("poll = %q, want authorization_pending", got)
	}
	// Another token is not held back; the guesser is after the window.
	var g api.DeviceGrant
	ts.mustDo(200, "GET", api.DeviceGrantPath+"?user_code="+dc.UserCode, ts.admin, nil, &g)
	clock.add(deviceMissWindow + time.Second)
	ts.mustDo(200, "POST", api.DeviceApprovePath, guesser, api.DeviceDecisionRequest{UserCode: dc.UserCode}, nil)
}

// TestDeviceGrantTyposAndPeople: a typed code that cannot be a user code
// (a look-alike letter, a digit, a letter short) is refused as malformed
// and does not count toward the wrong-code limit, so typos do not lock out
// the person approving; wrong codes count per person, across the tokens of
// one user, and per source address, across tokens.
func TestDeviceGrantTyposAndPeople(t *testing.T) {
	t.Parallel()
	clock := &stepClock{t: time.Now()}
	ts := startServer(t, Options{Now: clock.now, DeviceCodeTTL: time.Hour})
	dc := ts.deviceCode(url.Values{"client_id": {"x"}})
	typist := ts.token([]string{api.ScopeAdmin}, "")
	typo := "0" + dc.UserCode[1:] // a digit for a letter
	short := dc.UserCode[:len(dc.UserCode)-1]
	for range 3 * deviceMissIPLimit {
		for _, code := range []string{typo, short, strings.Replace(dc.UserCode, dc.UserCode[:1], "O", 1)} {
			code, msg := ts.errorOf("GET", api.DeviceGrantPath+"?user_code="+url.QueryEscape(code), typist)
			if code != 400 || !strings.Contains(msg, "is not a user code") {
				t.Fatalf("a malformed code: %d %q, want 400 saying it is not a user code", code, msg)
			}
		}
	}
	var g api.DeviceGrant
	ts.mustDo(200, "GET", api.DeviceGrantPath+"?user_code="+dc.UserCode, typist, nil, &g)

	// One person's tokens share one count: a user's second token is
	// refused once the first sent the limit.
	u, first := ts.signedIn("sub-approver", "approver@example.com")
	ts.mustDo(201, "POST", "/v1/role-bindings", ts.admin, api.CreateRoleBindingRequest{Role: api.RoleAdmin, User: u.ID}, nil)
	second := newSecret("opt_")
	if err := ts.srv.store.CreateToken(context.Background(), store.Token{ID: newID("tok_"), Name: "sign-in", Hash: hashSecret(second),
		Scopes: []string{}, CreatedAt: clock.now(), UserID: u.ID}); err != nil {
		t.Fatal(err)
	}
	wrong := "BBBB-BBBB"
	if wrong == dc.UserCode {
		wrong = "CCCC-CCCC"
	}
	for range deviceMissLimit {
		ts.mustDo(404, "GET", api.DeviceGrantPath+"?user_code="+wrong, first, nil, nil)
	}
	if code, msg := ts.errorOf("GET", api.DeviceGrantPath+"?user_code="+dc.UserCode, second); code != 429 || !strings.HasPrefix(msg, "You sent") {
		t.Errorf("the same person's other token after %d wrong codes: %d %q, want 429", deviceMissLimit, code, msg)
	}

	// One address's tokens share a larger count (every request here is
	// from the loopback address): the person above sent deviceMissLimit.
	for sent := deviceMissLimit; sent < deviceMissIPLimit; sent += deviceMissLimit {
		other := ts.token([]string{api.ScopeAdmin}, "")
		for range deviceMissLimit {
			ts.mustDo(404, "GET", api.DeviceGrantPath+"?user_code="+wrong, other, nil, nil)
		}
	}
	if code, msg := ts.errorOf("GET", api.DeviceGrantPath+"?user_code="+dc.UserCode, typist); code != 429 || !strings.HasPrefix(msg, "Your address") {
		t.Errorf("a fresh token from an address that sent %d wrong codes: %d %q, want 429 naming the address", deviceMissIPLimit, code, msg)
	}
	clock.add(deviceMissWindow + time.Second)
	ts.mustDo(200, "GET", api.DeviceGrantPath+"?user_code="+dc.UserCode, second, nil, nil)
}

func TestUserCodes(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		c := newUserCode()
		if !userCodeRE.MatchString(c) {
			t.Fatalf("user code %q", c)
		}
		if n, ok := normalizeUserCode(strings.ToLower(c[:4]) + " " + c[5:]); !ok || n != c {
			t.Fatalf("normalize %q = %q %v", c, n, ok)
		}
		seen[c] = true
	}
	if len(seen) < 999 {
		t.Errorf("%d distinct codes of 1000", len(seen))
	}
	for _, bad := range []string{"", "BCDF-GHJ", "BCDF-GHJKL", "BCDF-GHJ1", "AEIO-UBCD", "ＢCDF-GHJK"} {
		if _, ok := normalizeUserCode(bad); ok {
			t.Errorf("normalize %q accepted", bad)
		}
	}
}

// TestDeviceLoginByOutpostAdmin: a person who is admin of one outpost only
// cannot approve a token for every outpost (asked with scope admin, or with
// no scope), and a login for that outpost gives a token that is the
// person's and stays on that outpost.
func TestDeviceLoginByOutpostAdmin(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{DevicePollInterval: time.Millisecond})
	ts.outpost("home")
	ts.outpost("other")
	u, secret := ts.signedIn("sub-home-admin", "home-admin@example.com")
	ts.mustDo(201, "POST", "/v1/role-bindings", ts.admin, api.CreateRoleBindingRequest{Role: api.RoleAdmin, User: u.ID, Outpost: "home"}, nil)

	for _, form := range []url.Values{
		{"client_id": {"cli"}, "scope": {api.ScopeAdmin}},
		{"client_id": {"cli"}},
		{"client_id": {"cli"}, "scope": {api.ScopeAdmin}, "outpost": {"other"}},
	} {
		dc := ts.deviceCode(form)
		// 404 for the other outpost: it does not exist for this person.
		if got := ts.do("POST", api.DeviceApprovePath, secret, api.DeviceDecisionRequest{UserCode: dc.UserCode}, nil); got != 403 && got != 404 {
			t.Errorf("approval of %v by an admin of home only: %d, want it refused", form, got)
		}
	}

	dc := ts.deviceCode(url.Values{"client_id": {"cli"}, "scope": {api.ScopeAdmin}, "outpost": {"home"}})
	ts.mustDo(200, "POST", api.DeviceApprovePath, secret, api.DeviceDecisionRequest{UserCode: dc.UserCode}, nil)
	var tok api.DeviceTokenResponse
	if e := ts.poll(dc.DeviceCode, &tok); e != "" {
		t.Fatalf("poll: %s", e)
	}
	var me api.WhoAmI
	ts.mustDo(200, "GET", "/v1/whoami", tok.AccessToken, nil, &me)
	if me.UserID != u.ID {
		t.Errorf("the approved token belongs to %q, want the approver %s", me.UserID, u.ID)
	}
	ts.mustDo(200, "GET", "/v1/outposts/home/secrets", tok.AccessToken, nil, nil)
	if got := ts.do("GET", "/v1/outposts/other/secrets", tok.AccessToken, nil, nil); got != 404 && got != 403 {
		t.Errorf("the token reached another outpost: %d", got)
	}
	if got := ts.do("GET", "/v1/audit-logs", tok.AccessToken, nil, nil); got != 403 {
		t.Errorf("the token read the audit log: %d, want 403", got)
	}
}
