package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// pagedEvents serves a session's events as the API pages them (after,
// limit), failing every request after failAfter pages when it is > 0.
func pagedEvents(t *testing.T, evs []api.Event, failAfter int) http.Handler {
	pages := 0
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sessions/ses_1/events" {
			http.Error(w, `{"error":"not found"}`, 404)
			return
		}
		if pages++; failAfter > 0 && pages > failAfter {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(503)
			fmt.Fprint(w, `{"error":{"message":"The store is away."}}`)
			return
		}
		after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		if limit <= 0 || limit > transcriptPage {
			t.Errorf("limit %d", limit)
			limit = transcriptPage
		}
		var page api.EventList
		for _, ev := range evs {
			if ev.Seq > after && len(page.Items) < limit {
				page.Items = append(page.Items, ev)
			}
		}
		page.HasNextPage = len(page.Items) > 0 && page.Items[len(page.Items)-1].Seq < evs[len(evs)-1].Seq
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(page)
	})
}

// TestSessionLogDownload: the whole transcript, over several pages of the
// API, comes as one plain-text file in the CLI's form; a page that fails
// ends the file with a line saying so.
func TestSessionLogDownload(t *testing.T) {
	t.Parallel()
	f := &fixture{now: 1_700_000_000_000}
	f.add(0, api.Event{Type: api.EventCall, CallSeq: 1, Tool: api.ToolExec, Args: args(api.ExecArgs{Command: "seq 1200"})})
	for i := 1; i <= 1200; i++ {
		f.add(1, api.Event{Type: api.EventOutput, CallSeq: 1, Stream: "stdout", Text: fmt.Sprintf("line %d\n", i)})
	}
	f.add(1, api.Event{Type: api.EventResult, CallSeq: 1, Tool: api.ToolExec, OK: ptr(true), ExitCode: ptr(0)}).
		add(0, api.Event{Type: api.EventEnd, Status: api.StatusExit, Reason: "The script finished: 1 step."})
	get := func(api http.Handler) *httptest.ResponseRecorder {
		h, err := New(Options{API: api})
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("GET", "/ui/sessions/ses_1/log", nil)
		r.AddCookie(&http.Cookie{Name: CookieName, Value: "good"})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	w := get(pagedEvents(t, f.evs, 0))
	if w.Code != 200 || w.Header().Get("Content-Type") != "text/plain; charset=utf-8" ||
		w.Header().Get("Content-Disposition") != `attachment; filename="outpost-ses_1.log"` {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	body := w.Body.String()
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	if len(lines) != 1203 || lines[0] != "$ seq 1200" || lines[1] != "line 1" || lines[1200] != "line 1200" || lines[1201] != "[exit 0]" ||
		!strings.HasSuffix(lines[1202], "] session ended: exit: The script finished: 1 step.") {
		t.Fatalf("%d lines: first %q, last %q", len(lines), lines[:2], lines[len(lines)-2:])
	}

	w = get(pagedEvents(t, f.evs, 1))
	body = w.Body.String()
	if w.Code != 200 || !strings.Contains(body, "line 499\n") || strings.Contains(body, "line 501\n") ||
		!strings.HasSuffix(body, "line 499\n[the log stops here: reading the events after 500 failed: Refused (503 Service Unavailable): The store is away.]\n") {
		t.Errorf("a failing second page: %d, ends %q", w.Code, body[max(0, len(body)-120):])
	}

	// An unknown session is the API's answer, not an empty file.
	if w := get(http.NotFoundHandler()); w.Code != 404 || w.Header().Get("Content-Disposition") != "" {
		t.Errorf("unknown session: %d %v", w.Code, w.Header())
	}
}
