package web_test

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
)

// uiUser is a browser without JavaScript signed in to a real server's UI
// with one token: it reads pages and posts their forms with the page's
// CSRF value, as a browser does.
type uiUser struct {
	t     *testing.T
	base  string
	token string
	http  *http.Client
}

func newUIUser(t *testing.T, srv *servertest.Server, token string) *uiUser {
	return &uiUser{t: t, base: srv.URL(), token: token, http: &http.Client{
		Timeout: 30 * time.Second,
		// A form's answer is a redirect the test looks at.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (u *uiUser) do(method, path string, form url.Values) (int, http.Header, string) {
	u.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u.base+path, body)
	if err != nil {
		u.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.AddCookie(&http.Cookie{Name: "outpost_token", Value: u.token})
	resp, err := u.http.Do(req)
	if err != nil {
		u.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		u.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// page reads a page that must answer 200.
func (u *uiUser) page(path string) string {
	u.t.Helper()
	code, _, body := u.do("GET", path, nil)
	if code != http.StatusOK {
		u.t.Fatalf("GET %s: %d\n%s", path, code, body)
	}
	return body
}

var csrfValue = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// post sends a form as the page at from would, with its CSRF value.
func (u *uiUser) post(from, action string, form url.Values) (int, http.Header, string) {
	u.t.Helper()
	m := csrfValue.FindStringSubmatch(u.page(from))
	if m == nil {
		u.t.Fatalf("page %s has no form", from)
	}
	form.Set("csrf", html.UnescapeString(m[1]))
	return u.do("POST", action, form)
}

func startUI(t *testing.T) (*servertest.Server, map[string]string) {
	t.Helper()
	srv := servertest.Start(t, server.Options{})
	ctx := context.Background()
	tokens := map[string]string{"admin": srv.AdminToken()}
	for name, scopes := range map[string][]string{
		"orchestrator": {api.ScopeOrchestrator, api.ScopeSessionsRead},
		"netadmin":     {api.ScopeOrchestrator, api.ScopeSessionsWrite, api.ScopeNetworkAdmin},
		"writer":       {api.ScopeSessionsWrite},
		"reader":       {api.ScopeSessionsRead},
	} {
		tok, err := srv.Client.Tokens.Create(ctx, api.CreateTokenRequest{Name: name, Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = tok.Secret
	}
	return srv, tokens
}

func policyOf(t *testing.T, p *api.NetworkPolicy) string {
	t.Helper()
	if p == nil {
		return "null"
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rows is a policy form: enabled, and kind, value and ports per row.
func rows(enabled bool, rs ...[3]string) url.Values {
	f := url.Values{}
	if enabled {
		f.Set("enabled", "1")
	}
	for _, r := range rs {
		f.Add("kind", r[0])
		f.Add("value", r[1])
		f.Add("ports", r[2])
	}
	return f
}

// TestOutpostPolicyEditor: the outpost page shows its policy to every
// reader and a form only to a token that may change outposts; the form
// saves a narrowed policy, shows the API's refusal of a wider one (the
// typed rows kept, nothing changed) and its own of a malformed row, and a
// network.admin token lifts and rewrites the policy.
func TestOutpostPolicyEditor(t *testing.T) {
	t.Parallel()
	srv, tok := startUI(t)
	ctx := context.Background()
	start := api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{
		{Hostname: "*.example.test"}, {IPv4: "10.1.0.0/16", Ports: []int{443}}}}
	if _, err := srv.Client.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &start}); err != nil {
		t.Fatal(err)
	}
	stored := func() string {
		t.Helper()
		o, err := srv.Client.Outposts.Get(ctx, "net")
		if err != nil {
			t.Fatal(err)
		}
		return policyOf(t, o.Spec.NetworkPolicy)
	}

	reader := newUIUser(t, srv, tok["reader"])
	list := reader.page("/ui/outposts")
	if !strings.Contains(list, `href="/ui/outposts/net"`) || !strings.Contains(list, "only hostname *.example.test; ipv4 10.1.0.0/16 ports 443") {
		t.Fatalf("outposts list lacks the outpost's link or policy:\n%s", list)
	}
	body := reader.page("/ui/outposts/net")
	for _, want := range []string{`id="policy-effective">Restricted`, "<li class=\"mono\">hostname *.example.test</li>", "<li class=\"mono\">ipv4 10.1.0.0/16 ports 443</li>"} {
		if !strings.Contains(body, want) {
			t.Errorf("reader's outpost page lacks %q", want)
		}
	}
	if strings.Contains(body, `id="policy-form"`) {
		t.Fatal("a sessions.read token is offered the policy form")
	}

	orch := newUIUser(t, srv, tok["orchestrator"])
	body = orch.page("/ui/outposts/net")
	for _, want := range []string{`id="policy-form"`, `id="policy-enabled" name="enabled" value="1" checked disabled`, `id="policy-locked"`, `value="*.example.test"`, `value="443"`} {
		if !strings.Contains(body, want) {
			t.Errorf("orchestrator's outpost page lacks %q", want)
		}
	}
	// Narrowing: drop the second rule, put ports on the first.
	f := rows(true, [3]string{"hostname", "*.example.test", "443, 80"}, [3]string{"ipv4", "10.1.0.0/16", "443"}, [3]string{"hostname", "", ""})
	f.Set("remove", "1")
	code, hdr, out := orch.post("/ui/outposts/net", "/ui/outposts/net/network-policy", f)
	if code != http.StatusSeeOther || hdr.Get("Location") != "/ui/outposts/net?saved=1" {
		t.Fatalf("narrow: %d %s\n%s", code, hdr.Get("Location"), out)
	}
	want := `{"enabled":true,"allow":[{"hostname":"*.example.test","ports":[80,443]}]}`
	if got := stored(); got != want {
		t.Fatalf("after narrowing: %s, want %s", got, want)
	}
	if !strings.Contains(orch.page("/ui/outposts/net?saved=1"), "The network policy is saved") {
		t.Error("no notice after saving")
	}

	// Widening without network.admin: the API's 403 on the page, the
	// typed rule still in the form, the policy as it was.
	code, _, out = orch.post("/ui/outposts/net", "/ui/outposts/net/network-policy",
		rows(true, [3]string{"hostname", "*.example.test", "80, 443"}, [3]string{"hostname", "evil.test", ""}))
	if code != http.StatusForbidden || !strings.Contains(out, "network.admin") || !strings.Contains(out, `value="evil.test"`) || !strings.Contains(out, "<details id=\"policy-edit\" open>") {
		t.Fatalf("widening: %d\n%s", code, out)
	}
	// A form that leaves the restriction off (the checkbox is disabled
	// for this token, but a crafted post can omit it) is refused too.
	if code, _, _ := orch.post("/ui/outposts/net", "/ui/outposts/net/network-policy", rows(false, [3]string{"hostname", "*.example.test", ""})); code != http.StatusForbidden {
		t.Fatalf("lifting without network.admin: %d", code)
	}
	// A malformed row is refused before the API, naming the row.
	code, _, out = orch.post("/ui/outposts/net", "/ui/outposts/net/network-policy",
		rows(true, [3]string{"hostname", "*.example.test", "80"}, [3]string{"ipv4", "10.1.0.0/16", "44x"}))
	if code != http.StatusBadRequest || !strings.Contains(out, "rule 2 (10.1.0.0/16): port &#34;44x&#34; is not a number") {
		t.Fatalf("bad port: %d\n%s", code, out)
	}
	code, _, out = orch.post("/ui/outposts/net", "/ui/outposts/net/network-policy",
		rows(true, [3]string{"ipv4", "fd00::/8", ""}))
	if code != http.StatusBadRequest || !strings.Contains(out, "rule 1 (fd00::/8): ipv4 &#34;fd00::/8&#34;: is not IPv4; use an ipv6 rule") {
		t.Fatalf("v6 range as ipv4: %d\n%s", code, out)
	}
	if got := stored(); got != want {
		t.Fatalf("after the refusals: %s, want %s", got, want)
	}

	// network.admin lifts the restriction (the rules stay, stored
	// unenforced), then sets three rules of the three kinds.
	admin := newUIUser(t, srv, tok["netadmin"])
	if body := admin.page("/ui/outposts/net"); strings.Contains(body, `id="policy-locked"`) || !strings.Contains(body, `id="policy-enabled" name="enabled" value="1" checked>`) {
		t.Fatalf("network.admin's form is locked:\n%s", body)
	}
	if code, _, out := admin.post("/ui/outposts/net", "/ui/outposts/net/network-policy", rows(false, [3]string{"hostname", "*.example.test", "80, 443"})); code != http.StatusSeeOther {
		t.Fatalf("lift: %d\n%s", code, out)
	}
	if got := stored(); got != `{"enabled":false,"allow":[{"hostname":"*.example.test","ports":[80,443]}]}` {
		t.Fatalf("after lifting: %s", got)
	}
	if body := reader.page("/ui/outposts/net"); !strings.Contains(body, `id="policy-effective">Unrestricted`) || !strings.Contains(body, "1 stored rules are not enforced") {
		t.Fatalf("lifted policy's page:\n%s", body)
	}
	code, _, out = admin.post("/ui/outposts/net", "/ui/outposts/net/network-policy",
		rows(true, [3]string{"hostname", "API.Example.TEST.", "443"}, [3]string{"ipv4", "10.2.0.0/16", ""}, [3]string{"ipv6", "fd00::/8", "53 , 853"}, [3]string{"hostname", "", ""}))
	if code != http.StatusSeeOther {
		t.Fatalf("three kinds: %d\n%s", code, out)
	}
	if got, want := stored(), `{"enabled":true,"allow":[{"hostname":"api.example.test","ports":[443]},{"ipv4":"10.2.0.0/16"},{"ipv6":"fd00::/8","ports":[53,853]}]}`; got != want {
		t.Fatalf("three kinds stored %s, want %s", got, want)
	}
	// An empty restricted policy reaches nothing, and says so.
	if code, _, _ := admin.post("/ui/outposts/net", "/ui/outposts/net/network-policy", rows(true)); code != http.StatusSeeOther {
		t.Fatalf("empty: %d", code)
	}
	if body := reader.page("/ui/outposts/net"); !strings.Contains(body, "no rules, so nothing is reachable") {
		t.Fatalf("empty policy's page:\n%s", body)
	}

	// A token limited to one outpost cannot change outposts: no form.
	lim, err := srv.Client.Tokens.Create(ctx, api.CreateTokenRequest{Name: "limited", Scopes: []string{api.ScopeOrchestrator}, Outpost: "net"})
	if err != nil {
		t.Fatal(err)
	}
	if body := newUIUser(t, srv, lim.Secret).page("/ui/outposts/net"); strings.Contains(body, `id="policy-form"`) {
		t.Fatal("a token limited to the outpost is offered the form")
	}
	if code, _, _ := reader.do("GET", "/ui/outposts/nope", nil); code != http.StatusNotFound {
		t.Fatalf("a missing outpost's page: %d", code)
	}
}

// TestSessionPolicyEditor: a session's page shows its effective policy,
// offers a sessions.write token a form bounded by the outpost's policy,
// saves a narrower one as the session's own, shows the API's refusal of a
// wider one, goes back to the outpost's, and offers nothing once the
// session has ended or to a read-only token.
func TestSessionPolicyEditor(t *testing.T) {
	t.Parallel()
	srv, tok := startUI(t)
	ctx := context.Background()
	outer := api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "*.example.test"}, {IPv4: "10.1.0.0/16"}}}
	if _, err := srv.Client.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outer}); err != nil {
		t.Fatal(err)
	}
	s, err := srv.Client.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: "net", Title: "t",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := s.Metadata.SessionID
	path := "/ui/sessions/" + id
	action := path + "/network-policy"
	own := func() (string, bool) {
		t.Helper()
		s, err := srv.Client.Sessions.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return policyOf(t, s.Spec.NetworkPolicy), s.Spec.NetworkPolicyOwn
	}

	if body := newUIUser(t, srv, tok["reader"]).page(path); strings.Contains(body, `id="policy-form"`) || !strings.Contains(body, "This is its outpost's policy.") {
		t.Fatalf("reader's session page:\n%s", body)
	}
	writer := newUIUser(t, srv, tok["writer"])
	body := writer.page(path)
	for _, want := range []string{`id="policy-form"`, `disabled>`, "may only narrow its outpost's (hostname *.example.test; ipv4 10.1.0.0/16)", `value="10.1.0.0/16"`} {
		if !strings.Contains(body, want) {
			t.Errorf("writer's session page lacks %q", want)
		}
	}
	if strings.Contains(body, `id="policy-follow"`) {
		t.Error("a session following its outpost's policy is offered to follow it")
	}

	code, hdr, out := writer.post(path, action, rows(true, [3]string{"hostname", "api.example.test", "443"}, [3]string{"ipv4", "10.1.2.0/24", ""}))
	if code != http.StatusSeeOther || hdr.Get("Location") != path+"?policy=saved#network" {
		t.Fatalf("narrow: %d %s\n%s", code, hdr.Get("Location"), out)
	}
	narrow := `{"enabled":true,"allow":[{"hostname":"api.example.test","ports":[443]},{"ipv4":"10.1.2.0/24"}]}`
	if got, isOwn := own(); got != narrow || !isOwn {
		t.Fatalf("after narrowing: %s own=%v", got, isOwn)
	}
	body = writer.page(path + "?policy=saved")
	for _, want := range []string{"The network policy is saved", "This is the session's own policy.", `id="policy-follow"`, "only hostname api.example.test ports 443; ipv4 10.1.2.0/24"} {
		if !strings.Contains(body, want) {
			t.Errorf("page after narrowing lacks %q", want)
		}
	}

	// Wider than the outpost's: the API's 403 on the page, the typed row
	// kept, the session's policy as it was.
	code, _, out = writer.post(path, action, rows(true, [3]string{"ipv4", "10.0.0.0/8", ""}))
	if code != http.StatusForbidden || !strings.Contains(out, "is not within the outpost") || !strings.Contains(out, `value="10.0.0.0/8"`) {
		t.Fatalf("widen: %d\n%s", code, out)
	}
	if code, _, _ := writer.post(path, action, rows(false)); code != http.StatusForbidden {
		t.Fatalf("lift without network.admin: %d", code)
	}
	if got, _ := own(); got != narrow {
		t.Fatalf("after the refusals: %s", got)
	}

	// network.admin may widen past the outpost's, up to unrestricted.
	admin := newUIUser(t, srv, tok["netadmin"])
	if body := admin.page(path); strings.Contains(body, `id="policy-locked"`) {
		t.Fatal("network.admin's session form is locked")
	}
	if code, _, out := admin.post(path, action, rows(true, [3]string{"ipv4", "10.0.0.0/8", ""})); code != http.StatusSeeOther {
		t.Fatalf("network.admin widens: %d\n%s", code, out)
	}
	if got, _ := own(); got != `{"enabled":true,"allow":[{"ipv4":"10.0.0.0/8"}]}` {
		t.Fatalf("after widening: %s", got)
	}

	// Back to the outpost's.
	if code, _, out := writer.post(path, action, url.Values{"follow": {"1"}}); code != http.StatusSeeOther {
		t.Fatalf("follow: %d\n%s", code, out)
	}
	if got, isOwn := own(); isOwn || got != policyOf(t, &outer) {
		t.Fatalf("after following: %s own=%v", got, isOwn)
	}

	// An ended session's policy no longer applies: no form, and a post
	// shows the API's refusal.
	if _, err := srv.Client.Sessions.Terminate(ctx, id, "done"); err != nil {
		t.Fatal(err)
	}
	if body := writer.page(path); strings.Contains(body, `id="policy-form"`) {
		t.Fatal("an ended session is offered the form")
	}
	csrf := csrfValue.FindStringSubmatch(writer.page(path))
	f := rows(true, [3]string{"hostname", "api.example.test", ""})
	f.Set("csrf", html.UnescapeString(csrf[1]))
	if code, _, out := writer.do("POST", action, f); code != http.StatusConflict || !strings.Contains(out, "has ended") {
		t.Fatalf("post on an ended session: %d\n%s", code, out)
	}
}
