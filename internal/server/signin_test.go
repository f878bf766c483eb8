package server

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// signinForm is what a browser holds after loading the sign-in page: its
// sign-in cookie and the form's CSRF value.
type signinForm struct {
	cookie *http.Cookie
	csrf   string
}

// loadSignin loads the sign-in page as a new visitor would.
func (ts *testServer) loadSignin() signinForm {
	ts.t.Helper()
	resp, err := http.Get(ts.url + "/ui/signin")
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := csrfField.FindStringSubmatch(string(b))
	if resp.StatusCode != 200 || m == nil {
		ts.t.Fatalf("sign-in page: %d without a CSRF value: %s", resp.StatusCode, b)
	}
	var f signinForm
	f.csrf = m[1]
	for _, c := range resp.Cookies() {
		if c.Name == "outpost_signin" {
			f.cookie = c
		}
	}
	if f.cookie == nil || !f.cookie.HttpOnly || f.cookie.SameSite != http.SameSiteStrictMode {
		ts.t.Fatalf("the sign-in page set no HttpOnly, SameSite=Strict sign-in cookie: %v", resp.Header["Set-Cookie"])
	}
	return f
}

// postSignin posts the sign-in form with token, the given cookie (none when
// nil), CSRF value and extra headers; it returns the status and the token
// cookie the answer set, if any.
func (ts *testServer) postSignin(token string, cookie *http.Cookie, csrf string, header ...string) (int, string) {
	ts.t.Helper()
	form := url.Values{"token": {token}, "csrf": {csrf}}
	req, err := http.NewRequest("POST", ts.url+"/ui/signin", strings.NewReader(form.Encode()))
	if err != nil {
		ts.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if cookie != nil {
		req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	for _, c := range resp.Cookies() {
		if c.Name == "outpost_token" && c.Value != "" {
			return resp.StatusCode, c.Value
		}
	}
	return resp.StatusCode, ""
}

// TestSigninRefusesCrossSitePost: another site cannot sign a visitor in
// with its own token (login CSRF). The sign-in form's CSRF value is bound
// to a random cookie of each visitor, so a value the attacker got from the
// page is worthless without that visitor's cookie, and a post a browser
// marks as coming from another site is refused whatever it carries. None of
// the refused posts sets the token cookie; the normal sign-in still does.
func TestSigninRefusesCrossSitePost(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	attacker := ts.admin // a valid token of the attacker's
	mine, theirs := ts.loadSignin(), ts.loadSignin()
	if mine.csrf == theirs.csrf || mine.cookie.Value == theirs.cookie.Value {
		t.Fatal("two visitors got the same sign-in CSRF value or cookie")
	}
	self := ts.url // the origin the browser shows for this site
	cases := []struct {
		name   string
		cookie *http.Cookie
		csrf   string
		header []string
	}{
		{"no cookie, the attacker's CSRF value", nil, theirs.csrf, nil},
		{"no cookie, no CSRF value", nil, "", nil},
		{"the victim's cookie, the attacker's CSRF value", mine.cookie, theirs.csrf, nil},
		{"the attacker's cookie, the victim's CSRF value", theirs.cookie, mine.csrf, nil},
		{"a cookie of the wrong shape", &http.Cookie{Name: "outpost_signin", Value: "x"}, mine.csrf, nil},
		{"Origin of another site", mine.cookie, mine.csrf, []string{"Origin", "https://attacker.example"}},
		{"Origin null", mine.cookie, mine.csrf, []string{"Origin", "null"}},
		{"Sec-Fetch-Site cross-site", mine.cookie, mine.csrf, []string{"Sec-Fetch-Site", "cross-site"}},
		{"Sec-Fetch-Site same-site", mine.cookie, mine.csrf, []string{"Sec-Fetch-Site", "same-site"}},
	}
	for _, c := range cases {
		status, cookie := ts.postSignin(attacker, c.cookie, c.csrf, c.header...)
		if status != http.StatusForbidden || cookie != "" {
			t.Errorf("%s: %d, token cookie %q; want 403 and none", c.name, status, cookie)
		}
	}
	// The visitor's own form, from this site's page, signs in.
	status, cookie := ts.postSignin(attacker, mine.cookie, mine.csrf, "Origin", self, "Sec-Fetch-Site", "same-origin")
	if status != http.StatusSeeOther || cookie != attacker {
		t.Fatalf("sign in from the page: %d, token cookie %q", status, cookie)
	}
	// A client that sends neither header (not a browser) signs in too.
	if status, cookie := ts.postSignin(attacker, theirs.cookie, theirs.csrf); status != http.StatusSeeOther || cookie != attacker {
		t.Fatalf("sign in without Origin: %d, token cookie %q", status, cookie)
	}
}
