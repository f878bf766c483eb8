package queuefeed

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
)

// testFeed is a feed over a real SQLite store with outposts "w" and
// "other".
type testFeed struct {
	t     *testing.T
	st    store.Store
	feed  *Feed
	clock time.Time
	n     int
}

func newTestFeed(t *testing.T) *testFeed {
	t.Helper()
	return newTestFeedOn(t, openTestStore(t))
}

// openTestStore opens a SQLite store in a temporary dir, closed when the
// test ends.
func openTestStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "outpost.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newTestFeedOn is newTestFeed on st.
func newTestFeedOn(t *testing.T, st store.Store) *testFeed {
	t.Helper()
	return newTestFeedWith(t, st, time.Hour)
}

// newTestFeedWith is newTestFeedOn with keepalive ticks every keepalive.
func newTestFeedWith(t *testing.T, st store.Store, keepalive time.Duration) *testFeed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	tf := &testFeed{t: t, st: st, clock: time.Now()}
	tf.feed = New(Options{Store: st, Entry: func(e store.QueueEntry) api.QueueEntry {
		ae := api.QueueEntry{Metadata: api.QueueMetadata{SessionID: e.SessionID, OutpostID: e.OutpostID}}
		if e.AcceptorID != "" {
			ae.Status.AcceptorID = &e.AcceptorID
		}
		return ae
	}, Keepalive: keepalive, Go: func(fn func(context.Context)) { wg.Go(func() { fn(ctx) }) },
		Now: func() time.Time { return tf.clock }, TombstoneAge: time.Hour})
	for _, id := range []string{"w", "other"} {
		if err := st.CreateOutpost(t.Context(), store.Outpost{ID: id, Name: id, Platform: api.PlatformLinux, CreatedAt: tf.clock}); err != nil {
			t.Fatal(err)
		}
	}
	return tf
}

// session creates a session of "w" with a pending entry, tells the feed,
// and returns its id.
func (tf *testFeed) session() string { return tf.sessionOf("w") }

// sessionOf is session for outpost outpostID.
func (tf *testFeed) sessionOf(outpostID string) string {
	tf.t.Helper()
	tf.n++
	id := fmt.Sprintf("s%03d", tf.n)
	sess := store.Session{ID: id, OutpostID: outpostID, Status: api.StatusNew, CreatedAt: tf.clock, UpdatedAt: tf.clock,
		Spec: api.SessionSpec{Outpost: outpostID, Agent: api.Agent{Kind: api.AgentScript}}}
	e := &store.QueueEntry{SessionID: id, OutpostID: outpostID, Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending,
		SessionStatus: api.QueueSessionPending, CreatedAt: tf.clock, UpdatedAt: tf.clock}
	if err := tf.st.CreateSession(tf.t.Context(), sess, e, nil); err != nil {
		tf.t.Fatal(err)
	}
	tf.feed.Notify(outpostID)
	return id
}

// end ends session id and turns its entry into a tombstone.
func (tf *testFeed) end(id string) store.QueueEntry {
	tf.t.Helper()
	m, err := tf.st.UpdateSession(tf.t.Context(), id, func(s store.Session, e store.QueueEntry) (store.Mutation, error) {
		s.Status = api.StatusExit
		e.SessionStatus, e.Deleted, e.UpdatedAt = api.QueueSessionTerminated, true, tf.clock
		return store.Mutation{Session: &s, Entry: &e}, nil
	})
	if err != nil {
		tf.t.Fatal(err)
	}
	tf.feed.Notify("w")
	return *m.Entry
}

// eventSink is a Sink that decodes the watch events written to it.
type eventSink struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	events chan api.WatchEvent
}

func newEventSink() *eventSink { return &eventSink{events: make(chan api.WatchEvent, 1024)} }

func (s *eventSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	for {
		b := s.buf.Bytes()
		i := bytes.Index(b, []byte("\n\n"))
		if i < 0 {
			return len(p), nil
		}
		if data, ok := bytes.CutPrefix(b[:i], []byte("data: ")); ok {
			var ev api.WatchEvent
			if err := json.Unmarshal(data, &ev); err != nil {
				return 0, err
			}
			s.events <- ev
		}
		s.buf.Next(i + 2)
	}
}

func (*eventSink) Flush() {}

func (s *eventSink) next(t *testing.T) api.WatchEvent {
	t.Helper()
	select {
	case ev := <-s.events:
		return ev
	case <-time.After(15 * time.Second):
		t.Fatal("no watch event within 15s")
		return api.WatchEvent{}
	}
}

// nextRising is next on a stream whose cursors only rise: the event's
// cursor must be above *cursor, which it then becomes.
func (s *eventSink) nextRising(t *testing.T, cursor *int64) api.WatchEvent {
	t.Helper()
	ev := s.next(t)
	c, err := strconv.ParseInt(ev.Cursor, 10, 64)
	if err != nil || c <= *cursor {
		t.Fatalf("%+v after cursor %d: cursors must rise", ev, *cursor)
	}
	*cursor = c
	return ev
}

// follow joins a stream of "w" from after and follows it until the test
// ends.
func (tf *testFeed) follow(after int64) *eventSink {
	tf.t.Helper()
	return tf.followFrom(From{After: after})
}

// followFrom joins a stream of "w" from from and follows it until the
// test ends.
func (tf *testFeed) followFrom(from From) *eventSink {
	tf.t.Helper()
	sink := newEventSink()
	tf.followOn(from, sink)
	return sink
}

// followOn is followFrom writing to sink.
func (tf *testFeed) followOn(from From, sink Sink) {
	tf.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st := tf.feed.Join(ctx, sink, "w", from)
	if st == nil {
		cancel()
		tf.t.Fatal("the stream ended as it joined")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.Follow(ctx, sink)
	}()
	tf.t.Cleanup(func() { cancel(); <-done })
}

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

// TestFeedReadsOncePerChange opens several streams of one outpost and
// changes another outpost's queue, then this one's: the other outpost's
// changes cost these streams no read of the store, and this outpost's
// change is read once for all of them, not once per stream.
func TestFeedReadsOncePerChange(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "outpost.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	counting := &readCountingStore{Store: st}
	tf := newTestFeedOn(t, counting)

	const streams = 6
	var sinks []*eventSink
	for range streams {
		sinks = append(sinks, tf.follow(0))
	}
	// Every stream has joined the feed once its first session arrived.
	first := tf.session()
	for _, s := range sinks {
		if ev := s.next(t); ev.Object.Metadata.SessionID != first {
			t.Fatalf("first event %+v, want %s", ev, first)
		}
	}
	w := "w"
	counting.outpostID.Store(&w)
	for range 5 {
		tf.sessionOf("other")
	}
	second := tf.session()
	for _, s := range sinks {
		if ev := s.next(t); ev.Object.Metadata.SessionID != second {
			t.Fatalf("next event %+v, want %s (nothing of the other outpost)", ev, second)
		}
	}
	// One read for the change (two if a kick came between its pages).
	if n := counting.reads.Load(); n < 1 || n > 2 {
		t.Errorf("%d reads of outpost w's queue for 5 changes elsewhere and 1 here with %d streams; want 1", n, streams)
	}
}

// TestFeedDropsLaggingStream fills a subscription that nobody reads: the
// feed drops it once its buffer is full. A stream following the feed
// meanwhile, and dropped by it too half way (as if it had lagged), gets
// every change once, in rev order: it reads the store from its cursor and
// joins again.
func TestFeedDropsLaggingStream(t *testing.T) {
	t.Parallel()
	tf := newTestFeed(t)
	lw := tf.follow(0)
	first := tf.session()
	if ev := lw.next(t); ev.Object.Metadata.SessionID != first {
		t.Fatalf("first event %+v, want %s", ev, first)
	}
	stuck := tf.feed.subscribe("w", 0)
	defer tf.feed.unsubscribe("w", stuck)

	var want []string
	for range streamFrames + 8 {
		want = append(want, tf.session())
	}
	select {
	case <-stuck.dropped:
	case <-time.After(15 * time.Second):
		t.Fatalf("a stream that read none of %d frames was not dropped", len(want))
	}
	if n := len(stuck.take()); n > streamFrames {
		t.Errorf("the dropped stream holds %d frames, more than its buffer", n)
	}
	tf.feed.mu.Lock()
	f := tf.feed.outposts["w"]
	tf.feed.mu.Unlock()
	f.dropAll()
	for range 10 {
		want = append(want, tf.session())
	}
	last := int64(0)
	for i, id := range want {
		ev := lw.next(t)
		if ev.Object.Metadata.SessionID != id {
			t.Fatalf("event %d: %+v, want %s", i, ev.Object.Metadata, id)
		}
		rev, err := strconv.ParseInt(ev.Cursor, 10, 64)
		if err != nil || rev <= last {
			t.Fatalf("event %d: cursor %s after %d, want increasing", i, ev.Cursor, last)
		}
		last = rev
	}
	// Nothing more may come than the changes made.
	select {
	case ev := <-lw.events:
		t.Errorf("an event after the last change: %+v", ev)
	default:
	}
}

// TestJoinChecksHorizonOnce prunes a tombstone after a cursor: a stream
// joining from that cursor (whose horizon the server checked before the
// prune) ends with nothing sent, so its client reconnects and re-lists;
// a rejoin after the feed dropped a stream does not check again, and
// replays. A re-list from the same point sends the live entries only.
func TestJoinChecksHorizonOnce(t *testing.T) {
	t.Parallel()
	tf := newTestFeed(t)
	tf.session()
	rows, _, err := tf.st.ListQueue(t.Context(), store.QueueFilter{OutpostID: "w", Limit: 10, NoTotal: true})
	if err != nil || len(rows) != 1 {
		t.Fatalf("queue: %+v, %v", rows, err)
	}
	cursor := rows[0].Rev
	gone := tf.session()
	keep := tf.session()
	tomb := tf.end(gone)

	// Nothing is pruned before the age.
	tf.feed.PruneOnce(t.Context())
	if _, err := tf.st.GetQueueEntry(t.Context(), gone); err != nil {
		t.Fatalf("a fresh tombstone was pruned: %v", err)
	}
	tf.clock = tf.clock.Add(2 * time.Hour) // past the feed's hour
	tf.feed.PruneOnce(t.Context())
	if _, err := tf.st.GetQueueEntry(t.Context(), gone); err == nil {
		t.Fatal("a tombstone past the age was kept")
	}
	if h, err := tf.st.QueueHorizon(t.Context(), "w"); err != nil || h != tomb.Rev {
		t.Fatalf("horizon %d, %v; want %d", h, err, tomb.Rev)
	}

	sink := newEventSink()
	if st := tf.feed.Join(t.Context(), sink, "w", From{After: cursor}); st != nil || len(sink.events) != 0 {
		t.Fatalf("a first join from below the horizon: %v, %d events; want it ended with nothing sent", st, len(sink.events))
	}
	rejoin := &Stream{feed: tf.feed, outpostID: "w", after: cursor}
	if !tf.feed.join(t.Context(), sink, rejoin, false) {
		t.Fatal("a rejoin (no horizon check) ended")
	}
	tf.feed.unsubscribe("w", rejoin.sub)
	if ev := sink.next(t); ev.Object.Metadata.SessionID != keep {
		t.Fatalf("rejoin replayed %+v, want %s", ev, keep)
	}

	relist := newEventSink()
	st := tf.feed.Join(t.Context(), relist, "w", From{Relist: true, MaxRev: tomb.Rev})
	if st == nil {
		t.Fatal("a re-list ended")
	}
	st.Close()
	var got []string
	for len(relist.events) > 0 {
		got = append(got, (<-relist.events).Object.Metadata.SessionID)
	}
	if len(got) != 2 || got[1] != keep {
		t.Fatalf("re-list sent %v, want the two live entries ending with %s", got, keep)
	}
}

// TestSubHoldsNoIdleBuffer: a subscription holds no frames' buffer while
// none wait, queues up to streamFrames in order, and refuses more whole.
func TestSubHoldsNoIdleBuffer(t *testing.T) {
	t.Parallel()
	ws := &sub{ready: make(chan struct{}, 1), dropped: make(chan struct{})}
	if ws.pending != nil || cap(ws.ready) != 1 {
		t.Fatalf("a new subscription holds %d frames' room", cap(ws.pending))
	}
	batch := func(from, n int) []frame {
		out := make([]frame, n)
		for i := range out {
			out[i] = frame{rev: int64(from + i)}
		}
		return out
	}
	first := batch(1, 3)
	if !ws.add(first) || !ws.add(batch(4, streamFrames-3)) {
		t.Fatal("frames within the bound were refused")
	}
	if first[2].rev != 3 {
		t.Fatal("adding to a subscription changed the frames it was given first")
	}
	if ws.add(batch(100, 1)) {
		t.Fatal("a frame past streamFrames was queued")
	}
	select {
	case <-ws.ready:
	default:
		t.Fatal("frames wait and ready is not signalled")
	}
	got := ws.take()
	if len(got) != streamFrames || got[0].rev != 1 || got[streamFrames-1].rev != streamFrames {
		t.Fatalf("took %d frames from rev %d, want %d in order", len(got), got[0].rev, streamFrames)
	}
	if ws.pending != nil || ws.take() != nil {
		t.Fatal("frames are left after take")
	}
}
