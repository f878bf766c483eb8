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

// TestApprovalButtons: a running session's page offers Approve and Deny
// for each call the API lists as held (with its arguments, rule and what
// a timeout does); each posts the decision, with its reason, to the API
// and comes back to the call; an API refusal (decided already) shows on
// the page; the transcript says each approval event in words.
func TestApprovalButtons(t *testing.T) {
	var mu sync.Mutex
	type post struct{ path, body string }
	var posted []post
	var listQuery string
	fake := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/calls/5/approve"):
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":{"code":"conflict","message":"Call 5 was decided already (timed_out)."}}`)
		case r.Method == "POST":
			b, _ := io.ReadAll(r.Body)
			posted = append(posted, post{r.URL.Path, string(b)})
			io.WriteString(w, `{}`)
		case r.URL.Path == "/v1/sessions/ses_1":
			var s api.Session
			s.Metadata.SessionID = "ses_1"
			s.Status.Status = api.StatusRunning
			s.Status.StatusDetail = api.DetailWaitingForApproval
			_ = json.NewEncoder(w).Encode(s)
		case r.URL.Path == "/v1/sessions/ses_1/approvals":
			listQuery = r.URL.RawQuery
			_ = json.NewEncoder(w).Encode(api.ApprovalList{Items: []api.Approval{
				{CallSeq: 3, Tool: "exec", Args: json.RawMessage(`{"command":"git push origin main"}`), State: api.ApprovalPending,
					Rule: "outpost[0]", RuleReason: "pushes to main need a person", OnTimeout: api.ApprovalDeny, Deadline: 1_800_000_000_000},
			}})
		case r.URL.Path == "/v1/sessions/ses_1/events":
			_ = json.NewEncoder(w).Encode(api.EventList{Items: []api.Event{
				{Seq: 1, Type: api.EventApproval, CallSeq: 2, Tool: "exec", Approval: &api.Approval{CallSeq: 2, Tool: "exec", State: api.ApprovalDenied, By: "rule", Rule: "session[1]", Reason: "never rm -rf /"}},
				{Seq: 2, Type: api.EventApproval, CallSeq: 3, Tool: "exec", Approval: &api.Approval{CallSeq: 3, Tool: "exec", State: api.ApprovalPending, Rule: "outpost[0]", RuleReason: "pushes to main need a person"}},
				{Seq: 3, Type: api.EventApproval, CallSeq: 1, Tool: "exec", Approval: &api.Approval{CallSeq: 1, Tool: "exec", State: api.ApprovalTimedOut, OnTimeout: api.ApprovalAllow}},
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
	if w.Code != 200 || !strings.Contains(body, `id="approve-3"`) || !strings.Contains(body, `id="deny-call-3"`) {
		t.Fatalf("session page (%d) lacks call 3's buttons:\n%s", w.Code, body)
	}
	if listQuery != "state=pending" {
		t.Errorf("the page listed approvals with %q, want state=pending", listQuery)
	}
	for _, want := range []string{
		"Waiting for a person&#39;s approval",
		"pushes to main need a person",
		"git push origin main",
		"2027-01-15 08:00:00 UTC, it is denied",
		`approval</span> #2 exec denied by rule session[1]: never rm -rf /`,
		`approval</span> #3 exec waits for approval (rule outpost[0]: pushes to main need a person)`,
		`approval</span> #1 exec timed out, so allowed`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the session page lacks %q", want)
		}
	}
	if !strings.Contains(body, `<span class="k failed">approval</span> #2`) || strings.Contains(body, `<span class="k failed">approval</span> #1`) {
		t.Error("a refused call's approval line is not marked failed, or an allowed one is")
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
	if w := send("/ui/sessions/ses_1/calls/3/approve", url.Values{"reason": {" release day "}}); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/sessions/ses_1#call-3" {
		t.Fatalf("approve: %d %s", w.Code, w.Header().Get("Location"))
	}
	if w := send("/ui/sessions/ses_1/calls/4/deny", url.Values{"reason": {"not on a Friday"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("deny: %d", w.Code)
	}
	if w := send("/ui/sessions/ses_1/calls/5/approve", url.Values{}); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "Call 5 was decided already") {
		t.Fatalf("refused approve: %d %s", w.Code, w.Body)
	}
	if w := send("/ui/sessions/ses_1/calls/x/deny", url.Values{}); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "There is no such tool call") {
		t.Fatalf("bad call number: %d", w.Code)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []post{
		{"/v1/sessions/ses_1/calls/3/approve", `{"reason":"release day"}`},
		{"/v1/sessions/ses_1/calls/4/deny", `{"reason":"not on a Friday"}`},
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
