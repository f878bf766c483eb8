package queuefeed

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// newHeldFeed is a test feed whose keepalive ticks every keepalive.
func newHeldFeed(t *testing.T, keepalive time.Duration) *testFeed {
	t.Helper()
	return newTestFeedWith(t, openTestStore(t), keepalive)
}

// hold gives session id's entry to acceptor ("" puts it back pending) and
// returns its rev.
func (tf *testFeed) hold(id, acceptor string) int64 {
	tf.t.Helper()
	m, err := tf.st.UpdateSession(tf.t.Context(), id, func(s store.Session, e store.QueueEntry) (store.Mutation, error) {
		e.Phase, e.AcceptorID, e.UpdatedAt = api.PhaseClaimed, acceptor, tf.clock
		if acceptor == "" {
			e.Phase = api.PhasePending
		}
		return store.Mutation{Session: &s, Entry: &e}, nil
	})
	if err != nil {
		tf.t.Fatal(err)
	}
	tf.feed.Notify("w")
	return m.Entry.Rev
}

// followHeld joins a stream of "w" narrowed to acceptor's entries from
// after and follows it until the test ends.
func (tf *testFeed) followHeld(after int64, acceptor string) *eventSink {
	tf.t.Helper()
	return tf.followFrom(From{After: after, HeldBy: acceptor})
}

func holder(ev api.WatchEvent) string {
	if a := ev.Object.Status.AcceptorID; a != nil {
		return *a
	}
	return ""
}

// TestHeldStream: a stream held by "a" shows the changes of a's entries,
// the change that ends a hold it showed, none of another acceptor's or of
// pending entries, and a bookmark past what it passed over at the next
// keepalive; a stream of the whole queue shows everything.
func TestHeldStream(t *testing.T) {
	tf := newHeldFeed(t, 30*time.Millisecond)
	mine, theirs := tf.session(), tf.session()
	held := tf.followHeld(0, "a")
	all := tf.follow(0)

	claimed := tf.hold(mine, "a")
	tf.hold(theirs, "b")
	released := tf.hold(mine, "")
	tf.hold(theirs, "")
	last := tf.end(mine).Rev // after its hold ended: not shown

	// Bookmarks may come between the changes (a tick after a change
	// passed over); cursors only rise.
	var cursor int64
	next := func() api.WatchEvent {
		t.Helper()
		return held.nextRising(t, &cursor)
	}
	for _, want := range []struct {
		rev      int64
		acceptor string
	}{{claimed, "a"}, {released, ""}} {
		ev := next()
		for ev.Type == api.WatchBookmark && cursor < want.rev {
			ev = next()
		}
		if ev.Type != api.WatchModified || ev.Object.Metadata.SessionID != mine || cursor != want.rev || holder(ev) != want.acceptor {
			t.Fatalf("held stream: %+v, want %s's change at rev %d held by %q", ev, mine, want.rev, want.acceptor)
		}
	}
	for cursor < last {
		if ev := next(); ev.Type != api.WatchBookmark || ev.Object.Metadata.SessionID != "" {
			t.Fatalf("held stream: %+v, want bookmarks up to rev %d (the last change passed over)", ev, last)
		}
	}
	if cursor != last {
		t.Fatalf("held stream: bookmarked to %d, want %d", cursor, last)
	}
	// Nothing more changes: no second bookmark.
	select {
	case ev := <-held.events:
		t.Fatalf("held stream: %+v after its bookmark with nothing changed", ev)
	case <-time.After(150 * time.Millisecond):
	}

	// The whole queue's stream: every change, no bookmark.
	n := 0
	for n < 7 { // two creates, five changes
		ev := all.next(t)
		if ev.Type == api.WatchBookmark {
			t.Fatalf("a bookmark on the whole queue's stream: %+v", ev)
		}
		n++
	}
}

// TestHeldReplay: a held stream that starts from a cursor shows, of the
// changes since, only the entries its acceptor holds now; its cursor then
// moves past the rest with a bookmark.
func TestHeldReplay(t *testing.T) {
	tf := newHeldFeed(t, 30*time.Millisecond)
	gone, kept, other := tf.session(), tf.session(), tf.session()
	tf.hold(gone, "a")
	tf.hold(gone, "") // held and let go before the stream: not shown
	heldRev := tf.hold(kept, "a")
	last := tf.hold(other, "b")

	held := tf.followHeld(0, "a")
	ev := held.next(t)
	if ev.Type != api.WatchModified || ev.Object.Metadata.SessionID != kept || ev.Cursor != strconv.FormatInt(heldRev, 10) {
		t.Fatalf("replay: %+v, want %s held by a at rev %d", ev, kept, heldRev)
	}
	if ev := held.next(t); ev.Type != api.WatchBookmark || ev.Cursor != strconv.FormatInt(last, 10) {
		t.Fatalf("replay: %+v, want a bookmark at rev %d", ev, last)
	}
	// The hold it showed ends: shown, though the entry is no longer a's.
	released := tf.hold(kept, "")
	if ev := held.next(t); ev.Object.Metadata.SessionID != kept || holder(ev) != "" || ev.Cursor != strconv.FormatInt(released, 10) {
		t.Fatalf("after the replay: %+v, want %s released at rev %d", ev, kept, released)
	}
}

// TestHeldStreamUnderChurn changes many entries among three acceptors
// while the keepalive ticks every millisecond, so that bookmarks race the
// reader's hand-overs: the held stream's cursors only rise, every entry a
// holds at the end was last shown held by a, every entry it showed held
// and no longer holds was last shown let go, and the stream's last cursor
// reaches the queue's last change.
func TestHeldStreamUnderChurn(t *testing.T) {
	tf := newHeldFeed(t, time.Millisecond)
	ids := make([]string, 12)
	for i := range ids {
		ids[i] = tf.session()
	}
	held := tf.followHeld(0, "a")
	other := tf.followHeld(0, "c")
	acceptors := []string{"a", "b", "", "a", "c", ""}
	final := map[string]string{}
	var last int64
	for k := range 300 {
		id := ids[(k*7)%len(ids)]
		acc := acceptors[(k*5)%len(acceptors)]
		last = tf.hold(id, acc)
		final[id] = acc
	}
	for _, st := range []struct {
		acceptor string
		sink     *eventSink
	}{{"a", held}, {"c", other}} {
		me := st.acceptor
		lastShown := map[string]string{}
		var cursor int64
		deadline := time.After(20 * time.Second)
		for cursor < last {
			var ev api.WatchEvent
			select {
			case ev = <-st.sink.events:
			case <-deadline:
				t.Fatalf("%s's stream: the cursor stopped at %d; the last change is %d", me, cursor, last)
			}
			c, err := strconv.ParseInt(ev.Cursor, 10, 64)
			if err != nil || c <= cursor {
				t.Fatalf("%s's stream: cursor %q after %d: cursors must rise", me, ev.Cursor, cursor)
			}
			cursor = c
			if ev.Type != api.WatchModified {
				continue
			}
			id := ev.Object.Metadata.SessionID
			// Each change shown is the stream's own, or ends a hold it
			// showed: never another acceptor's (streams share frames).
			if h := holder(ev); h != me && lastShown[id] != me {
				t.Fatalf("%s's stream showed %s held by %q, not after its own hold", me, id, h)
			}
			lastShown[id] = holder(ev)
		}
		for id, acc := range final {
			shown, ok := lastShown[id]
			switch {
			case acc == me && shown != me:
				t.Errorf("%s: held by %s at the end, last shown held by %q (shown: %v)", id, me, shown, ok)
			case acc != me && ok && shown == me:
				t.Errorf("%s: held by %q at the end, last shown held by %s", id, acc, me)
			}
		}
	}
}

// gatedStore holds the queue reads while its gate is set.
type gatedStore struct {
	store.Store
	gate atomic.Pointer[chan struct{}]
}

func (g *gatedStore) ListQueue(ctx context.Context, f store.QueueFilter) ([]store.QueueEntry, int, error) {
	if ch := g.gate.Load(); ch != nil {
		<-*ch
	}
	return g.Store.ListQueue(ctx, f)
}

// TestHeldStreamDropKeepsHolds: a held stream handed more of its own
// changes at once than a stream may have waiting is dropped and replays
// from the store; the release of an entry it showed held, among them,
// still reaches it (the judgement of the hand-over it had no room for is
// taken back), and its cursors only rise.
func TestHeldStreamDropKeepsHolds(t *testing.T) {
	gs := &gatedStore{Store: openTestStore(t)}
	tf := newTestFeedWith(t, gs, 5*time.Millisecond)
	ids := make([]string, streamFrames+8)
	for i := range ids {
		ids[i] = tf.session()
	}
	keep := ids[0]
	tf.hold(keep, "a")
	held := tf.followHeld(0, "a")
	if ev := held.next(t); ev.Object.Metadata.SessionID != keep || holder(ev) != "a" {
		t.Fatalf("replay: %+v, want %s held by a", ev, keep)
	}
	// The feed's reader reads every change below at once: one hand-over
	// of more than the stream may have waiting, keep's release among them.
	gate := make(chan struct{})
	gs.gate.Store(&gate)
	for _, id := range ids[1:] {
		tf.hold(id, "a")
	}
	released := tf.hold(keep, "")
	time.Sleep(20 * time.Millisecond)
	gs.gate.Store(nil)
	close(gate)
	var cursor int64
	for {
		ev := held.nextRising(t, &cursor)
		c := cursor
		if ev.Type == api.WatchModified && ev.Object.Metadata.SessionID == keep {
			if holder(ev) != "" || c != released {
				t.Fatalf("%+v, want %s released at rev %d", ev, keep, released)
			}
			return
		}
		if c >= released {
			t.Fatalf("the stream passed rev %d (%+v) without showing %s released", released, ev, keep)
		}
	}
}

// gatedSink is an eventSink whose writes wait while its gate is set,
// telling entered when one starts waiting.
type gatedSink struct {
	*eventSink
	gate    atomic.Pointer[chan struct{}]
	entered chan struct{}
}

func (g *gatedSink) Write(p []byte) (int, error) {
	if ch := g.gate.Load(); ch != nil {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		<-*ch
	}
	return g.eventSink.Write(p)
}

// pending is how many frames the streams of outpost "w" have waiting.
func (tf *testFeed) pending() int {
	tf.feed.mu.Lock()
	f := tf.feed.outposts["w"]
	tf.feed.mu.Unlock()
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for ws := range f.subs {
		ws.mu.Lock()
		n += len(ws.pending)
		ws.mu.Unlock()
	}
	return n
}

// TestHeldStreamDropAfterWaitingFrames: a held stream whose client is slow
// has a hold waiting to be written when a later hand-over overflows it;
// the frames waiting are written before the replay, so the hold is shown
// and its release, judged in the replay, is shown after it.
func TestHeldStreamDropAfterWaitingFrames(t *testing.T) {
	gs := &gatedStore{Store: openTestStore(t)}
	tf := newTestFeedWith(t, gs, time.Hour)
	first, keep := tf.session(), tf.session()
	ids := make([]string, streamFrames+8)
	for i := range ids {
		ids[i] = tf.session()
	}
	sink := &gatedSink{eventSink: newEventSink(), entered: make(chan struct{}, 1)}
	tf.followOn(From{HeldBy: "a"}, sink)

	// The client stops reading while the stream writes first's hold.
	slow := make(chan struct{})
	sink.gate.Store(&slow)
	heldFirst := tf.hold(first, "a")
	select {
	case <-sink.entered:
	case <-time.After(15 * time.Second):
		t.Fatal("the stream never wrote the first hold")
	}
	// keep's hold waits behind it.
	heldKeep := tf.hold(keep, "a")
	waitfor.True(t, "keep's hold to wait for the stream", func() bool { return tf.pending() == 1 })

	// One hand-over of more than the stream may have waiting, keep's
	// release among them: the stream is dropped.
	reads := make(chan struct{})
	gs.gate.Store(&reads)
	for _, id := range ids {
		tf.hold(id, "a")
	}
	released := tf.hold(keep, "")
	time.Sleep(20 * time.Millisecond)
	gs.gate.Store(nil)
	close(reads)
	waitfor.True(t, "the stream to be dropped", func() bool { return tf.pending() == 0 })
	sink.gate.Store(nil)
	close(slow)

	var cursor int64
	var shown []int64
	for {
		ev := sink.nextRising(t, &cursor)
		c := cursor
		if id := ev.Object.Metadata.SessionID; id == first || id == keep {
			shown = append(shown, c)
		}
		if c >= released {
			break
		}
	}
	if want := []int64{heldFirst, heldKeep, released}; !slices.Equal(shown, want) {
		t.Fatalf("first's and keep's changes shown at revs %v, want %v (held, held, released)", shown, want)
	}
}
