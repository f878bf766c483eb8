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

// TestNetworkRequestButtons: a running session's page offers Grant and
// Deny for each request the API lists as waiting (one older than the
// page's events too; not one answered since); each posts the answer, with its scope or reason, to the API
// and comes back to the page; an API refusal shows on the page.
func TestNetworkRequestButtons(t *testing.T) {
	var mu sync.Mutex
	type post struct{ path, body string }
	var posted []post
	fake := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/3/grant"):
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"error":{"code":"forbidden","message":"It needs network.admin."}}`)
		case r.Method == "POST":
			b, _ := io.ReadAll(r.Body)
			posted = append(posted, post{r.URL.Path, string(b)})
			io.WriteString(w, `{}`)
		case r.URL.Path == "/v1/sessions/ses_1":
			var s api.Session
			s.Metadata.SessionID = "ses_1"
			s.Status.Status = api.StatusRunning
			_ = json.NewEncoder(w).Encode(s)
		case r.URL.Path == "/v1/sessions/ses_1/network-requests":
			// Request 9 is older than the events the page loads.
			_ = json.NewEncoder(w).Encode(api.NetworkRequestList{Items: []api.NetworkRequest{
				{ID: "3", State: api.NetworkRequestPending, Domains: []string{"pkg.example.test", "*.cdn.test"}, Reason: "go mod download"},
				{ID: "9", State: api.NetworkRequestPending, Domains: []string{"early.test"}, Reason: "from long ago"},
			}})
		case r.URL.Path == "/v1/sessions/ses_1/events":
			_ = json.NewEncoder(w).Encode(api.EventList{Items: []api.Event{
				{Seq: 1, Type: api.EventNetworkRequest, CallSeq: 1, NetworkRequest: &api.NetworkRequest{ID: "1", State: api.NetworkRequestPending, Domains: []string{"old.test"}, Reason: "r"}},
				{Seq: 2, Type: api.EventNetworkRequest, CallSeq: 1, NetworkRequest: &api.NetworkRequest{ID: "1", State: api.NetworkRequestDenied}},
				{Seq: 3, Type: api.EventNetworkRequest, CallSeq: 3, NetworkRequest: &api.NetworkRequest{ID: "3", State: api.NetworkRequestPending, Domains: []string{"pkg.example.test", "*.cdn.test"}, Reason: "go mod download"}},
			}})
		default:
			io.WriteString(w, `{"items":[]}`)
		}
	})
	h, err := New(Options{API: fake, PublicURL: "https://outpost.example"})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/ui/sessions/ses_1", nil)
	r.AddCookie(&http.Cookie{Name: CookieName, Value: "good"})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	body := w.Body.String()
	if w.Code != 200 || !strings.Contains(body, `id="grant-3"`) || !strings.Contains(body, `id="deny-3"`) ||
		!strings.Contains(body, "pkg.example.test, *.cdn.test") || !strings.Contains(body, "go mod download") {
		t.Fatalf("session page (%d) lacks request 3's buttons:\n%s", w.Code, body)
	}
	if strings.Contains(body, `id="grant-1"`) {
		t.Fatal("an answered request has buttons")
	}
	if !strings.Contains(body, `id="grant-9"`) || !strings.Contains(body, "early.test") {
		t.Fatal("a request older than the page's events has no buttons")
	}
	if !strings.Contains(body, `network request</span> 3 pending`) {
		t.Error("the transcript lacks the request's line")
	}

	csrf := h.csrf(r)
	send := func(path string, form url.Values) *httptest.ResponseRecorder {
		form.Set("csrf", csrf)
		r := httptest.NewRequest("POST", path, strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.AddCookie(&http.Cookie{Name: CookieName, Value: "good"})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := send("/ui/sessions/ses_1/network-requests/3/deny", url.Values{"reason": {" use the mirror "}}); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/sessions/ses_1" {
		t.Fatalf("deny: %d %s", w.Code, w.Header().Get("Location"))
	}
	if w := send("/ui/sessions/ses_1/network-requests/3/grant", url.Values{"scope": {"outpost"}}); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "It needs network.admin.") {
		t.Fatalf("refused grant: %d %s", w.Code, w.Body)
	}
	if w := send("/ui/sessions/ses_1/network-requests/4/grant", url.Values{"scope": {"session"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("grant: %d", w.Code)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []post{
		{"/v1/sessions/ses_1/network-requests/3/deny", `{"reason":"use the mirror"}`},
		{"/v1/sessions/ses_1/network-requests/4/grant", `{"scope":"session"}`},
	}
	if len(posted) != len(want) {
		t.Fatalf("posted %+v", posted)
	}
	for i := range want {
		if posted[i].path != want[i].path || strings.TrimSpace(posted[i].body) != want[i].body {
			t.Errorf("post %d: %+v, want %+v", i, posted[i], want[i])
		}
	}
}
