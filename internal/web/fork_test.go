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

// TestSessionPageFamily: a fork's page links the session it was forked
// from, and a session's page lists its forks as the API gives them
// (GET /v1/sessions?forked_from=ID).
func TestSessionPageFamily(t *testing.T) {
	var mu sync.Mutex
	var forkQueries []string
	var forked []api.ForkRequest
	fake := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/sessions/ses_mid/fork":
			var req api.ForkRequest
			_ = json.NewDecoder(r.Body).Decode(&req)
			mu.Lock()
			forked = append(forked, req)
			mu.Unlock()
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"items":[]}`)
		case r.URL.Path == "/v1/sessions/ses_mid":
			var s api.Session
			s.Metadata.SessionID = "ses_mid"
			s.Status.Status = api.StatusRunning
			s.Spec.ForkedFrom = "ses_root"
			_ = json.NewEncoder(w).Encode(s)
		case r.URL.Path == "/v1/sessions" && r.URL.Query().Get("forked_from") != "":
			mu.Lock()
			forkQueries = append(forkQueries, r.URL.Query().Get("forked_from"))
			mu.Unlock()
			var leaf api.Session
			leaf.Metadata.SessionID = "ses_leaf"
			leaf.Status.Status = api.StatusSuspended
			_ = json.NewEncoder(w).Encode(api.SessionList{Items: []api.Session{leaf}, Total: 1})
		default:
			io.WriteString(w, `{"items":[]}`)
		}
	})
	h, err := New(Options{API: fake, PublicURL: "https://outpost.example"})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/ui/sessions/ses_mid", nil)
	r.AddCookie(&http.Cookie{Name: CookieName, Value: "good"})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 {
		t.Fatalf("session page: %d %s", w.Code, w.Body)
	}
	body := w.Body.String()
	for _, want := range []string{
		`<dt>Forked from</dt><dd class="mono" id="forked-from"><a href="/ui/sessions/ses_root">ses_root</a>`,
		`id="forks"><a href="/ui/sessions/ses_leaf">ses_leaf</a> (suspended)`,
		`action="/ui/sessions/ses_mid/fork"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the session page lacks %s", want)
		}
	}
	mu.Lock()
	if len(forkQueries) != 1 || forkQueries[0] != "ses_mid" {
		t.Errorf("the page asked for the forks of %v, want [ses_mid]", forkQueries)
	}
	mu.Unlock()

	// The Fork form posts the fork with its count and instruction.
	csrf := h.csrf(r)
	form := url.Values{"csrf": {csrf}, "count": {"3"}, "prompt": {" Try B. "}}
	post := httptest.NewRequest("POST", "/ui/sessions/ses_mid/fork", strings.NewReader(form.Encode()))
	post.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	post.AddCookie(&http.Cookie{Name: CookieName, Value: "good"})
	w = httptest.NewRecorder()
	h.ServeHTTP(w, post)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/sessions/ses_mid" {
		t.Errorf("fork form: %d to %q", w.Code, w.Header().Get("Location"))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(forked) != 1 || forked[0] != (api.ForkRequest{Count: 3, Prompt: "Try B."}) {
		t.Errorf("the API got the forks %+v", forked)
	}
}
