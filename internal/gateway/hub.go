package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// Hub tracks the one live connection of each session on this replica.
type Hub struct {
	mu      sync.Mutex // guards conns
	conns   map[string]*Conn
	changed *Notifier
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{conns: map[string]*Conn{}, changed: NewNotifier()} }

// Attach makes c the session's connection, closing any older one.
func (h *Hub) Attach(c *Conn) {
	h.mu.Lock()
	prev := h.conns[c.SessionID]
	h.conns[c.SessionID] = c
	h.mu.Unlock()
	if prev != nil && prev != c {
		prev.Close(websocket.StatusPolicyViolation, "replaced by a newer connection for this session")
	}
	h.changed.Notify()
}

// Detach forgets c if it is still the session's connection.
func (h *Hub) Detach(c *Conn) {
	h.mu.Lock()
	if h.conns[c.SessionID] == c {
		delete(h.conns, c.SessionID)
	}
	h.mu.Unlock()
	h.changed.Notify()
}

// Get returns the session's live connection, or nil.
func (h *Hub) Get(sessionID string) *Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conns[sessionID]
}

// List returns the attached connections.
func (h *Hub) List() []*Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Conn, 0, len(h.conns))
	for _, c := range h.conns {
		out = append(out, c)
	}
	return out
}

// Leases returns the claim of every attached connection.
func (h *Hub) Leases() []store.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]store.Lease, 0, len(h.conns))
	for _, c := range h.conns {
		out = append(out, store.Lease{SessionID: c.SessionID, Epoch: c.Epoch})
	}
	return out
}

// Fence closes the session's connection if it belongs to a claim older
// than minEpoch: its connect token died with that claim.
func (h *Hub) Fence(sessionID string, minEpoch int64) {
	h.mu.Lock()
	c := h.conns[sessionID]
	if c != nil && c.Epoch < minEpoch {
		delete(h.conns, sessionID)
	} else {
		c = nil
	}
	h.mu.Unlock()
	if c != nil {
		c.Close(websocket.StatusPolicyViolation, "the claim this remote served has lapsed or moved")
		h.changed.Notify()
	}
}

// DropIf detaches c if it is still the session's connection, and reports
// whether it did.
func (h *Hub) DropIf(sessionID string, c *Conn) bool {
	h.mu.Lock()
	ok := h.conns[sessionID] == c
	if ok {
		delete(h.conns, sessionID)
	}
	h.mu.Unlock()
	if ok {
		h.changed.Notify()
	}
	return ok
}

// End tells the session's remote that the session is over.
func (h *Hub) End(sessionID, reason string) {
	if c := h.Get(sessionID); c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Send(ctx, api.Frame{Type: api.FrameEnd, Reason: reason})
	}
}

// CloseAll closes every connection (server shutdown); remotes reconnect.
func (h *Hub) CloseAll() {
	h.mu.Lock()
	conns := h.conns
	h.conns = map[string]*Conn{}
	h.mu.Unlock()
	for _, c := range conns {
		c.Close(websocket.StatusGoingAway, "the server is shutting down")
	}
	h.changed.Notify()
}
