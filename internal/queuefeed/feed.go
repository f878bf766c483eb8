// Package queuefeed fans a fleet's queue changes out to its watch streams
// (GET /v1/queue?watch=true), so that thousands of idle watchers cost the
// store one read per change instead of one each, and prunes the queue's
// tombstones.
//
// Every committed change of a queue entry wakes only the reader of that
// entry's outpost (Feed.Notify); the reader reads the outpost's changes
// once from the store (ListQueue after its cursor), encodes each watch
// event once and hands the bytes to every stream of the outpost. A stream
// that falls behind by more than its buffer is dropped from the feed and
// reads the store itself from its own cursor before it joins again, so
// nothing is lost and order holds: the store stays the truth, a frame only
// saves the stream a read.
//
// The package knows nothing of HTTP: the server decides a stream's
// headers, holds its connection and hands the feed a Sink to write the
// event stream to. Who notifies the feed (the state machine's hooks, the
// store's change feed of other replicas) is the server's business too.
package queuefeed

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/loop"
	"github.com/outpost-sh/outpost/internal/store"
)

// Store is what the feed reads and prunes: a subset of store.Store.
type Store interface {
	// ListQueue reads queue entries; the feed reads one outpost's after
	// a rev, tombstones included.
	ListQueue(ctx context.Context, f store.QueueFilter) ([]store.QueueEntry, int, error)
	// QueueHorizon is the highest rev of an outpost's pruned tombstones.
	QueueHorizon(ctx context.Context, outpostID string) (int64, error)
	// PruneQueue deletes up to limit tombstones older than before.
	PruneQueue(ctx context.Context, before time.Time, limit int) (int, error)
}

// Options configure a Feed.
type Options struct {
	// Store is read for the changes and pruned; required.
	Store Store
	// Logger gets what the feed cannot tell a client; nil discards it.
	Logger *slog.Logger
	// Entry is the API view of a queue entry, the object of a watch
	// event; required.
	Entry func(store.QueueEntry) api.QueueEntry
	// Keepalive spaces the streams' keepalive comments; 0 means 15s.
	Keepalive time.Duration
	// Go starts fn on a goroutine its owner waits for, with a context
	// that ends when the owner stops; required. The feed starts a reader
	// per outpost with streams and one keepalive ticker with it.
	Go func(fn func(ctx context.Context))
	// Now is the clock of the tombstones' age; nil means time.Now.
	Now func() time.Time
	// TombstoneAge is how long a tombstone is kept (see TombstoneAge);
	// 0 means TombstoneAge(4m30s), the server's default stream length.
	TombstoneAge time.Duration
}

// Batch is how many rows a stream or reader reads at a time.
const Batch = 500

// streamFrames bounds the frames a stream may have waiting; a stream
// further behind reads the store itself.
const streamFrames = 32

// Feed fans queue changes out to streams, one outpostFeed per outpost
// that has streams.
type Feed struct {
	store Store
	log   *slog.Logger
	entry func(store.QueueEntry) api.QueueEntry
	run   func(func(ctx context.Context))
	now   func() time.Time
	age   time.Duration

	// every spaces the streams' keepalive comments; one ticker for all
	// (tick), started with the first stream.
	every   time.Duration
	tickers sync.Once
	// ticks is closed at the next tick and then replaced: an atomic
	// load, as every stream reads it each time it waits.
	ticks atomic.Pointer[chan struct{}]

	mu       sync.Mutex // guards outposts
	outposts map[string]*outpostFeed
}

// outpostFeed is the reader of one outpost's changes and its subscribers.
type outpostFeed struct {
	id   string
	kick chan struct{} // cap 1: changes to read; kicks coalesce

	mu   sync.Mutex // guards subs
	subs map[*sub]struct{}

	// rev is the highest rev read; only the reader touches it after
	// subscribe created the feed.
	rev int64
}

// frame is one encoded watch event ("data: …\n\n"), its rev, and its
// entry's session and acceptor (for held streams).
type frame struct {
	rev               int64
	data              []byte
	session, acceptor string
}

// sub is one stream's subscription to its outpost's feed. The frames
// waiting for it are a slice that is nil while none wait, not a channel
// with room for streamFrames: an idle stream, which is nearly every one of
// a large fleet's, holds no buffer.
type sub struct {
	// ready has a value while frames wait in pending (cap 1).
	ready   chan struct{}
	mu      sync.Mutex // guards the following
	pending []frame    // at most streamFrames
	// held, once a held stream's replay is over, judges the frames
	// handed over, passing over those above floor it does not want and
	// every one at or below floor (the replay had them); nil: all go.
	held  *held
	floor int64
	// dropped is closed when the feed dropped the subscription (it fell
	// behind, or the feed could not read): the stream reads the store
	// from its cursor and subscribes again.
	dropped chan struct{}
	once    sync.Once
}

// New returns a feed; it starts nothing until a stream joins.
func New(o Options) *Feed {
	f := &Feed{store: o.Store, log: o.Logger, entry: o.Entry, run: o.Go, now: o.Now, age: o.TombstoneAge,
		every: o.Keepalive, outposts: map[string]*outpostFeed{}}
	if f.log == nil {
		f.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if f.now == nil {
		f.now = time.Now
	}
	if f.every <= 0 {
		f.every = 15 * time.Second
	}
	if f.age <= 0 {
		f.age = TombstoneAge(270 * time.Second)
	}
	ch := make(chan struct{})
	f.ticks.Store(&ch)
	return f
}

// FormatCursor is the fleet API's cursor of a rev.
func FormatCursor(rev int64) string { return strconv.FormatInt(rev, 10) }

// keepalive returns a channel closed at the next keepalive tick, shared by
// every stream instead of a ticker each.
func (q *Feed) keepalive() <-chan struct{} { return *q.ticks.Load() }

func (q *Feed) tick(ctx context.Context) {
	loop.Every(ctx, q.every, func(context.Context) {
		next := make(chan struct{})
		close(*q.ticks.Swap(&next))
	})
}

// Notify says the queue of outpostID changed (committed); "" says any
// outpost's may have (an outpost created or deleted, a fan-out resync), and
// wakes every reader. A change of one outpost wakes no other's streams.
func (q *Feed) Notify(outpostID string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if outpostID != "" {
		if f := q.outposts[outpostID]; f != nil {
			f.wake()
		}
		if f := q.outposts[""]; f != nil {
			f.wake() // the watches of every outpost
		}
		return
	}
	for _, f := range q.outposts {
		f.wake()
	}
}

func (f *outpostFeed) wake() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// subscribe joins a stream to its outpost's feed. The stream reads the
// store after its cursor once subscribed, then takes the frames whose rev
// is above what it read: a change committed before subscribe returned is
// in that read, one committed later reaches the feed's reader after the
// stream joined. after is the stream's cursor; a new feed starts its own
// cursor there, so it misses nothing the stream has not read.
func (q *Feed) subscribe(outpostID string, after int64) *sub {
	q.tickers.Do(func() { q.run(q.tick) })
	ws := &sub{ready: make(chan struct{}, 1), dropped: make(chan struct{})}
	q.mu.Lock()
	defer q.mu.Unlock()
	f := q.outposts[outpostID]
	if f == nil {
		f = &outpostFeed{id: outpostID, kick: make(chan struct{}, 1), subs: map[*sub]struct{}{}, rev: after}
		q.outposts[outpostID] = f
		q.run(func(ctx context.Context) { q.read(ctx, f) })
	}
	f.mu.Lock()
	f.subs[ws] = struct{}{}
	f.mu.Unlock()
	return ws
}

// unsubscribe leaves the feed; the last stream to leave ends the reader.
func (q *Feed) unsubscribe(outpostID string, ws *sub) {
	q.mu.Lock()
	defer q.mu.Unlock()
	f := q.outposts[outpostID]
	if f == nil {
		return
	}
	f.mu.Lock()
	delete(f.subs, ws)
	empty := len(f.subs) == 0
	f.mu.Unlock()
	if empty {
		f.wake() // to end
	}
}

// read is the reader of f until ctx ends or f has no stream left.
func (q *Feed) read(ctx context.Context, f *outpostFeed) {
	defer f.dropAll()
	f.wake() // a first read from the first stream's cursor
	for {
		select {
		case <-ctx.Done():
			q.mu.Lock()
			if q.outposts[f.id] == f {
				delete(q.outposts, f.id)
			}
			q.mu.Unlock()
			return
		case <-f.kick:
		}
		if q.endIfIdle(f) {
			return
		}
		for {
			rows, _, err := q.store.ListQueue(ctx, store.QueueFilter{OutpostID: f.id, AfterRev: f.rev, Limit: Batch, IncludeDeleted: true, NoTotal: true})
			if err != nil {
				if ctx.Err() == nil {
					q.log.Warn("queue feed: read the queue; its watches read it themselves", "outpost", f.id, "err", err)
				}
				f.dropAll()
				break
			}
			if len(rows) == 0 {
				break
			}
			frames := make([]frame, len(rows))
			for i, e := range rows {
				frames[i] = frame{rev: e.Rev, data: q.encode(e), session: e.SessionID, acceptor: e.AcceptorID}
			}
			f.rev = rows[len(rows)-1].Rev
			f.push(frames)
			if len(rows) < Batch {
				break
			}
		}
	}
}

// endIfIdle removes f when it has no stream; subscribe then starts a new
// one.
func (q *Feed) endIfIdle(f *outpostFeed) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.subs) > 0 {
		return false
	}
	delete(q.outposts, f.id)
	return true
}

// push hands frames to every subscriber, dropping one without room for
// them all (it reads the store instead; see sub).
func (f *outpostFeed) push(frames []frame) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ws := range f.subs {
		if !ws.add(frames) {
			delete(f.subs, ws)
			ws.drop()
		}
	}
}

// add queues frames for the stream; false, queuing nothing, when that
// would make more than streamFrames wait. The first frames to wait are
// frames itself, shared by every stream and never written to: capped at
// its length, so a later add copies.
func (ws *sub) add(frames []frame) bool {
	ws.mu.Lock()
	if h := ws.held; h != nil {
		h.mu.Lock()
		skipped := h.skipped
		// Filtering only shrinks the batch: without room for all of it,
		// the judgement may have to be taken back.
		h.logging = len(ws.pending)+len(frames) > streamFrames
		frames = h.filterLocked(frames, ws.floor)
		full := len(ws.pending)+len(frames) > streamFrames
		if full {
			// Not queued: the replay after the drop judges them again,
			// so this judgement is taken back.
			h.rollbackLocked(skipped)
		}
		clear(h.undo)
		h.logging, h.undo = false, h.undo[:0]
		h.mu.Unlock()
		if full {
			ws.mu.Unlock()
			return false
		}
		if len(frames) == 0 {
			ws.mu.Unlock()
			return true // nothing for this stream: no wake
		}
	}
	if len(ws.pending)+len(frames) > streamFrames {
		ws.mu.Unlock()
		return false
	}
	if ws.pending == nil {
		ws.pending = frames[:len(frames):len(frames)]
	} else {
		ws.pending = append(ws.pending, frames...)
	}
	ws.mu.Unlock()
	select {
	case ws.ready <- struct{}{}:
	default: // already signalled
	}
	return true
}

// take returns the frames waiting, oldest first, and leaves none.
func (ws *sub) take() []frame {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	p := ws.pending
	ws.pending = nil
	return p
}

// dropAll drops every subscriber of f.
func (f *outpostFeed) dropAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ws := range f.subs {
		delete(f.subs, ws)
		ws.drop()
	}
}

func (ws *sub) drop() { ws.once.Do(func() { close(ws.dropped) }) }

// encode is the server-sent event of one watch event.
func (q *Feed) encode(e store.QueueEntry) []byte {
	ev := api.WatchEvent{Type: api.WatchModified, Object: q.entry(e), Cursor: FormatCursor(e.Rev)}
	if e.Deleted {
		ev.Type = api.WatchDeleted
	}
	b, _ := json.Marshal(ev)
	out := make([]byte, 0, len(b)+8)
	out = append(out, "data: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}
