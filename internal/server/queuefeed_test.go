package server

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
)

// readCountingStore counts the queue reads of one outpost.
type readCountingStore struct {
	store.Store
	outpostID atomic.Pointer[string]
	reads     atomic.Int64
}

func (s *readCountingStore) ListQueue(ctx context.Context, f store.QueueFilter) ([]store.QueueEntry, int, error) {
	if id := s.outpostID.Load(); id != nil && f.OutpostID == *id {
		s.reads.Add(1)
	}
	return s.Store.ListQueue(ctx, f)
}

// TestQueueFeedReadsOncePerChange opens several watches of one outpost and
// changes another outpost's queue, then this one's: the other outpost's
// changes cost these watches no read of the store, and this outpost's
// change is read once for all of them, not once per watch.
func TestQueueFeedReadsOncePerChange(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "outpost.db"))
	if err != nil {
		t.Fatal(err)
	}
	counting := &readCountingStore{Store: st}
	ts := startServer(t, Options{Store: counting})
	ts.outpost("w")
	ts.outpost("other")
	var o api.Outpost
	ts.mustDo(200, "GET", "/v1/outposts/w", ts.admin, nil, &o)
	machine := ts.token([]string{api.ScopeMachine}, "")
	var l api.QueueList
	ts.mustDo(200, "GET", "/v1/queue?outpost=w", machine, nil, &l)

	const watches = 6
	var lws []*liveWatch
	for range watches {
		lws = append(lws, openWatch(t, ts, machine, "/v1/queue?watch=true&outpost=w&cursor="+l.Cursor))
	}
	// Every watch has joined the feed once its first session arrived.
	first := ts.session("w").Metadata.SessionID
	for _, lw := range lws {
		if ev := lw.next(t); ev.Object.Metadata.SessionID != first {
			t.Fatalf("first event %+v, want %s", ev, first)
		}
	}
	counting.outpostID.Store(&o.Metadata.OutpostID)
	for range 5 {
		ts.session("other")
	}
	second := ts.session("w").Metadata.SessionID
	for _, lw := range lws {
		if ev := lw.next(t); ev.Object.Metadata.SessionID != second {
			t.Fatalf("next event %+v, want %s (nothing of the other outpost)", ev, second)
		}
	}
	// One read for the change (two if a kick came between its pages).
	if n := counting.reads.Load(); n < 1 || n > 2 {
		t.Errorf("%d reads of outpost w's queue for 5 changes elsewhere and 1 here with %d watches; want 1", n, watches)
	}
}

// TestWatchAllOutpostsSeesNewSession: a queue watch with no outpost
// filter (the contract's `outpost` is optional) follows the feed of
// outpost "", which every outpost's change wakes too (on SQLite there is
// no change feed or backstop to make up for a missed wake-up).
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
