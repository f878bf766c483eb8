package queuefeed

import (
	"context"
	"io"
	"sync"

	"github.com/outpost-sh/outpost/api"
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
	// HeldBy, when set, narrows the stream to one acceptor's entries:
	// the changes of the entries claimed by it, and, for an entry the
	// stream has shown claimed by it, the next change after that (its
	// release, lapse or deletion). A change the stream passes over still
	// moves its cursor: at each keepalive tick a stream that passed over
	// changes since it last wrote sends a bookmark event (api.WatchBookmark,
	// the cursor alone) instead of a comment, so that a reconnect replays
	// a few seconds of changes, not every change since the acceptor's
	// last. A stream that starts from a cursor knows nothing of what the
	// acceptor held before: a hold that ended while the client was away
	// is not shown, and the client learns it from the entry (a renewal or
	// a read).
	HeldBy string
}

// Stream is one watch joined to its outpost's feed.
type Stream struct {
	feed      *Feed
	outpostID string
	sub       *sub
	// after is the rev up to which the stream has passed every change:
	// written or, held, passed over; told is the cursor the client last
	// had, from an event or a bookmark.
	after, told int64
	held        *held // nil: every change
}

// held narrows a stream to one acceptor's entries (From.HeldBy). It is
// applied in rev order: to the stream's replays from the store, on the
// stream's goroutine, and, once the stream follows the feed, to the
// feed's frames as the reader hands them over (sub.add), so that a change
// ending a hold is judged after the change that showed it.
type held struct {
	acceptor string

	mu sync.Mutex // guards the following
	// shown are the sessions whose last change the stream showed claimed
	// by acceptor.
	shown map[string]struct{}
	// skipped is the highest rev passed over.
	skipped int64
	// undo, while logging, has shown's changes since logging began, so
	// that a hand-over the stream has no room for can be taken back.
	logging bool
	undo    []shownChange
}

// shownChange is one change of held.shown: session was, or was not, in it.
type shownChange struct {
	session string
	was     bool
}

// rollbackLocked takes back shown's changes since logging began and sets
// skipped back to skipped. h.mu must be held.
func (h *held) rollbackLocked(skipped int64) {
	for i := len(h.undo) - 1; i >= 0; i-- {
		if c := h.undo[i]; c.was {
			h.shown[c.session] = struct{}{}
		} else {
			delete(h.shown, c.session)
		}
	}
	h.skipped = skipped
}

func newHeld(acceptor string) *held {
	if acceptor == "" {
		return nil
	}
	return &held{acceptor: acceptor, shown: map[string]struct{}{}}
}

// wantsLocked reports whether the change of session at rev, claimed by
// acceptor ("" for none), goes to the stream, and records it. h.mu must be
// held.
func (h *held) wantsLocked(session, acceptor string, rev int64) bool {
	_, was := h.shown[session]
	if acceptor == h.acceptor {
		if h.logging && !was {
			h.undo = append(h.undo, shownChange{session, false})
		}
		h.shown[session] = struct{}{}
		return true
	}
	if was {
		if h.logging {
			h.undo = append(h.undo, shownChange{session, true})
		}
		delete(h.shown, session)
		return true
	}
	h.skipped = max(h.skipped, rev)
	return false
}

// wants is wantsLocked for a change read from the store.
func (h *held) wants(e store.QueueEntry) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.wantsLocked(e.SessionID, e.AcceptorID, e.Rev)
}

// filterLocked returns the frames above floor that the stream wants. When
// it passes any over, the result is frames' prefix capped at its length
// (frames is shared by every stream: an append copies), so a stream that
// wants none of a batch allocates nothing. h.mu must be held.
func (h *held) filterLocked(frames []frame, floor int64) []frame {
	var out []frame
	for i, fr := range frames {
		want := fr.rev > floor && h.wantsLocked(fr.session, fr.acceptor, fr.rev)
		switch {
		case want && out != nil:
			out = append(out, fr)
		case !want && out == nil:
			out = frames[:i:i]
		}
	}
	if out == nil {
		return frames
	}
	return out
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
	s := &Stream{feed: q, outpostID: outpostID, after: from.After, told: from.After, held: newHeld(from.HeldBy)}
	if from.Relist {
		if !q.relist(ctx, w, s, from.MaxRev) {
			return nil
		}
		s.after = from.MaxRev
	}
	if !q.join(ctx, w, s, !from.Relist) {
		return nil
	}
	return s
}

// join subscribes s to its outpost's feed, then writes what the store
// holds after its cursor; checkHorizon reads the horizon after the first
// page (see Join). False (unsubscribed) when the stream is over.
func (q *Feed) join(ctx context.Context, w Sink, s *Stream, checkHorizon bool) bool {
	ws, after, ok := q.replay(ctx, w, s, checkHorizon)
	if ok && s.held != nil {
		// From here the stream takes the feed's frames as the reader
		// hands them over, in rev order after its replay's: those that
		// came during the replay are judged now, after it.
		ws.mu.Lock()
		s.held.mu.Lock()
		ws.pending = s.held.filterLocked(ws.pending, after)
		s.held.mu.Unlock()
		ws.held, ws.floor = s.held, after
		ws.mu.Unlock()
	}
	s.sub, s.after = ws, after
	return ok
}

// replay is join's subscription and read of the store.
func (q *Feed) replay(ctx context.Context, w Sink, s *Stream, checkHorizon bool) (*sub, int64, bool) {
	outpostID, after := s.outpostID, s.after
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
		sent := false
		for _, e := range rows {
			after = e.Rev
			if s.held != nil && !s.held.wants(e) {
				continue
			}
			if !q.send(w, e) {
				q.unsubscribe(outpostID, ws)
				return nil, after, false
			}
			s.told, sent = e.Rev, true
		}
		if sent {
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
		dropped := q.tail(ctx, w, s)
		q.unsubscribe(s.outpostID, s.sub)
		if !dropped {
			return
		}
		// The frames still waiting are in order above the cursor, and a
		// held stream has judged them: written now, not read again (the
		// replay would judge a change ending a hold without the change
		// that showed it).
		if err := s.writeFrames(w, s.sub.take()); err != nil {
			return
		}
		w.Flush()
		if !q.join(ctx, w, s, false) {
			return
		}
	}
}

// Close leaves the feed without following it.
func (s *Stream) Close() { s.feed.unsubscribe(s.outpostID, s.sub) }

// tail writes the feed's frames to s until the feed drops the
// subscription (true) or the stream ends (false).
func (q *Feed) tail(ctx context.Context, w Sink, s *Stream) bool {
	ws := s.sub
	for {
		select {
		case <-ctx.Done():
			return false
		case <-ws.dropped:
			return true
		case <-ws.ready:
			if err := s.writeFrames(w, ws.take()); err != nil {
				return false
			}
			w.Flush()
		case <-q.keepalive():
			if err := q.keepOn(w, s); err != nil {
				return false
			}
			w.Flush()
		}
	}
}

// keepOn writes a keepalive: a comment, or for a held stream that passed
// over changes since the client's cursor, the frames waiting and then a
// bookmark past the changes passed over. The frames waiting and the
// highest rev passed over are taken together, under the lock the reader
// hands frames over with, so that no frame below the bookmark is left
// waiting (it would then be skipped as already passed).
func (q *Feed) keepOn(w Sink, s *Stream) error {
	if s.held != nil {
		ws := s.sub
		ws.mu.Lock()
		frames := ws.pending
		ws.pending = nil
		s.held.mu.Lock()
		skipped := s.held.skipped
		s.held.mu.Unlock()
		ws.mu.Unlock()
		if err := s.writeFrames(w, frames); err != nil {
			return err
		}
		s.after = max(s.after, skipped)
		if s.after > s.told {
			s.told = s.after
			_, err := w.Write(bookmark(s.after))
			return err
		}
	}
	_, err := io.WriteString(w, ": keepalive\n\n")
	return err
}

// bookmark is the server-sent event of a bookmark at rev.
func bookmark(rev int64) []byte {
	return []byte(`data: {"type":"` + api.WatchBookmark + `","cursor":"` + FormatCursor(rev) + `"}` + "\n\n")
}

// writeFrames writes frames, skipping those at or below the stream's
// cursor, and moves the cursor with each.
func (s *Stream) writeFrames(w io.Writer, frames []frame) error {
	for _, fr := range frames {
		if fr.rev <= s.after {
			continue
		}
		if _, err := w.Write(fr.data); err != nil {
			return err
		}
		s.after, s.told = fr.rev, fr.rev
	}
	return nil
}

// relist writes the live entries whose rev is at most maxRev, oldest change
// first (see From). It reports whether the stream is still good.
func (q *Feed) relist(ctx context.Context, w Sink, s *Stream, maxRev int64) bool {
	outpostID, after := s.outpostID, int64(0)
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
			after = e.Rev
			if s.held != nil && !s.held.wants(e) {
				continue
			}
			if !q.send(w, e) {
				return false
			}
			s.told = e.Rev
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
