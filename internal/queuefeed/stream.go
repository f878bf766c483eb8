package queuefeed

import (
	"context"
	"io"

	"github.com/outpost-sh/outpost/internal/store"
)

// Sink is where a stream writes its event stream: a response with its
// Flush, or a hijacked connection that sends what was written at Flush.
type Sink interface {
	io.Writer
	Flush()
}

// From is where a stream starts.
type From struct {
	// After replays the changes after this rev.
	After int64
	// Relist, for a cursor the server did not issue (or one older than
	// the outpost's pruned tombstones), starts with the current state
	// instead: every live entry whose rev is at most MaxRev (the store's
	// highest rev when the stream began), oldest change first, then
	// every change after MaxRev, tombstones included. That is a replay
	// from the beginning without the tombstones of entries gone before
	// the stream; an entry that changes meanwhile has a rev above MaxRev,
	// so it comes in the replay and nothing is missed.
	Relist bool
	MaxRev int64
}

// Stream is one watch joined to its outpost's feed.
type Stream struct {
	feed      *Feed
	outpostID string
	sub       *sub
	after     int64
}

// Join starts a stream of outpostID's queue changes on w: it writes the
// re-list (From.Relist), subscribes to the feed, then writes what the
// store holds after the cursor, so no change slips between (see
// subscribe). It returns nil, unsubscribed, when the stream is over: the
// client is gone, the store could not be read, or tombstones after the
// cursor were pruned as the stream started.
//
// A client's cursor is checked against the pruned horizon before the
// stream starts (the server's listing does it); a prune committed between
// that check and the first read could have taken tombstones after the
// cursor. So a stream that replays from a cursor reads the horizon again
// after its first page and before anything of it is sent: when it passed
// the cursor, the stream ends with nothing replayed, and the client's
// reconnect, with the same cursor, re-lists.
func (q *Feed) Join(ctx context.Context, w Sink, outpostID string, from From) *Stream {
	after := from.After
	if from.Relist {
		if !q.relist(ctx, w, outpostID, from.MaxRev) {
			return nil
		}
		after = from.MaxRev
	}
	ws, after, ok := q.join(ctx, w, outpostID, after, !from.Relist)
	if !ok {
		return nil
	}
	return &Stream{feed: q, outpostID: outpostID, sub: ws, after: after}
}

// join subscribes a stream to its outpost's feed, then writes what the
// store holds after after; checkHorizon reads the horizon after the first
// page (see Join). It returns the subscription and the cursor; false
// (unsubscribed) when the stream is over.
func (q *Feed) join(ctx context.Context, w Sink, outpostID string, after int64, checkHorizon bool) (*sub, int64, bool) {
	ws := q.subscribe(outpostID, after)
	for {
		rows, _, err := q.store.ListQueue(ctx, store.QueueFilter{OutpostID: outpostID, AfterRev: after, Limit: Batch, IncludeDeleted: true, NoTotal: true})
		if err == nil && checkHorizon && after > 0 {
			checkHorizon = false
			var horizon int64
			if horizon, err = q.store.QueueHorizon(ctx, outpostID); err == nil && after < horizon {
				q.log.Info("queue watch: tombstones after the cursor were pruned as the stream started; ending it so the client re-lists",
					"outpost", outpostID, "cursor", after, "horizon", horizon)
				q.unsubscribe(outpostID, ws)
				return nil, after, false
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				q.log.Warn("watch queue", "err", err)
			}
			q.unsubscribe(outpostID, ws)
			return nil, after, false
		}
		for _, e := range rows {
			if !q.send(w, e) {
				q.unsubscribe(outpostID, ws)
				return nil, after, false
			}
			after = e.Rev
		}
		if len(rows) > 0 {
			w.Flush()
		}
		if len(rows) < Batch {
			return ws, after, true
		}
	}
}

// Follow writes the feed's frames to the stream, skipping those at or
// below its cursor, and joins again whenever the feed drops it (it fell
// behind), until ctx ends or a write fails. The stream has left the feed
// when Follow returns.
func (s *Stream) Follow(ctx context.Context, w Sink) {
	q := s.feed
	for {
		var dropped bool
		s.after, dropped = q.tail(ctx, w, s.sub, s.after)
		q.unsubscribe(s.outpostID, s.sub)
		if !dropped {
			return
		}
		var ok bool
		if s.sub, s.after, ok = q.join(ctx, w, s.outpostID, s.after, false); !ok {
			return
		}
	}
}

// Close leaves the feed without following it.
func (s *Stream) Close() { s.feed.unsubscribe(s.outpostID, s.sub) }

// tail writes the feed's frames until the feed drops the subscription
// (true) or the stream ends (false), and returns the cursor.
func (q *Feed) tail(ctx context.Context, w Sink, ws *sub, after int64) (int64, bool) {
	for {
		select {
		case <-ctx.Done():
			return after, false
		case <-ws.dropped:
			return after, true
		case <-ws.ready:
			var err error
			if after, err = writeFrames(w, ws.take(), after); err != nil {
				return after, false
			}
			w.Flush()
		case <-q.keepalive():
			if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
				return after, false
			}
			w.Flush()
		}
	}
}

// writeFrames writes frames, skipping those at or below after, and
// returns the new cursor.
func writeFrames(w io.Writer, frames []frame, after int64) (int64, error) {
	for _, fr := range frames {
		if fr.rev <= after {
			continue
		}
		if _, err := w.Write(fr.data); err != nil {
			return after, err
		}
		after = fr.rev
	}
	return after, nil
}

// relist writes the live entries whose rev is at most maxRev, oldest change
// first (see From). It reports whether the stream is still good.
func (q *Feed) relist(ctx context.Context, w Sink, outpostID string, maxRev int64) bool {
	after := int64(0)
	for {
		rows, _, err := q.store.ListQueue(ctx, store.QueueFilter{OutpostID: outpostID, AfterRev: after, Limit: Batch, NoTotal: true})
		if err != nil {
			if ctx.Err() == nil {
				q.log.Warn("watch queue: re-list", "err", err)
			}
			return false
		}
		for _, e := range rows {
			if e.Rev > maxRev {
				w.Flush()
				return true
			}
			if !q.send(w, e) {
				return false
			}
			after = e.Rev
		}
		w.Flush()
		if len(rows) < Batch {
			return true
		}
	}
}

// send writes one watch event; false when the client is gone.
func (q *Feed) send(w io.Writer, e store.QueueEntry) bool {
	_, err := w.Write(q.encode(e))
	return err == nil
}
