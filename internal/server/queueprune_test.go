package server

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/queuefeed"
	"github.com/outpost-sh/outpost/internal/store"
)

// TestWatchStaleCursorRelists prunes the tombstones of ended sessions and
// watches from cursors around them: from before a pruned deletion the
// stream re-lists (a replay would miss it), from the horizon on it replays
// as before, and another outpost's prune does not touch this outpost's
// watches.
func TestWatchStaleCursorRelists(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Now()}
	// Ended sessions' entries go at once: the test is about their tombstones.
	ts := startServer(t, Options{Now: clock.Now, EndedEntryRetention: -1})
	w := ts.outpost("w")
	ts.outpost("other")
	machine := ts.token([]string{api.ScopeMachine}, "")

	ts.session("other") // so that the cursor below is not 0, which never re-lists
	var l api.QueueList
	ts.mustDo(200, "GET", "/v1/queue?outpost=w", machine, nil, &l)
	before := l.Cursor
	gone := ts.session("w").Metadata.SessionID
	keep := ts.session("w").Metadata.SessionID
	ts.mustDo(200, "POST", "/v1/sessions/"+gone+"/terminate", ts.admin, nil, nil)
	otherGone := ts.session("other").Metadata.SessionID
	ts.mustDo(200, "POST", "/v1/sessions/"+otherGone+"/terminate", ts.admin, nil, nil)
	tomb, err := ts.srv.store.GetQueueEntry(t.Context(), gone)
	if err != nil || !tomb.Deleted {
		t.Fatalf("tombstone of %s: %+v, %v", gone, tomb, err)
	}

	// Nothing is pruned before the age.
	ts.srv.queueFeed.PruneOnce(t.Context())
	if _, err := ts.srv.store.GetQueueEntry(t.Context(), gone); err != nil {
		t.Fatalf("a fresh tombstone was pruned: %v", err)
	}
	clock.add(queuefeed.TombstoneAge(ts.srv.opts.WatchMaxDuration) + time.Minute)
	ts.srv.queueFeed.PruneOnce(t.Context())
	for _, id := range []string{gone, otherGone} {
		if _, err := ts.srv.store.GetQueueEntry(t.Context(), id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("tombstone of %s after the prune: %v, want not found", id, err)
		}
	}
	if e, err := ts.srv.store.GetQueueEntry(t.Context(), keep); err != nil || e.Deleted {
		t.Fatalf("live entry %s after the prune: %+v, %v", keep, e, err)
	}

	// From before the pruned deletion: a re-list of the live entries,
	// then live.
	lw := openWatch(t, ts, machine, "/v1/queue?watch=true&outpost=w&cursor="+before)
	if lw.resp.StatusCode != 200 || lw.resp.Header.Get(api.HeaderWatchRelist) != "true" {
		t.Fatalf("watch from a cursor below the horizon: %d %v, want a re-list", lw.resp.StatusCode, lw.resp.Header)
	}
	if ev := lw.next(t); ev.Type != api.WatchModified || ev.Object.Metadata.SessionID != keep {
		t.Fatalf("re-list: %+v, want %s as MODIFIED", ev, keep)
	}
	fresh := ts.session("w").Metadata.SessionID
	if ev := lw.next(t); ev.Object.Metadata.SessionID != fresh {
		t.Fatalf("after the re-list: %+v, want the new session %s", ev, fresh)
	}

	// From the horizon of "w" on: a replay. Outpost "other" was pruned
	// up to a higher rev, which only its own watches heed.
	at := strconv.FormatInt(tomb.Rev, 10)
	lw = openWatch(t, ts, machine, "/v1/queue?watch=true&outpost=w&cursor="+at)
	if lw.resp.Header.Get(api.HeaderWatchRelist) != "" {
		t.Fatal("a watch from the horizon re-listed")
	}
	if ev := lw.next(t); ev.Object.Metadata.SessionID != fresh {
		t.Fatalf("replay from the horizon: %+v, want %s", ev, fresh)
	}
	lw = openWatch(t, ts, machine, "/v1/queue?watch=true&outpost=other&cursor="+at)
	if lw.resp.Header.Get(api.HeaderWatchRelist) != "true" {
		t.Fatal("a watch of the other outpost from below its horizon did not re-list")
	}

	// A prune that commits after the request's horizon check and before
	// the stream's first read: the stream's first join checks again and
	// ends with nothing replayed (the client's reconnect re-lists). That
	// a rejoin does not check again is the feed's own test
	// (queuefeed.TestJoinChecksHorizonOnce).
	cursor, err := strconv.ParseInt(before, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	var sink bufferSink
	if st := ts.srv.queueFeed.Join(t.Context(), &sink, w.Metadata.OutpostID, queuefeed.From{After: cursor}); st != nil || sink.Len() != 0 {
		t.Fatalf("a first join from below the horizon: %v, wrote %q; want it ended with nothing sent", st, sink.String())
	}
}

// bufferSink is a queuefeed.Sink that keeps what is written.
type bufferSink struct{ bytes.Buffer }

func (*bufferSink) Flush() {}
