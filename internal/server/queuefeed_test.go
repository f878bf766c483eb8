package server

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

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

// TestQueueFeedDropsLaggingStream fills a subscription that nobody reads:
// the feed drops it once its buffer is full. A watch following the feed
// meanwhile, and dropped by it too half way (as if it had lagged), gets
// every change once, in rev order: it reads the store from its cursor and
// joins again.
func TestQueueFeedDropsLaggingStream(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("w")
	var o api.Outpost
	ts.mustDo(200, "GET", "/v1/outposts/w", ts.admin, nil, &o)
	var l api.QueueList
	ts.mustDo(200, "GET", "/v1/queue?outpost=w", ts.admin, nil, &l)
	cursor := l.Cursor
	lw := openWatch(t, ts, ts.admin, "/v1/queue?watch=true&outpost=w&cursor="+cursor)
	first := ts.session("w").Metadata.SessionID
	if ev := lw.next(t); ev.Object.Metadata.SessionID != first {
		t.Fatalf("first event %+v, want %s", ev, first)
	}
	stuck := ts.srv.queueFeed.subscribe(o.Metadata.OutpostID, 0)
	defer ts.srv.queueFeed.unsubscribe(o.Metadata.OutpostID, stuck)

	var want []string
	for range streamFrames + 8 {
		want = append(want, ts.session("w").Metadata.SessionID)
	}
	select {
	case <-stuck.dropped:
	case <-time.After(15 * time.Second):
		t.Fatalf("a stream that read none of %d frames was not dropped", len(want))
	}
	if n := len(stuck.frames); n > streamFrames {
		t.Errorf("the dropped stream holds %d frames, more than its buffer", n)
	}
	ts.srv.queueFeed.mu.Lock()
	f := ts.srv.queueFeed.outposts[o.Metadata.OutpostID]
	ts.srv.queueFeed.mu.Unlock()
	f.dropAll()
	for range 10 {
		want = append(want, ts.session("w").Metadata.SessionID)
	}
	last := int64(0)
	for i, id := range want {
		if i == len(want)-1 {
			// Nothing more may come than the changes made.
			defer func() {
				select {
				case ev := <-lw.events:
					t.Errorf("an event after the last change: %+v", ev)
				default:
				}
			}()
		}
		ev := lw.next(t)
		if ev.Object.Metadata.SessionID != id {
			t.Fatalf("event %d: %+v, want %s", i, ev.Object.Metadata, id)
		}
		rev, _ := parseCursor(ev.Cursor, 1<<62)
		if rev <= last {
			t.Fatalf("event %d: cursor %s after %d, want increasing", i, ev.Cursor, last)
		}
		last = rev
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
