package web

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestSessionPageStatusNotOlderThanItsEvents: a status change that commits
// while the session page is being put together (a call held for approval
// between the page's reads) shows in the page's status, or follows live
// after the page's last event; the page never shows the change among its
// events with the status from before it, which no live event would then
// correct.
func TestSessionPageStatusNotOlderThanItsEvents(t *testing.T) {
	var mu sync.Mutex
	held := false // the hold commits right after the page's first read of the two
	status := api.Event{Seq: 1, Type: api.EventStatus, Status: api.StatusRunning, StatusDetail: api.DetailWorking}
	hold := api.Event{Seq: 2, Type: api.EventStatus, Status: api.StatusRunning, StatusDetail: api.DetailWaitingForApproval}
	fake := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/v1/sessions/ses_1":
			var s api.Session
			s.Metadata.SessionID = "ses_1"
			s.Status.Status, s.Status.StatusDetail = api.StatusRunning, api.DetailWorking
			if held {
				s.Status.StatusDetail = api.DetailWaitingForApproval
			}
			_ = json.NewEncoder(w).Encode(s)
			held = true
		case "/v1/sessions/ses_1/events":
			evs := []api.Event{status}
			if held {
				evs = append(evs, hold)
			}
			_ = json.NewEncoder(w).Encode(api.EventList{Items: evs})
			held = true
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
	if w.Code != http.StatusOK {
		t.Fatalf("session page: %d\n%s", w.Code, body)
	}
	m := regexp.MustCompile(`<span id="status"[^>]*>([^<]*)</span>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the page has no status:\n%s", body)
	}
	waiting := m[1] == "Waiting for a person&#39;s approval"
	followsFrom1 := strings.Contains(body, `data-after="1"`)
	followsFrom2 := strings.Contains(body, `data-after="2"`)
	if followsFrom2 && !waiting {
		t.Fatalf("the page lists the hold's status event but shows the status from before it (%q), and follows live after it", m[1])
	}
	if !followsFrom1 && !followsFrom2 {
		t.Fatalf("the page does not follow live from its last event:\n%s", body)
	}
}
