package web

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

func TestParseSecrets(t *testing.T) {
	m, err := parseSecrets("A=1\r\n\n# c\nB = x=y\n")
	if err != nil || m["A"] != "1" || m["B"] != " x=y" || len(m) != 2 {
		t.Fatalf("got %v, %v", m, err)
	}
	if _, err := parseSecrets("nokey"); err == nil {
		t.Fatal("want an error for a line without =")
	}
}

// fakeAPI accepts the token "good" and refuses everything else.
func fakeAPI() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer good" {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":{"code":"unauthorized","message":"Bad token."}}`)
			return
		}
		io.WriteString(w, `{"items":[]}`)
	})
}

func TestSignInCookieAndCSRF(t *testing.T) {
	h, err := New(Options{API: fakeAPI(), PublicURL: "https://outpost.example"})
	if err != nil {
		t.Fatal(err)
	}
	// The sign-in page gives each visitor a sign-in cookie of its own,
	// with the __Host- prefix over HTTPS, and a CSRF value bound to it.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/signin", nil))
	var signin *http.Cookie
	for _, c := range rec.Result().Cookies() {
		if c.Name == "__Host-outpost_signin" {
			signin = c
		}
	}
	if signin == nil || !signin.Secure || !signin.HttpOnly || signin.Path != "/" || signin.SameSite != http.SameSiteStrictMode {
		t.Fatalf("sign-in cookie: %v", rec.Header()["Set-Cookie"])
	}
	post := func(form url.Values, cookies ...*http.Cookie) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/ui/signin", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for _, c := range cookies {
			r.AddCookie(c)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := post(url.Values{"token": {"good"}}, signin); w.Code != http.StatusForbidden {
		t.Fatalf("sign in without csrf: %d, want 403", w.Code)
	}
	get := httptest.NewRequest("GET", "/", nil)
	get.AddCookie(signin)
	csrf := h.csrf(get)
	if w := post(url.Values{"token": {"good"}, "csrf": {csrf}}); w.Code != http.StatusForbidden {
		t.Fatalf("sign in without the sign-in cookie: %d, want 403", w.Code)
	}
	if w := post(url.Values{"token": {"bad"}, "csrf": {csrf}}, signin); w.Code != http.StatusUnauthorized {
		t.Fatalf("sign in with a bad token: %d, want 401", w.Code)
	} else if body := w.Body.String(); !strings.Contains(body, `id="error">Bad token.</p>`) {
		t.Errorf("a bad token's error is not the server's sentence alone:\n%s", body)
	}
	w := post(url.Values{"token": {"good"}, "csrf": {csrf}}, signin)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("sign in: %d %s", w.Code, w.Body)
	}
	set := strings.Join(w.Header()["Set-Cookie"], "\n")
	for _, want := range []string{"outpost_token=good", "HttpOnly", "SameSite=Strict", "Secure", "__Host-outpost_signin=; Path=/; Max-Age=0"} {
		if !strings.Contains(set, want) {
			t.Errorf("cookies %q lack %s", set, want)
		}
	}
	// The signed-out form token is not valid once signed in.
	if w := post(url.Values{"csrf": {csrf}}, &http.Cookie{Name: CookieName, Value: "good"}, signin); w.Code != http.StatusForbidden {
		t.Fatalf("post with another session's csrf: %d, want 403", w.Code)
	}
	r := httptest.NewRequest("GET", "/ui/outposts", nil)
	r.AddCookie(&http.Cookie{Name: CookieName, Value: "good"})
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "No outposts yet.") {
		t.Fatalf("outposts page: %d %s", rec.Code, rec.Body)
	}
}

// TestFormKeySharedByReplicas: two handlers given one form key (replicas
// on one database behind a balancer) accept each other's forms; handlers
// with keys of their own do not.
func TestFormKeySharedByReplicas(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	a, err := New(Options{API: fakeAPI(), FormKey: key})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{API: fakeAPI(), FormKey: key})
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(Options{API: fakeAPI()})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/signin", nil))
	var signin *http.Cookie
	for _, c := range rec.Result().Cookies() {
		if c.Name == signinCookieName {
			signin = c
		}
	}
	if signin == nil {
		t.Fatalf("no sign-in cookie: %v", rec.Header()["Set-Cookie"])
	}
	get := httptest.NewRequest("GET", "/", nil)
	get.AddCookie(signin)
	csrf := a.csrf(get)
	for _, tc := range []struct {
		name string
		h    *Handler
		want int
	}{{"another replica", b, http.StatusSeeOther}, {"a server with its own key", other, http.StatusForbidden}} {
		r := httptest.NewRequest("POST", "/ui/signin", strings.NewReader(url.Values{"token": {"good"}, "csrf": {csrf}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.AddCookie(signin)
		w := httptest.NewRecorder()
		tc.h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s: sign in with the first one's form: %d, want %d", tc.name, w.Code, tc.want)
		}
	}
}

func TestDiffLines(t *testing.T) {
	t.Parallel()
	raw := json.RawMessage(`{"line":3,"diff":"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n ctx\n-<b>old</b>\n+new\n"}`)
	got := diffLines(raw)
	want := []diffLine{{"meta", "--- a/x"}, {"meta", "+++ b/x"}, {"hunk", "@@ -1,2 +1,2 @@"}, {"", " ctx"}, {"del", "-<b>old</b>"}, {"add", "+new"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("diffLines = %+v", got)
	}
	two := splitDiff("diff --git a/x b/x\nindex 1..2\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n---removed\n+++added\ndiff --git a/y b/y\n--- a/y\n+++ b/y\n@@ -0,0 +1 @@\n+y\n")
	var classes []string
	for _, l := range two {
		classes = append(classes, l.Class)
	}
	if got := strings.Join(classes, " "); got != "meta meta meta meta hunk del add meta meta meta hunk add" {
		t.Errorf("classes of a two-file diff: %s", got)
	}
	if diffLines(json.RawMessage(`{"entries":[]}`)) != nil || diffLines(nil) != nil {
		t.Fatal("a value without a diff must render no diff")
	}
}
