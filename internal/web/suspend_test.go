package web

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestSuspendResumeButtons: a running session's page offers Suspend, a
// suspended one's Resume, neither an ended one's; each button posts the
// session's suspend or resume to the API and comes back to the page.
func TestSuspendResumeButtons(t *testing.T) {
	var mu sync.Mutex
	status := api.StatusRunning
	var posted []string
	fake := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == "POST":
			posted = append(posted, r.URL.Path)
			io.WriteString(w, `{}`)
		case r.URL.Path == "/v1/sessions/ses_1":
			var s api.Session
			s.Metadata.SessionID = "ses_1"
			s.Status.Status = status
			_ = json.NewEncoder(w).Encode(s)
		default:
			io.WriteString(w, `{"items":[]}`)
		}
	})
	h, err := New(Options{API: fake, PublicURL: "https://outpost.example"})
	if err != nil {
		t.Fatal(err)
	}
	page := func() string {
		r := httptest.NewRequest("GET", "/ui/sessions/ses_1", nil)
		r.AddCookie(&http.Cookie{Name: CookieName, Value: "good"})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 {
			t.Fatalf("session page: %d %s", w.Code, w.Body)
		}
		return w.Body.String()
	}
	for _, tc := range []struct {
		status        string
		suspend, resu bool
	}{
		{api.StatusRunning, true, false},
		{api.StatusSuspended, false, true},
		{api.StatusExit, false, false},
	} {
		mu.Lock()
		status = tc.status
		mu.Unlock()
		body := page()
		if got := strings.Contains(body, `id="suspend"`); got != tc.suspend {
			t.Errorf("%s session: suspend button %v, want %v", tc.status, got, tc.suspend)
		}
		if got := strings.Contains(body, `id="resume"`); got != tc.resu {
			t.Errorf("%s session: resume button %v, want %v", tc.status, got, tc.resu)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.AddCookie(&http.Cookie{Name: CookieName, Value: "good"})
	csrf := h.csrf(r)
	for _, action := range []string{"suspend", "resume"} {
		form := url.Values{"csrf": {csrf}}
		r := httptest.NewRequest("POST", "/ui/sessions/ses_1/"+action, strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.AddCookie(&http.Cookie{Name: CookieName, Value: "good"})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/sessions/ses_1" {
			t.Fatalf("%s: %d %s", action, w.Code, w.Header().Get("Location"))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(posted, " ") != "/v1/sessions/ses_1/suspend /v1/sessions/ses_1/resume" {
		t.Fatalf("posted %v", posted)
	}
}
