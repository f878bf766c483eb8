package gateway

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

// Conn is one remote's gateway connection. The claim it serves
// (SessionID, Epoch, AcceptorID) is fixed when it is made; Instance and
// Version when its hello is read; Snapshot, RestoreFrom and Secrets before
// its welcome is sent. Nothing else of it changes but through its methods,
// its Gate and Moved.
type Conn struct {
	SessionID  string
	Epoch      int64
	AcceptorID string
	// Instance is the remote process's id from hello; "" from older
	// remotes.
	Instance string
	// Version is the protocol version the remote spoke in hello; every
	// frame sent to it carries it, and nothing newer is sent. Until hello
	// is read it is api.CurrentProtocolVersion.
	Version api.ProtocolVersion
	// LiveDesktop is the hello's Capabilities.LiveDesktop: the remote
	// takes the live desktop's frames.
	LiveDesktop bool
	// Gate holds calls back while the session is being suspended.
	Gate CallGate
	// Snapshot is what the welcome asked the remote to restore; nil when
	// nothing.
	Snapshot *api.SnapshotInfo
	// RestoreFrom is the stored snapshot behind Snapshot.
	RestoreFrom store.Snapshot
	// Secrets redacts the session's secrets from what the remote sends
	// (OutputRedactor).
	Secrets *redact.Set
	// Moved is set when the session's remote went on through another
	// replica (a drop, or this replica's graceful stop): its disconnect is
	// not recorded, the new connection's replica writes the transcript.
	Moved atomic.Bool

	ws        *websocket.Conn
	done      chan struct{} // closed when the connection is finished
	closeOnce sync.Once
	closing   sync.WaitGroup // the close handshake started by Close
}

// NewConn makes the connection of ws, a remote serving the claim of
// sessionID at epoch through acceptorID.
func NewConn(ws *websocket.Conn, sessionID string, epoch int64, acceptorID string) *Conn {
	return &Conn{SessionID: sessionID, Epoch: epoch, AcceptorID: acceptorID, ws: ws,
		Version: api.CurrentProtocolVersion, done: make(chan struct{})}
}

// Done is closed when the connection is finished.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Send writes one JSON frame in the remote's protocol version. A frame
// newer than that version is not sent: the remote would not understand it.
func (c *Conn) Send(ctx context.Context, f api.Frame) error {
	if since := api.FrameSince(f.Type); since > c.Version {
		return fmt.Errorf("send %s frame to session %s: the frame needs protocol version %d and the remote speaks %d", f.Type, c.SessionID, since, c.Version)
	}
	f.V = int(c.Version)
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode %s frame: %w", f.Type, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("send %s frame to session %s: %w", f.Type, c.SessionID, err)
	}
	return nil
}

// Ping sends a ping and waits for the remote's pong.
func (c *Conn) Ping(ctx context.Context) error { return c.ws.Ping(ctx) }

// CloseNow cuts the connection without a close handshake: the remote does
// not answer.
func (c *Conn) CloseNow() { _ = c.ws.CloseNow() }

// Close ends the connection with a status and reason the remote logs.
// Close waits for the peer's answer, so it runs in a goroutine of its own
// and never blocks the caller; the gateway handler that owns c waits for it
// (see Closed).
func (c *Conn) Close(code websocket.StatusCode, reason string) {
	c.closeOnce.Do(func() {
		c.closing.Go(func() { _ = c.ws.Close(code, reason) })
	})
}

// Closed waits up to wait for the close handshake Close started, then cuts
// the connection, so the handshake's goroutine has ended when it returns.
func (c *Conn) Closed(wait time.Duration) {
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
