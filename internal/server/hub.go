package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/redact"
	"github.com/outpost-sh/outpost/internal/store"
)

// remoteConn is one remote's gateway connection.
type remoteConn struct {
	sessionID  string
	epoch      int64
	acceptorID string
	instance   string // the remote process's id from hello; "" from older remotes
	// version is the protocol version the remote spoke in hello; every
	// frame sent to it carries it, and nothing newer is sent. Until hello
	// is read it is api.CurrentProtocolVersion.
	version   api.ProtocolVersion
	ws        *websocket.Conn
	done      chan struct{} // closed when the connection is finished
	closeOnce sync.Once
	closing   sync.WaitGroup // the close handshake started by close
	// gate holds calls back while the session is being suspended.
	gate callGate
	// snapshot is what the welcome asked the remote to restore; nil when
	// nothing. Set before the welcome is sent.
	snapshot *api.SnapshotInfo
	// restoreFrom is the stored snapshot behind snapshot.
	restoreFrom store.Snapshot
	// secrets redacts the session's secrets from what the remote sends
	// (outputRedactor); set before the connection's frames are read.
	secrets *redact.Set
	// moved is set when the session's remote went on through another
	// replica (a drop, or this replica's graceful stop): its disconnect is
	// not recorded, the new connection's replica writes the transcript.
	moved atomic.Bool
}

// send writes one JSON frame in the remote's protocol version. A frame
// newer than that version is not sent: the remote would not understand it.
func (c *remoteConn) send(ctx context.Context, f api.Frame) error {
	if since := api.FrameSince(f.Type); since > c.version {
		return fmt.Errorf("send %s frame to session %s: the frame needs protocol version %d and the remote speaks %d", f.Type, c.sessionID, since, c.version)
	}
	f.V = int(c.version)
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode %s frame: %w", f.Type, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("send %s frame to session %s: %w", f.Type, c.sessionID, err)
	}
	return nil
}

// close ends the connection with a status and reason the remote logs.
// Close waits for the peer's answer, so it runs in a goroutine of its own
// and never blocks the caller; the gateway handler that owns c waits for it
// (see closed).
func (c *remoteConn) close(code websocket.StatusCode, reason string) {
	c.closeOnce.Do(func() {
		c.closing.Go(func() { _ = c.ws.Close(code, reason) })
	})
}

// closed waits up to wait for the close handshake close started, then cuts
// the connection, so the handshake's goroutine has ended when it returns.
func (c *remoteConn) closed(wait time.Duration) {
	done := make(chan struct{})
	go func() { c.closing.Wait(); close(done) }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		_ = c.ws.CloseNow() // Close returns soon after
		<-done
	}
}

// hub tracks the one live connection of each session.
type hub struct {
	mu      sync.Mutex // guards conns
	conns   map[string]*remoteConn
	changed *notifier
}

func newHub() *hub { return &hub{conns: map[string]*remoteConn{}, changed: newNotifier()} }

// attach makes c the session's connection, closing any older one.
func (h *hub) attach(c *remoteConn) {
	h.mu.Lock()
	prev := h.conns[c.sessionID]
	h.conns[c.sessionID] = c
	h.mu.Unlock()
	if prev != nil && prev != c {
		prev.close(websocket.StatusPolicyViolation, "replaced by a newer connection for this session")
	}
	h.changed.notify()
}

// detach forgets c if it is still the session's connection.
func (h *hub) detach(c *remoteConn) {
	h.mu.Lock()
	if h.conns[c.sessionID] == c {
		delete(h.conns, c.sessionID)
	}
	h.mu.Unlock()
	h.changed.notify()
}

// get returns the session's live connection, or nil.
func (h *hub) get(sessionID string) *remoteConn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conns[sessionID]
}

// fence closes the session's connection if it belongs to a claim older
// than minEpoch: its connect token died with that claim.
func (h *hub) fence(sessionID string, minEpoch int64) {
	h.mu.Lock()
	c := h.conns[sessionID]
	if c != nil && c.epoch < minEpoch {
		delete(h.conns, sessionID)
	} else {
		c = nil
	}
	h.mu.Unlock()
	if c != nil {
		c.close(websocket.StatusPolicyViolation, "the claim this remote served has lapsed or moved")
		h.changed.notify()
	}
}

// dropIf detaches c if it is still the session's connection, and reports
// whether it did.
func (h *hub) dropIf(sessionID string, c *remoteConn) bool {
	h.mu.Lock()
	ok := h.conns[sessionID] == c
	if ok {
		delete(h.conns, sessionID)
	}
	h.mu.Unlock()
	if ok {
		h.changed.notify()
	}
	return ok
}

// end tells the session's remote that the session is over.
func (h *hub) end(sessionID, reason string) {
	if c := h.get(sessionID); c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.send(ctx, api.Frame{Type: api.FrameEnd, Reason: reason})
	}
}

// closeAll closes every connection (server shutdown); remotes reconnect.
func (h *hub) closeAll() {
	h.mu.Lock()
	conns := h.conns
	h.conns = map[string]*remoteConn{}
	h.mu.Unlock()
	for _, c := range conns {
		c.close(websocket.StatusGoingAway, "the server is shutting down")
	}
	h.changed.notify()
}
