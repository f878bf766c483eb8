package server

import (
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestEndedEntryStaysListed ends two sessions of an outpost, one released
// by its holder after the end and one ended while pending, and checks what
// a client of the fleet API sees: a MODIFIED event of each entry as
// pending, unclaimed and terminated; both listed (phase pending) and
// counted in the list's total, but not in queue_depth; a claim of either
// answered 409 saying the session ended; outpost_queue_pending counting
// only the waiting session; claim-next taking the one
// claimable session and then nothing. Past the retention the sweep deletes
// both: a DELETED event each, and they are gone from the list and the
// entry's own path.
func TestEndedEntryStaysListed(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Now()}
	ts := startServer(t, Options{Now: clock.Now, EndedEntryRetention: time.Second})
	ts.outpost("dev")
	machine := ts.token([]string{api.ScopeMachine}, "")
	var l api.QueueList
	ts.mustDo(200, "GET", "/v1/queue?outpost=dev", machine, nil, &l)
	lw := openWatch(t, ts, machine, "/v1/queue?watch=true&outpost=dev&cursor="+l.Cursor)

	released := ts.session("dev").Metadata.SessionID
	waiting := ts.session("dev").Metadata.SessionID
	endedPending := ts.session("dev").Metadata.SessionID
	ts.mustDo(200, "POST", "/v1/queue/"+released+"/claim", machine, api.ClaimRequest{AcceptorID: "acc"}, nil)
	ts.mustDo(200, "POST", "/v1/sessions/"+released+"/terminate", ts.admin, nil, nil)
	ts.mustDo(200, "POST", "/v1/sessions/"+endedPending+"/terminate", ts.admin, nil, nil)
	var rel api.QueueEntry
	ts.mustDo(200, "POST", "/v1/queue/"+released+"/release", machine, api.ClaimRequest{AcceptorID: "acc"}, &rel)
	ended := func(e api.QueueEntry) bool {
		return e.Status.Phase == api.PhasePending && e.Status.AcceptorID == nil && e.Status.SessionStatus == api.QueueSessionTerminated
	}
	if !ended(rel) {
		t.Fatalf("the release answered %+v, want the entry pending, unclaimed and terminated", rel.Status)
	}

	// Watchers see each session's final status before any deletion.
	seen := map[string]bool{}
	for range 20 {
		if seen[released] && seen[endedPending] {
			break
		}
		ev := lw.next(t)
		if ev.Type == api.WatchDeleted {
			t.Fatalf("DELETED of %s within the retention", ev.Object.Metadata.SessionID)
		}
		if ev.Type == api.WatchModified && ended(ev.Object) {
			seen[ev.Object.Metadata.SessionID] = true
		}
	}
	if !seen[released] || !seen[endedPending] {
		t.Fatalf("MODIFIED with session_status terminated seen for %v, want %s and %s", seen, released, endedPending)
	}

	// Listed as pending, counted in the list's total, not in the depth.
	for _, tc := range []struct {
		query string
		total int
	}{{"", 3}, {"&phase=pending", 3}, {"&phase=claimed", 0}, {"&acceptor_id=acc", 0}} {
		var list api.QueueList
		ts.mustDo(200, "GET", "/v1/queue?outpost=dev"+tc.query, machine, nil, &list)
		if list.Total != tc.total || len(list.Items) != tc.total {
			t.Errorf("list%s: total %d, %d items; want %d", tc.query, list.Total, len(list.Items), tc.total)
		}
		for _, e := range list.Items {
			if id := e.Metadata.SessionID; (id == released || id == endedPending) && !ended(e) {
				t.Errorf("list%s: %s is %+v, want pending, unclaimed and terminated", tc.query, id, e.Status)
			}
		}
	}
	var o api.Outpost
	ts.mustDo(200, "GET", "/v1/outposts/dev", machine, nil, &o)
	if o.Status.QueueDepth != 1 || o.Status.ActiveClaims != 0 {
		t.Errorf("outpost status %+v, want queue_depth 1 (only %s) and no active claims", o.Status, waiting)
	}
	if v, _ := sample(t, ts, "outpost_queue_pending", `outpost="dev"`); v != 1 {
		t.Errorf("outpost_queue_pending = %v, want 1 (only %s)", v, waiting)
	}

	// Never claimed, by id or by claim-next.
	for _, id := range []string{released, endedPending} {
		ts.mustDo(409, "POST", "/v1/queue/"+id+"/claim", machine, api.ClaimRequest{AcceptorID: "other"}, nil)
		if _, err := ts.srv.life.Claim(t.Context(), id, "other"); err == nil || !strings.Contains(err.Error(), "has ended") {
			t.Errorf("claim of ended %s: %v, want a message saying it has ended", id, err)
		}
	}
	var next api.QueueEntry
	ts.mustDo(200, "POST", "/v1/outposts/dev/queue:claim", machine, api.ClaimNextRequest{AcceptorID: "next"}, &next)
	if next.Metadata.SessionID != waiting {
		t.Fatalf("claim-next took %s, want %s (the only claimable session)", next.Metadata.SessionID, waiting)
	}
	ts.mustDo(204, "POST", "/v1/outposts/dev/queue:claim", machine, api.ClaimNextRequest{AcceptorID: "next"}, nil)

	// Past the retention the sweep deletes both.
	clock.add(2 * time.Second)
	deleted := map[string]bool{}
	for range 20 {
		if deleted[released] && deleted[endedPending] {
			break
		}
		if ev := lw.next(t); ev.Type == api.WatchDeleted {
			deleted[ev.Object.Metadata.SessionID] = true
		}
	}
	if !deleted[released] || !deleted[endedPending] {
		t.Fatalf("DELETED seen for %v, want %s and %s", deleted, released, endedPending)
	}
	var list api.QueueList
	ts.mustDo(200, "GET", "/v1/queue?outpost=dev", machine, nil, &list)
	if list.Total != 1 || len(list.Items) != 1 || list.Items[0].Metadata.SessionID != waiting {
		t.Errorf("list after the sweep: total %d, %+v; want only %s", list.Total, list.Items, waiting)
	}
	ts.mustDo(404, "GET", "/v1/queue/"+released, machine, nil, nil)
}

// TestEndedEntryRetentionNone: with no retention an ended session's entry
// goes when the session ends or its claim is released, as a DELETED
// event, and a claim of it is a 404.
func TestEndedEntryRetentionNone(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{EndedEntryRetention: -1})
	ts.outpost("dev")
	machine := ts.token([]string{api.ScopeMachine}, "")
	var l api.QueueList
	ts.mustDo(200, "GET", "/v1/queue?outpost=dev", machine, nil, &l)
	lw := openWatch(t, ts, machine, "/v1/queue?watch=true&outpost=dev&cursor="+l.Cursor)
	released := ts.session("dev").Metadata.SessionID
	endedPending := ts.session("dev").Metadata.SessionID
	ts.mustDo(200, "POST", "/v1/queue/"+released+"/claim", machine, api.ClaimRequest{AcceptorID: "acc"}, nil)
	ts.mustDo(200, "POST", "/v1/sessions/"+released+"/terminate", ts.admin, nil, nil)
	ts.mustDo(200, "POST", "/v1/sessions/"+endedPending+"/terminate", ts.admin, nil, nil)
	ts.mustDo(200, "POST", "/v1/queue/"+released+"/release", machine, api.ClaimRequest{AcceptorID: "acc"}, nil)
	deleted := map[string]bool{}
	for range 20 {
		if deleted[released] && deleted[endedPending] {
			break
		}
		if ev := lw.next(t); ev.Type == api.WatchDeleted {
			deleted[ev.Object.Metadata.SessionID] = true
		}
	}
	if !deleted[released] || !deleted[endedPending] {
		t.Fatalf("DELETED seen for %v, want %s and %s", deleted, released, endedPending)
	}
	ts.mustDo(404, "POST", "/v1/queue/"+endedPending+"/claim", machine, api.ClaimRequest{AcceptorID: "a"}, nil)
	var list api.QueueList
	ts.mustDo(200, "GET", "/v1/queue?outpost=dev", machine, nil, &list)
	if list.Total != 0 || len(list.Items) != 0 {
		t.Fatalf("ended sessions still listed: %+v", list.Items)
	}
}
