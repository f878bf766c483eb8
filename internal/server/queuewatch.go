package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// A queue watch stream takes its outpost's changes
// from the queue feed (queuefeed.go). Over HTTP/1.x the stream hijacks
// its connection once the headers are decided and is served by a small
// goroutine of its own writing straight to the socket, so an idle watch
// holds no net/http connection state, no bufio buffers and no handler
// stack; the response is the same event stream, delimited by the
// connection's close (Connection: close) instead of chunks. Over HTTP/2
// the handler serves it itself.

// watchBatch is how many rows a watch reads at a time.
const watchBatch = 500

// watchSink is where a stream writes: the response (with its Flush) or a
// hijacked connection (connSink).
type watchSink interface {
	io.Writer
	http.Flusher
}

// watchQueue streams queue changes as server-sent events, ending the
// stream within WatchMaxDuration so clients reconnect.
func (s *Server) watchQueue(w http.ResponseWriter, r *http.Request, outpostID string, from watchFrom) error {
	flusher, ok := w.(http.Flusher)
	if !ok {
		return errors.New("response writer cannot flush")
	}
	release, err := s.streams.acquire(w, r)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	if from.relist {
		h.Set(api.HeaderWatchRelist, "true")
		c := r.URL.Query().Get("cursor")
		if len(c) > 64 {
			c = c[:64] + "..."
		}
		if from.stale {
			s.log.Info("queue watch from a cursor older than the queue's pruned tombstones; re-listing the queue in the stream",
				"cursor", c, "outpost", outpostID)
		} else {
			s.log.Info("queue watch from a cursor this server did not issue; re-listing the queue in the stream",
				"cursor", c, "outpost", outpostID)
		}
	}
	if r.ProtoMajor == 1 {
		if conn, ok := hijackWatch(w); ok {
			s.serveHijackedWatch(conn, outpostID, from, release)
			return nil
		}
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.WatchMaxDuration)
	defer cancel()
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, ": watching\n\n")
	flusher.Flush()
	sink := struct {
		io.Writer
		http.Flusher
	}{w, flusher}
	if after, ok := s.watchStart(ctx, sink, outpostID, from); ok {
		if ws, after, ok := s.watchJoin(ctx, sink, outpostID, after, !from.relist); ok {
			s.watchFollow(ctx, sink, outpostID, ws, after)
		}
	}
	return nil
}

// hijackWatch takes the connection of a watch and writes the response's
// head and first comment on it; false (nothing written) when the response
// writer cannot be hijacked.
func hijackWatch(w http.ResponseWriter) (net.Conn, bool) {
	var head bytes.Buffer
	head.WriteString("HTTP/1.1 200 OK\r\n")
	h := w.Header().Clone()
	h.Set("Connection", "close")
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	_ = h.Write(&head)
	head.WriteString("\r\n: watching\n\n")
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, false
	}
	_ = conn.SetDeadline(time.Time{}) // net/http's read deadlines are the caller's now
	if _, err := conn.Write(head.Bytes()); err != nil {
		conn.Close()
		return conn, true // the client is gone: nothing to serve
	}
	return conn, true
}

// serveHijackedWatch serves a watch on its hijacked connection. The replay
// from the store runs here, on the handler's goroutine; the stream then
// follows the feed on a goroutine of its own, which starts with a small
// stack, and one more waits for the client to close.
func (s *Server) serveHijackedWatch(conn net.Conn, outpostID string, from watchFrom, release func()) {
	if !s.track() {
		conn.Close()
		release()
		return
	}
	ctx, cancel := context.WithTimeout(s.runCtx, s.opts.WatchMaxDuration)
	// Closing the connection ends a write blocked on a client that does
	// not read, and the read below.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	s.wg.Go(func() {
		var b [1]byte
		for {
			if _, err := conn.Read(b[:]); err != nil {
				cancel() // the client closed, or the stream ended
				return
			}
		}
	})
	end := func() {
		stop()
		cancel()
		conn.Close()
		release()
	}
	sink := &connSink{conn: conn}
	after, ok := s.watchStart(ctx, sink, outpostID, from)
	var ws *watchStream
	if ok {
		ws, after, ok = s.watchJoin(ctx, sink, outpostID, after, !from.relist)
	}
	if !ok {
		end()
		s.wg.Done() // track's
		return
	}
	go func() {
		defer s.wg.Done() // track's
		defer end()
		s.watchFollow(ctx, sink, outpostID, ws, after)
	}()
}

// watchStart replays what a stream starts with (the re-list for a foreign
// cursor) and returns the cursor it follows from; false when the stream is
// over.
func (s *Server) watchStart(ctx context.Context, w watchSink, outpostID string, from watchFrom) (int64, bool) {
	if !from.relist {
		return from.after, true
	}
	if !s.relist(ctx, w, w, outpostID, from.maxRev) {
		return 0, false
	}
	return from.maxRev, true
}

// watchJoin subscribes the stream to its outpost's feed, then writes what
// the store holds after after (so no change slips between: see
// queueFeed.subscribe). It returns the subscription and the cursor; false
// (unsubscribed) when the stream is over.
//
// A client's cursor was checked against the pruned horizon before the
// stream started (listQueue); a prune committed between that check and the
// first read could have taken tombstones after the cursor. So on the
// stream's first join (checkHorizon) the horizon is read again after the
// first page and before anything of it is sent: when it passed the cursor,
// the stream ends with nothing replayed, and the client's reconnect, with
// the same cursor, re-lists.
func (s *Server) watchJoin(ctx context.Context, w watchSink, outpostID string, after int64, checkHorizon bool) (*watchStream, int64, bool) {
	ws := s.queueFeed.subscribe(outpostID, after)
	for {
		rows, _, err := s.store.ListQueue(ctx, store.QueueFilter{OutpostID: outpostID, AfterRev: after, Limit: watchBatch, IncludeDeleted: true, NoTotal: true})
		if err == nil && checkHorizon && after > 0 {
			checkHorizon = false
			var horizon int64
			if horizon, err = s.store.QueueHorizon(ctx, outpostID); err == nil && after < horizon {
				s.log.Info("queue watch: tombstones after the cursor were pruned as the stream started; ending it so the client re-lists",
					"outpost", outpostID, "cursor", after, "horizon", horizon)
				s.queueFeed.unsubscribe(outpostID, ws)
				return nil, after, false
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("watch queue", "err", err)
			}
			s.queueFeed.unsubscribe(outpostID, ws)
			return nil, after, false
		}
		for _, e := range rows {
			if !sendEntry(w, e) {
				s.queueFeed.unsubscribe(outpostID, ws)
				return nil, after, false
			}
			after = e.Rev
		}
		if len(rows) > 0 {
			w.Flush()
		}
		if len(rows) < watchBatch {
			return ws, after, true
		}
	}
}

// watchFollow writes the feed's frames to a joined stream, skipping those
// at or below the cursor, and joins again whenever the feed drops it, until
// the stream ends.
func (s *Server) watchFollow(ctx context.Context, w watchSink, outpostID string, ws *watchStream, after int64) {
	for {
		var dropped bool
		after, dropped = s.watchTail(ctx, w, ws, after)
		s.queueFeed.unsubscribe(outpostID, ws)
		if !dropped {
			return
		}
		var ok bool
		if ws, after, ok = s.watchJoin(ctx, w, outpostID, after, false); !ok {
			return
		}
	}
}

// watchTail writes the feed's frames until the feed drops the stream
// (true) or the stream ends (false), and returns the cursor.
func (s *Server) watchTail(ctx context.Context, w watchSink, ws *watchStream, after int64) (int64, bool) {
	for {
		select {
		case <-ctx.Done():
			return after, false
		case <-ws.dropped:
			return after, true
		case fr := <-ws.frames:
			var err error
			if after, err = writeFrames(w, ws, fr, after); err != nil {
				return after, false
			}
			w.Flush()
		case <-s.queueFeed.keepalive():
			if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
				return after, false
			}
			w.Flush()
		}
	}
}

// writeFrames writes fr and whatever else is waiting, skipping frames at
// or below after, and returns the new cursor.
func writeFrames(w io.Writer, ws *watchStream, fr watchFrame, after int64) (int64, error) {
	for {
		if fr.rev > after {
			if _, err := w.Write(fr.data); err != nil {
				return after, err
			}
			after = fr.rev
		}
		select {
		case fr = <-ws.frames:
		default:
			return after, nil
		}
	}
}

// connSink writes a hijacked stream: what is written between flushes goes
// to the socket in one write at Flush, and a failed write fails the next
// Write. The first Write of a flush keeps its slice without copying; a
// frame's bytes are never changed after they are written.
type connSink struct {
	conn    net.Conn
	pending []byte
	err     error
}

func (c *connSink) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.pending == nil {
		c.pending = p
	} else {
		c.pending = append(c.pending[:len(c.pending):len(c.pending)], p...)
	}
	return len(p), nil
}

func (c *connSink) Flush() {
	if len(c.pending) > 0 && c.err == nil {
		_, c.err = c.conn.Write(c.pending)
	}
	c.pending = nil
}

// relist writes the live entries whose rev is at most maxRev, oldest change
// first (see watchFrom). It reports whether the stream is still good.
func (s *Server) relist(ctx context.Context, w io.Writer, flusher http.Flusher, outpostID string, maxRev int64) bool {
	after := int64(0)
	for {
		rows, _, err := s.store.ListQueue(ctx, store.QueueFilter{OutpostID: outpostID, AfterRev: after, Limit: watchBatch, NoTotal: true})
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("watch queue: re-list", "err", err)
			}
			return false
		}
		for _, e := range rows {
			if e.Rev > maxRev {
				flusher.Flush()
				return true
			}
			if !sendEntry(w, e) {
				return false
			}
			after = e.Rev
		}
		flusher.Flush()
		if len(rows) < watchBatch {
			return true
		}
	}
}

// sendEntry writes one watch event; false when the client is gone.
func sendEntry(w io.Writer, e store.QueueEntry) bool {
	_, err := w.Write(encodeEntry(e))
	return err == nil
}
