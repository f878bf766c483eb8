package store

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestSessionWebhookEvents: each change of a session's state that a
// subscription may name implies its event, and a write that changes
// nothing of note implies none.
func TestSessionWebhookEvents(t *testing.T) {
	pending := QueueEntry{Phase: api.PhasePending}
	claimed := QueueEntry{Phase: api.PhaseClaimed, Epoch: 1, AcceptorID: "a"}
	reclaimed := QueueEntry{Phase: api.PhaseClaimed, Epoch: 2, AcceptorID: "b"}
	deleted := QueueEntry{Phase: api.PhaseClaimed, Epoch: 1, Deleted: true}
	st := func(status, detail string) *Session { return &Session{Status: status, StatusDetail: detail} }
	for _, tc := range []struct {
		name       string
		prev       Session
		prevEntry  QueueEntry
		next       *Session
		nextEntry  *QueueEntry
		wantEvents string
	}{
		{"claimed", Session{Status: api.StatusClaimed}, pending, nil, &claimed, api.EventSessionClaimed},
		{"claimed again by another", Session{Status: api.StatusClaimed}, claimed, nil, &reclaimed, api.EventSessionClaimed},
		{"claim renewed", Session{Status: api.StatusClaimed}, claimed, nil, &claimed, ""},
		{"claim of a deleted entry", Session{}, pending, nil, &deleted, ""},
		{"running", Session{Status: api.StatusClaimed}, claimed, st(api.StatusRunning, ""), nil, api.EventSessionRunning},
		{"still running", Session{Status: api.StatusRunning}, claimed, st(api.StatusRunning, ""), nil, ""},
		{"suspended", Session{Status: api.StatusRunning}, claimed, st(api.StatusSuspended, ""), nil, api.EventSessionSuspended},
		{"resumed", Session{Status: api.StatusSuspended}, pending, st(api.StatusResuming, ""), nil, api.EventSessionResumed},
		{"exit", Session{Status: api.StatusRunning}, claimed, st(api.StatusExit, "done"), nil, api.EventSessionEnded},
		{"error", Session{Status: api.StatusRunning}, claimed, st(api.StatusError, "crashed"), nil, api.EventSessionEnded},
		{"waiting for approval", Session{Status: api.StatusRunning}, claimed, st(api.StatusRunning, api.StatusDetailWaitingForApproval), nil,
			api.EventSessionWaitingForApproval},
		{"still waiting", Session{Status: api.StatusRunning, StatusDetail: api.StatusDetailWaitingForApproval}, claimed,
			st(api.StatusRunning, api.StatusDetailWaitingForApproval), nil, ""},
		{"claimed and running in one write", Session{Status: api.StatusNew}, pending, st(api.StatusRunning, ""), &claimed,
			api.EventSessionClaimed + " " + api.EventSessionRunning},
	} {
		got := strings.Join(SessionWebhookEvents(tc.prev, tc.prevEntry, tc.next, tc.nextEntry), " ")
		if got != tc.wantEvents {
			t.Errorf("%s: events %q, want %q", tc.name, got, tc.wantEvents)
		}
	}
}

// TestWebhookSessionData: a session's event data names its claim holder
// only while claimed, and its end when it ended.
func TestWebhookSessionData(t *testing.T) {
	end := time.Unix(1700000100, 0)
	s := Session{ID: "s1", OutpostID: "o1", Status: api.StatusExit, Reason: "Done.", CreatedAt: time.Unix(1700000000, 0), EndedAt: &end}
	b, err := WebhookSessionData(s, &QueueEntry{Phase: api.PhaseClaimed, AcceptorID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Session api.WebhookSession `json:"session"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.Session.ID != "s1" || d.Session.OutpostID != "o1" || d.Session.AcceptorID != "a" || d.Session.Reason != "Done." ||
		d.Session.CreatedAt != 1700000000 || d.Session.EndedAt == nil || *d.Session.EndedAt != 1700000100 {
		t.Errorf("data %s", b)
	}
	b, err = WebhookSessionData(Session{ID: "s2"}, &QueueEntry{Phase: api.PhasePending, AcceptorID: "a"})
	if err != nil || strings.Contains(string(b), "acceptor_id") || strings.Contains(string(b), "ended_at") {
		t.Errorf("data of an unclaimed session %s (%v)", b, err)
	}
	if a, b := NewWebhookEventID(), NewWebhookEventID(); !strings.HasPrefix(a, "whd_") || a >= b {
		t.Errorf("event ids %s, %s: want whd_ ids growing", a, b)
	}
}
