package web

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestDevicePageSignInAndBack: a signed-out visitor of a device link is
// asked to sign in and brought back to the link; the sign-in form's next
// field goes nowhere but the device page. Signed in, the page without a
// code asks for one.
func TestDevicePageSignInAndBack(t *testing.T) {
	h, err := New(Options{API: fakeAPI()})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/device?user_code=BCDF-GHJK", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.Contains(body, "Sign in to approve a device login") ||
		!strings.Contains(body, `name="next" value="/ui/device?user_code=BCDF-GHJK"`) {
		t.Fatalf("signed-out device link: %d\n%s", rec.Code, body)
	}
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
	csrf := h.csrf(get)
	for next, want := range map[string]string{
		"/ui/device?user_code=BCDF-GHJK":      "/ui/device?user_code=BCDF-GHJK",
		"/ui/device":                          "/ui/device",
		"":                                    "/ui/sessions",
		"/ui/devices":                         "/ui/sessions",
		"https://elsewhere.example/ui/device": "/ui/sessions",
		"//elsewhere.example/ui/device":       "/ui/sessions",
		"/ui/tokens":                          "/ui/sessions",
	} {
		form := url.Values{"token": {"good"}, "csrf": {csrf}, "next": {next}}
		r := httptest.NewRequest("POST", "/ui/signin", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.AddCookie(signin)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != want {
			t.Errorf("sign in with next %q: %d to %q, want %q", next, w.Code, w.Header().Get("Location"), want)
		}
	}

	r := httptest.NewRequest("GET", "/ui/device", nil)
	r.AddCookie(&http.Cookie{Name: CookieName, Value: "good"})
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if body := rec.Body.String(); rec.Code != http.StatusOK || !strings.Contains(body, `id="user_code"`) || strings.Contains(body, `id="device-approve"`) {
		t.Fatalf("device page without a code: %d\n%s", rec.Code, body)
	}
}
