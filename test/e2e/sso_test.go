//go:build linux

package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/text/language"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// idpUsers is the user store of the test's OpenID Connect provider: people
// with passwords and groups, who can be disabled while signed in.
type idpUsers struct {
	mu       sync.Mutex // guards the following
	users    map[string]*storage.User
	groups   map[string][]string
	disabled map[string]bool
}

func (u *idpUsers) GetUserByID(id string) *storage.User {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.disabled[id] {
		return nil
	}
	return u.users[id]
}

func (u *idpUsers) GetUserByUsername(name string) *storage.User {
	u.mu.Lock()
	defer u.mu.Unlock()
	for id, usr := range u.users {
		if usr.Username == name && !u.disabled[id] {
			return usr
		}
	}
	return nil
}

func (u *idpUsers) ExampleClientID() string { return "service" }

func (u *idpUsers) disable(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.disabled[id] = true
}

func (u *idpUsers) groupsOf(id string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.groups[id]
}

// idpStorage is zitadel/oidc's example storage with a groups claim on the
// userinfo.
type idpStorage struct {
	*storage.Storage
	users *idpUsers
}

func (s idpStorage) SetUserinfoFromToken(ctx context.Context, ui *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, ui, tokenID, subject, origin); err != nil {
		return err
	}
	ui.AppendClaims("groups", s.users.groupsOf(ui.Subject))
	return nil
}

// startIdP serves an OpenID Connect provider, built on zitadel/oidc's op
// package, on loopback, with a web client whose redirect URL is redirect.
func startIdP(t *testing.T, redirect string) (issuer string, users *idpUsers) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer = "http://" + ln.Addr().String()
	users = &idpUsers{users: map[string]*storage.User{}, groups: map[string][]string{}, disabled: map[string]bool{}}
	for _, u := range []struct {
		id, name string
		groups   []string
	}{
		{"ann", "ann", []string{"eng"}},
		{"vic", "vic", []string{"readers"}},
	} {
		users.users[u.id] = &storage.User{ID: u.id, Username: u.name, Password: "pw-" + u.name, FirstName: u.name, LastName: "Test",
			Email: u.name + "@example.com", EmailVerified: true, PreferredLanguage: language.English}
		users.groups[u.id] = u.groups
	}
	storage.RegisterClients(storage.WebClient("outpost-e2e", "client-secret", redirect))
	router := exampleop.SetupServer(issuer, idpStorage{Storage: storage.NewStorage(users), users: users}, nil, false)
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return issuer, users
}

// TestSingleSignOn signs people in through a real OpenID Connect provider in
// headless Chromium: groups map to roles, the cookie has the flags it
// should, sign-out ends the sign-in, a user disabled at the provider loses
// access within the recheck bound, and a forged state or a replayed code is
// refused.
func TestSingleSignOn(t *testing.T) {
	t.Parallel()
	c := &cluster{t: t, admin: adminToken, dataDir: t.TempDir(), addr: freeAddr(t)}
	c.url = "http://" + c.addr
	issuer, users := startIdP(t, c.url+"/ui/auth/callback")
	const recheck = 2 * time.Second
	c.extra = []string{"--oidc-issuer", issuer, "--oidc-client-id", "outpost-e2e", "--oidc-name", "Test IdP",
		"--oidc-group-role", "eng=member", "--oidc-group-role", "readers=viewer", "--oidc-allowed-domain", "example.com",
		"--oidc-recheck-interval", recheck.String()}
	c.srvEnv = []string{"OUTPOST_OIDC_CLIENT_SECRET=client-secret"}
	c.startServer()
	if code := c.api("POST", "/v1/outposts", c.admin, api.CreateOutpostRequest{Name: "home", Platform: "linux"}, nil); code != 201 {
		t.Fatalf("create outpost: %d", code)
	}
	newSession := map[string]any{"outpost": "home", "agent": map[string]any{"kind": "script"}}

	ctx := browser(t)
	shots := screenshotDir(t)
	ssoSignIn := func(user string) string {
		t.Helper()
		do(t, ctx, "sign in as "+user,
			chromedp.Navigate(c.url+"/ui/signin"),
			chromedp.WaitVisible(chromedp.CSS("#sso-signin")),
			chromedp.Click(chromedp.CSS("#sso-signin")),
			chromedp.WaitVisible(chromedp.CSS("#username")),
			chromedp.SendKeys(chromedp.CSS("#username"), user),
			chromedp.SendKeys(chromedp.CSS("#password"), "pw-"+user),
			chromedp.Submit(chromedp.CSS("#password")),
			chromedp.WaitVisible(chromedp.CSS("#f-q")),
		)
		res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{c.url}})
		if err != nil {
			t.Fatal(err)
		}
		for _, ck := range res.Cookies {
			if ck.Name == "outpost_token" {
				if !ck.HTTPOnly || ck.SameSite != network.CookieSameSiteLax || ck.Expires <= 0 {
					t.Errorf("sign-in cookie: httponly %v, samesite %s, expires %v; want HttpOnly, Lax, bounded", ck.HTTPOnly, ck.SameSite, ck.Expires)
				}
				return ck.Value
			}
		}
		t.Fatalf("no sign-in cookie after signing in as %s", user)
		return ""
	}

	// ann is in eng: member. She creates sessions, not tokens.
	ann := ssoSignIn("ann")
	shot(t, ctx, shots, "signed-in-ann")
	var me api.WhoAmI
	if code := c.api("GET", "/v1/whoami", ann, nil, &me); code != 200 || me.UserID == "" {
		t.Fatalf("whoami of ann's sign-in: %d %+v", code, me)
	}
	if code := c.api("POST", "/v1/sessions", ann, newSession, nil); code != 201 {
		t.Errorf("member creates a session: %d, want 201", code)
	}
	if code := c.api("POST", "/v1/tokens", ann, api.CreateTokenRequest{Role: api.RoleViewer}, nil); code != 403 {
		t.Errorf("member creates a token: %d, want 403", code)
	}
	do(t, ctx, "sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#sso-signin")))
	if code := c.api("GET", "/v1/sessions", ann, nil, nil); code != 401 {
		t.Errorf("ann's sign-in after sign-out: %d, want 401", code)
	}

	// vic is in readers: viewer. He reads sessions and creates none.
	vic := ssoSignIn("vic")
	if code := c.api("GET", "/v1/sessions", vic, nil, nil); code != 200 {
		t.Errorf("viewer reads sessions: %d, want 200", code)
	}
	if code := c.api("POST", "/v1/sessions", vic, newSession, nil); code != 403 {
		t.Errorf("viewer creates a session: %d, want 403", code)
	}
	var ul api.UserList
	if code := c.api("GET", "/v1/users", c.admin, nil, &ul); code != 200 || len(ul.Items) != 2 {
		t.Fatalf("users: %d %+v", code, ul)
	}

	// Disabled at the provider: locked out within the recheck bound
	// (one interval to be due, the check itself, and slack for the
	// machine).
	users.disable("vic")
	disabled := time.Now()
	waitfor.Within(t, 3*recheck+5*time.Second, "vic locked out", func() bool {
		return c.api("GET", "/v1/sessions", vic, nil, nil) == 401
	})
	t.Logf("disabled user locked out after %s (recheck interval %s)", time.Since(disabled).Round(100*time.Millisecond), recheck)
	do(t, ctx, "UI after lock-out", chromedp.Navigate(c.url+"/ui/sessions"), chromedp.WaitVisible(chromedp.CSS("#sso-signin")))

	// A forged state and a replayed code get no sign-in.
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), c.url+"/ui/signin") || strings.HasPrefix(req.URL.String(), c.url+"/ui/sessions") {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	get := func(u string) *http.Response {
		t.Helper()
		resp, err := hc.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	signedInBy := func(resp *http.Response) bool {
		for _, ck := range resp.Cookies() {
			if ck.Name == "outpost_token" && ck.Value != "" {
				return true
			}
		}
		return false
	}
	// The login page of the provider, reached from /ui/auth/login.
	loginPage := get(c.url + "/ui/auth/login")
	if loginPage.StatusCode != 200 || !strings.HasPrefix(loginPage.Request.URL.String(), issuer) {
		t.Fatalf("login: %d at %s, want the provider's login page", loginPage.StatusCode, loginPage.Request.URL)
	}
	forged := get(c.url + "/ui/auth/callback?state=forged&code=whatever")
	if loc := forged.Header.Get("Location"); forged.StatusCode != 303 || !strings.Contains(loc, "sso=expired") || signedInBy(forged) {
		t.Errorf("forged state: %d to %q, want 303 to the sign-in page and no sign-in", forged.StatusCode, loc)
	}
	// The forged callback used up the flow: start again, and sign in.
	loginPage = get(c.url + "/ui/auth/login")
	authReq := loginPage.Request.URL.Query().Get("authRequestID")
	u, _ := url.Parse(c.url)
	flowCookies := jar.Cookies(u)
	resp, err := hc.PostForm(issuer+"/login/username", url.Values{"id": {authReq}, "username": {"ann"}, "password": {"pw-ann"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 303 || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/sessions") || !signedInBy(resp) {
		t.Fatalf("sign-in over HTTP: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	callback := resp.Request.URL.String()
	replayed := get(callback)
	if loc := replayed.Header.Get("Location"); replayed.StatusCode != 303 || !strings.Contains(loc, "/ui/signin?sso=") || signedInBy(replayed) {
		t.Errorf("replayed callback: %d to %q, want refused", replayed.StatusCode, loc)
	}
	// Replayed with the flow cookie too: the provider refuses the used code.
	req, _ := http.NewRequest("GET", callback, nil)
	for _, ck := range flowCookies {
		req.AddCookie(ck)
	}
	again, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	again.Body.Close()
	if loc := again.Header.Get("Location"); again.StatusCode != 303 || !strings.Contains(loc, "sso=failed") || signedInBy(again) {
		t.Errorf("replayed code with its flow cookie: %d to %q, want refused by the provider", again.StatusCode, loc)
	}

	// The audit log names the person for each sign-in through the
	// provider, and has the refusals, by an anonymous caller.
	var logins, refused api.AuditLogList
	if code := c.api("GET", "/v1/audit-logs?action=login&first=200", c.admin, nil, &logins); code != 200 {
		t.Fatalf("audit logins: %d", code)
	}
	byAnn := 0
	for _, e := range logins.Items {
		if e.Actor.Kind == "user" && strings.Contains(e.Actor.Name, "ann") {
			byAnn++
		}
	}
	if byAnn < 1 {
		t.Errorf("%d login entries by ann as a user, want at least 1: %+v", byAnn, logins.Items)
	}
	if code := c.api("GET", "/v1/audit-logs?action=login.failed&first=200", c.admin, nil, &refused); code != 200 {
		t.Fatalf("audit refusals: %d", code)
	}
	if len(refused.Items) < 3 || refused.Items[0].Actor.Kind != "anonymous" || !strings.Contains(string(refused.Items[0].Data), "single sign-on") {
		t.Errorf("login.failed entries: %+v, want the forged and replayed callbacks", refused.Items)
	}
}
