package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/loop"
	"github.com/outpost-sh/outpost/internal/store"
)

// Queue watch fan-out, so that thousands of idle watchers cost the store
// one read per change instead of one each. Every committed change of a
// queue entry wakes only the reader of that entry's outpost; the reader
// reads the outpost's changes once from the store (ListQueue after its
// cursor), encodes each watch event once and hands the bytes to every
// watch stream of the outpost. A stream that falls behind by more than its
// buffer is dropped from the feed and reads the store itself from its own
// cursor before it joins again, so nothing is lost and order holds: the
// store stays the truth, a frame only saves the stream a read.

// streamFrames bounds the frames a watch stream may have waiting; a stream
// further behind reads the store itself.
const streamFrames = 32

// queueFeed fans queue changes out to watch streams, one outpostFeed per
// outpost that has streams.
type queueFeed struct {
	store store.Store
	log   *slog.Logger
	// run starts a reader; it is the server's (runCtx, wg).
	run func(func(ctx context.Context))

	// every spaces the streams' keepalive comments; one ticker for all
	// (keepalive), started with the first stream.
	every   time.Duration
	tickers sync.Once
	// ticks is closed at the next tick and then replaced: an atomic
	// load, as every stream reads it each time it waits.
	ticks atomic.Pointer[chan struct{}]

	mu       sync.Mutex // guards outposts
	outposts map[string]*outpostFeed
}

// outpostFeed is the reader of one outpost's changes and its streams.
type outpostFeed struct {
	id   string
	kick chan struct{} // cap 1: changes to read; kicks coalesce

	mu      sync.Mutex // guards streams
	streams map[*watchStream]struct{}

	// rev is the highest rev read; only the reader touches it after
	// subscribe created the feed.
	rev int64
}

// watchFrame is one encoded watch event ("data: …\n\n") and its rev.
type watchFrame struct {
	rev  int64
	data []byte
}

// watchStream is one watch's subscription to its outpost's feed.
type watchStream struct {
	frames chan watchFrame
	// dropped is closed when the feed dropped the stream (it fell behind,
	// or the feed could not read): the stream reads the store from its
	// cursor and subscribes again.
	dropped chan struct{}
	once    sync.Once
}

func newQueueFeed(st store.Store, log *slog.Logger, keepalive time.Duration, run func(func(ctx context.Context))) *queueFeed {
	q := &queueFeed{store: st, log: log, run: run, every: keepalive, outposts: map[string]*outpostFeed{}}
	ch := make(chan struct{})
	q.ticks.Store(&ch)
	return q
}

// keepalive returns a channel closed at the next keepalive tick, shared by
// every stream instead of a ticker each.
func (q *queueFeed) keepalive() <-chan struct{} { return *q.ticks.Load() }

func (q *queueFeed) tick(ctx context.Context) {
	loop.Every(ctx, q.every, func(context.Context) {
		next := make(chan struct{})
		close(*q.ticks.Swap(&next))
	})
}

// notify says the queue of outpostID changed (committed); "" says any
// outpost's may have (an outpost created or deleted, a fan-out resync), and
// wakes every reader. A change of one outpost wakes no other's streams.
func (q *queueFeed) notify(outpostID string) {
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
func (q *queueFeed) subscribe(outpostID string, after int64) *watchStream {
	q.tickers.Do(func() { q.run(q.tick) })
	ws := &watchStream{frames: make(chan watchFrame, streamFrames), dropped: make(chan struct{})}
	q.mu.Lock()
	defer q.mu.Unlock()
	f := q.outposts[outpostID]
	if f == nil {
		f = &outpostFeed{id: outpostID, kick: make(chan struct{}, 1), streams: map[*watchStream]struct{}{}, rev: after}
		q.outposts[outpostID] = f
		q.run(func(ctx context.Context) { q.read(ctx, f) })
	}
	f.mu.Lock()
	f.streams[ws] = struct{}{}
	f.mu.Unlock()
	return ws
}

// unsubscribe leaves the feed; the last stream to leave ends the reader.
func (q *queueFeed) unsubscribe(outpostID string, ws *watchStream) {
	q.mu.Lock()
	defer q.mu.Unlock()
	f := q.outposts[outpostID]
	if f == nil {
		return
	}
	f.mu.Lock()
	delete(f.streams, ws)
	empty := len(f.streams) == 0
	f.mu.Unlock()
	if empty {
		f.wake() // to end
	}
}

// read is the reader of f until ctx ends or f has no stream left.
func (q *queueFeed) read(ctx context.Context, f *outpostFeed) {
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
			rows, _, err := q.store.ListQueue(ctx, store.QueueFilter{OutpostID: f.id, AfterRev: f.rev, Limit: watchBatch, IncludeDeleted: true, NoTotal: true})
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
			frames := make([]watchFrame, len(rows))
			for i, e := range rows {
				frames[i] = watchFrame{rev: e.Rev, data: encodeEntry(e)}
			}
			f.rev = rows[len(rows)-1].Rev
			f.push(frames)
			if len(rows) < watchBatch {
				break
			}
		}
	}
}

// endIfIdle removes f when it has no stream; subscribe then starts a new
// one.
func (q *queueFeed) endIfIdle(f *outpostFeed) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.streams) > 0 {
		return false
	}
	delete(q.outposts, f.id)
	return true
}

// push hands frames to every stream, dropping a stream without room for
// them all (it reads the store instead; see watchStream).
func (f *outpostFeed) push(frames []watchFrame) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ws := range f.streams {
		if cap(ws.frames)-len(ws.frames) < len(frames) {
			delete(f.streams, ws)
			ws.drop()
			continue
		}
		for _, fr := range frames {
			ws.frames <- fr // only push sends, under f.mu: there is room
		}
	}
}

// dropAll drops every stream of f.
func (f *outpostFeed) dropAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ws := range f.streams {
		delete(f.streams, ws)
		ws.drop()
	}
}

func (ws *watchStream) drop() { ws.once.Do(func() { close(ws.dropped) }) }

// encodeEntry is the server-sent event of one watch event.
func encodeEntry(e store.QueueEntry) []byte {
	ev := api.WatchEvent{Type: api.WatchModified, Object: toAPIEntry(e), Cursor: formatCursor(e.Rev)}
	if e.Deleted {
		ev.Type = api.WatchDeleted
	}
	b, _ := json.Marshal(ev)
	out := make([]byte, 0, len(b)+8)
	out = append(out, "data: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}
