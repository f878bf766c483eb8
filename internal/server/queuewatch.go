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
)

// A queue watch stream takes its outpost's changes from the queue feed
// (internal/queuefeed); the server decides its headers and holds its
// connection. Over HTTP/1.x the stream hijacks its connection once the
// headers are decided and is served by a small goroutine of its own
// writing straight to the socket, so an idle watch holds no net/http
// connection state, no bufio buffers and no handler stack; the response is
// the same event stream, delimited by the connection's close (Connection:
// close) instead of chunks. Over HTTP/2 the handler serves it itself.

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
	if from.Relist && !from.fresh {
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
			s.serveHijackedWatch(conn, r, outpostID, from, release)
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
	if st := s.queueFeed.Join(ctx, sink, outpostID, from.From); st != nil {
		st.Follow(ctx, sink)
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
// stack, and the server's sweep of hijacked connections (peers.go) sees
// the client close.
//
// The stream outlives the request's context, which ends when the handler
// returns: it checks the request's token on its own, and ends when the
// token is revoked or expires, as a follow does.
func (s *Server) serveHijackedWatch(conn net.Conn, r *http.Request, outpostID string, from watchFrom, release func()) {
	if !s.track() {
		conn.Close()
		release()
		return
	}
	valid, stopChecks := s.whileValid(s.runCtx, r, principalFrom(r.Context()))
	ctx, cancel := context.WithTimeout(valid, s.opts.WatchMaxDuration)
	// Closing the connection ends a write blocked on a client that does
	// not read.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	stopPeer := s.watchPeer(conn, cancel) // the client closed
	end := func() {
		stopPeer()
		stop()
		stopChecks()
		cancel()
		conn.Close()
		release()
	}
	sink := &connSink{conn: conn}
	st := s.queueFeed.Join(ctx, sink, outpostID, from.From)
	if st == nil {
		end()
		s.wg.Done() // track's
		return
	}
	go func() {
		defer s.wg.Done() // track's
		defer end()
		st.Follow(ctx, sink)
	}()
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
