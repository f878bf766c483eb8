package server

import (
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestWatchAllOutpostsSeesNewSession (review of issue 17): a queue watch
// with no outpost filter (the contract's `outpost` is optional) subscribes
// to the feed of outpost "", but queueFeed.notify(id) wakes only the feed
// of id: on SQLite (no change feed, no backstop) a new session never
// reaches the unfiltered watch.
func TestWatchAllOutpostsSeesNewSession(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("w")
	machine := ts.token([]string{api.ScopeMachine}, "")
	var l api.QueueList
	ts.mustDo(200, "GET", "/v1/queue", machine, nil, &l)
	lw := openWatch(t, ts, machine, "/v1/queue?watch=true&cursor="+l.Cursor)
	id := ts.session("w").Metadata.SessionID
	if ev := lw.next(t); ev.Object.Metadata.SessionID != id {
		t.Fatalf("event %+v, want session %s", ev, id)
	}
}
