// Package gateway serves the remotes' WebSocket connections: one per
// session whose claim a remote serves. It holds the connections (Hub),
// pings them and refuses a second live remote instance of one claim
// (liveness.go), holds calls back while a session is suspended
// (CallGate), reads the remote's frames, turns its output into transcript
// events and spills (Output), and redacts the session's secrets from all
// it sends (OutputRedactor).
//
// What the gateway cannot decide it asks the server through Handler: who
// may connect, what a remote's hello means for the session and what the
// welcome says, and what becomes of results, artifacts, restores and
// snapshots. The gateway knows connections and frames; the server knows
// claims, sessions and their state.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

const (
	// readLimit bounds one gateway message.
	readLimit = 32 << 20
	// closeHandshakeWait bounds how long a finished connection waits for
	// the remote to answer its close before it is cut.
	closeHandshakeWait = 5 * time.Second
	// flushEvery is how often output waiting in a connection's batch is
	// written to the transcript.
	flushEvery = 100 * time.Millisecond
)

// Welcome is the server's answer to a remote's hello.
type Welcome struct {
	// Refused, when not "", refuses the remote: it goes out in an error
	// frame and the connection closes as a policy violation with
	// CloseReason. The remote is not attached.
	Refused     string
	CloseReason string
	// Frame is sent otherwise: a welcome, or an end frame when the
	// session is over or suspended.
	Frame api.Frame
}

// Handler is what the gateway asks of the server. Its methods are called
// from the connection's handler goroutine, in the order of the
// connection's life: Admit, Hello, Attached, then the frames' methods,
// then Disconnected.
type Handler interface {
	// Admit checks r's connect token against the session's current claim
	// and counts the connection in the server's shutdown. It returns the
	// session's queue entry, whose claim the token stands for. When it
	// returns false it has written the refusal; otherwise done is called
	// when the connection has ended.
	Admit(w http.ResponseWriter, r *http.Request) (e store.QueueEntry, done func(), ok bool)
	// Refused is told that c was refused because another live remote
	// instance (serving) serves the session under the same claim.
	Refused(c *Conn, serving string)
	// Hello decides the remote's hello, its version checked and no other
	// live instance serving the claim: whether the remote is refused, and
	// what the welcome says (the session's env and secrets, what to
	// restore). e is the entry Admit returned. It sets c's Snapshot,
	// RestoreFrom and Secrets, and records the remote's arrival. An error
	// ends the connection without a word: the remote reconnects.
	Hello(ctx context.Context, c *Conn, e store.QueueEntry, hello *api.Frame) (Welcome, error)
	// Attached follows c's attach to the hub, while the gateway pings
	// the remote: the server keeps its claim alive and starts the
	// session's runner when run (the welcome went out). It returns false
	// when the claim moved since Admit: the connection is closed. leave is
	// called, either way, when the connection ends.
	Attached(ctx context.Context, c *Conn, run bool) (leave func(), ok bool)
	// Result delivers a call's result, redacted, with the output events
	// not yet on the transcript, for the result's transaction to record
	// before it. It reports whether it took them: when not, the gateway
	// records them itself.
	Result(ctx context.Context, c *Conn, f api.Frame, output []api.Event) bool
	// Artifacts receives the artifact uploads of c.
	Artifacts(c *Conn) Artifacts
	// Restored records how the remote restored the session's
	// repositories and snapshot (a restored frame, redacted).
	Restored(ctx context.Context, c *Conn, f api.Frame)
	// Suspended takes the remote's answer to a suspend or a checkpoint (a
	// suspended or checkpointed frame, redacted).
	Suspended(c *Conn, f api.Frame)
	// DesktopTiles receives a frame of the live desktop (an
	// api.DesktopTiles binary message); msg is only valid during the
	// call.
	DesktopTiles(c *Conn, msg []byte)
	// Disconnected records that c's connection closed while the session
	// may go on: not at a server's shutdown, nor when the session's
	// remote went on through another replica (Conn.Moved).
	Disconnected(c *Conn)
}

// Artifacts receives one connection's artifact uploads: their frames and
// their binary chunks, in the order the remote sent them.
type Artifacts interface {
	Frame(ctx context.Context, f api.Frame)
	Chunk(ctx context.Context, msg []byte)
	// Close discards the uploads the connection did not finish.
	Close()
}

// Options configure a Gateway.
type Options struct {
	// PingEvery is how often each attached remote is pinged, and how
	// long its pong may take before the connection is cut. Zero means
	// 15 seconds.
	PingEvery time.Duration
}

// Gateway serves the remotes' connections (GET api.GatewayPath).
type Gateway struct {
	hub     *Hub
	output  *Output
	handler Handler
	log     *slog.Logger
	opts    Options
}

// New returns a gateway that attaches connections to hub, writes their
// output through output and asks h what it cannot decide.
func New(hub *Hub, output *Output, h Handler, log *slog.Logger, opts Options) *Gateway {
	return &Gateway{hub: hub, output: output, handler: h, log: log, opts: opts}
}

// ServeHTTP serves one remote's WebSocket for the life of its connection.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e, done, ok := g.handler.Admit(w, r)
	if !ok {
		return
	}
	defer done()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		g.log.Warn("gateway accept", "session", e.SessionID, "err", err)
		return
	}
	ws.SetReadLimit(readLimit)
	c := NewConn(ws, e.SessionID, e.Epoch, e.AcceptorID)
	defer func() {
		g.hub.Detach(c) // first, so runners stop choosing this connection
		close(c.done)
		c.Close(websocket.StatusNormalClosure, "")
		c.Closed(closeHandshakeWait)
	}()
	ctx := r.Context()
	hello, err := readHello(ctx, ws, c.SessionID)
	if err != nil {
		g.log.Warn("gateway hello", "session", c.SessionID, "v", hello.V, "err", err)
		if v := api.ProtocolVersion(hello.V); v.Supported() {
			c.Version = v // refused for another reason: say it in the remote's version
		}
		_ = c.Send(ctx, api.Frame{Type: api.FrameError, Reason: err.Error()})
		c.Close(websocket.StatusProtocolError, "hello refused; the error frame says why")
		return
	}
	c.Instance, c.Version = hello.Instance, api.ProtocolVersion(hello.V)
	c.LiveDesktop = hello.Capabilities != nil && hello.Capabilities.LiveDesktop
	if other := g.otherLiveInstance(ctx, c); other != "" {
		g.log.Warn("refused a second remote for one session", "session", c.SessionID, "serving", other, "refused", c.Instance, "acceptor", c.AcceptorID)
		g.handler.Refused(c, other)
		msg := fmt.Sprintf("another remote (instance %s) is serving session %s under the same claim; this one (instance %s) is refused. "+
			"Two workers or machines must never share an acceptor id or a connect token.", other, c.SessionID, c.Instance)
		_ = c.Send(ctx, api.Frame{Type: api.FrameError, Reason: msg})
		c.Close(websocket.StatusPolicyViolation, "another remote is serving this session")
		return
	}
	wel, err := g.handler.Hello(ctx, c, e, &hello)
	if err != nil {
		g.log.Error("gateway hello", "session", c.SessionID, "err", err)
		return // the remote reconnects
	}
	if wel.Refused != "" {
		_ = c.Send(ctx, api.Frame{Type: api.FrameError, Reason: wel.Refused})
		c.Close(websocket.StatusPolicyViolation, wel.CloseReason)
		return
	}
	run := wel.Frame.Type == api.FrameWelcome
	if err := c.Send(ctx, wel.Frame); err != nil && run {
		return
	}
	// Attach only after welcome: the runner sends calls to attached
	// connections, and the remote needs the welcome first.
	g.hub.Attach(c)
	stopPing := g.pingWhileAttached(ctx, c)
	leave, ok := g.handler.Attached(ctx, c, run)
	defer func() {
		stopPing()
		leave()
	}()
	if !ok {
		c.Close(websocket.StatusPolicyViolation, "the claim this remote served has lapsed or moved")
		return
	}
	g.readLoop(ctx, c)
	if ctx.Err() == nil && !c.Moved.Load() {
		g.handler.Disconnected(c)
	}
}

// readHello reads the remote's hello and checks its protocol version. A
// hello that is refused is returned too, as far as it could be read.
func readHello(ctx context.Context, ws *websocket.Conn, sessionID string) (api.Frame, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	typ, data, err := ws.Read(ctx)
	if err != nil {
		return api.Frame{}, fmt.Errorf("read hello: %w", err)
	}
	var f api.Frame
	if typ != websocket.MessageText || json.Unmarshal(data, &f) != nil || f.Type != api.FrameHello {
		return api.Frame{}, errors.New("the first gateway frame must be a JSON hello")
	}
	if err := checkVersion(f); err != nil {
		return f, err
	}
	if f.SessionID != "" && f.SessionID != sessionID {
		return f, errors.New("hello names another session than the connect token")
	}
	return f, nil
}

// checkVersion refuses a hello whose protocol version this server does not
// accept, or that lacks what its version requires, saying which side to
// upgrade.
func checkVersion(hello api.Frame) error {
	v := api.ProtocolVersion(hello.V)
	accepts := fmt.Sprintf("this server accepts gateway protocol versions %d to %d", api.MinProtocolVersion, api.CurrentProtocolVersion)
	switch {
	case hello.V == 0:
		return fmt.Errorf("the remote's hello names no gateway protocol version (\"v\") and %s; every Outpost remote names one: run an outpost binary as the remote", accepts)
	case v < api.MinProtocolVersion:
		return fmt.Errorf("the remote speaks gateway protocol version %d and %s: upgrade the remote (a newer outpost binary, or a newer remote build pinned for the outpost)", v, accepts)
	case v > api.CurrentProtocolVersion:
		return fmt.Errorf("the remote speaks gateway protocol version %d and %s: upgrade the server, or run a remote of protocol version %d or older", v, accepts, api.CurrentProtocolVersion)
	case v >= api.InstanceRequiredSince && hello.Instance == "":
		return fmt.Errorf("the remote speaks gateway protocol version %d, whose hello must name the remote's instance, and names none", v)
	}
	return nil
}

// message is one gateway message handed from the reading goroutine. Its
// buffer comes from msgBuffers and goes back once the message is handled.
type message struct {
	typ websocket.MessageType
	buf *[]byte
}

// msgBuffers recycles message buffers, so streaming output does not
// allocate a fresh buffer per chunk.
var msgBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 80<<10); return &b }}

// readMessage reads one whole message into a pooled buffer.
func readMessage(ctx context.Context, ws *websocket.Conn) (message, error) {
	typ, r, err := ws.Reader(ctx)
	if err != nil {
		return message{}, err
	}
	bp := msgBuffers.Get().(*[]byte)
	buf := bytes.NewBuffer((*bp)[:0])
	if _, err := buf.ReadFrom(r); err != nil {
		msgBuffers.Put(bp)
		return message{}, err
	}
	*bp = buf.Bytes()
	return message{typ: typ, buf: bp}, nil
}

// readLoop handles the remote's frames until the connection ends. Output
// is batched into transcript events; results go to the server.
// Messages are read by a goroutine of their own, so that output is flushed
// on time while the remote is quiet; readLoop returns only after it ended.
func (g *Gateway) readLoop(ctx context.Context, c *Conn) {
	rctx, stopReading := context.WithCancel(ctx)
	msgs := make(chan message, 64)
	var readErr error // set before msgs is closed
	var reader sync.WaitGroup
	reader.Go(func() {
		defer close(msgs)
		for {
			m, err := readMessage(rctx, c.ws)
			if err != nil {
				readErr = err
				return
			}
			select {
			case msgs <- m:
			case <-rctx.Done():
				msgBuffers.Put(m.buf)
				return
			}
		}
	})
	defer func() {
		stopReading() // ends a read in progress (and with it the connection)
		for m := range msgs {
			msgBuffers.Put(m.buf)
		}
		reader.Wait()
	}()
	out := g.output.For(c.SessionID)
	defer out.StoreSpills() // after the flush below
	red := NewOutputRedactor(c.Secrets)
	arts := g.handler.Artifacts(c)
	defer arts.Close()
	flush := time.NewTicker(flushEvery)
	defer flush.Stop()
	defer out.Flush(context.WithoutCancel(ctx))
	defer red.FlushAll(func(f api.OutputFrame) { out.Add(context.WithoutCancel(ctx), f) }) // before that flush
	for {
		select {
		case <-flush.C:
			out.Flush(ctx)
		case m, ok := <-msgs:
			if !ok {
				if websocket.CloseStatus(readErr) == -1 && ctx.Err() == nil {
					g.log.Debug("gateway read", "session", c.SessionID, "err", readErr)
				}
				return
			}
			if m.typ == websocket.MessageBinary && api.IsArtifactChunk(*m.buf) {
				arts.Chunk(ctx, *m.buf)
				msgBuffers.Put(m.buf)
				continue
			}
			if m.typ == websocket.MessageBinary && api.IsDesktopTiles(*m.buf) {
				g.handler.DesktopTiles(c, *m.buf)
				msgBuffers.Put(m.buf)
				continue
			}
			if m.typ == websocket.MessageBinary {
				f, err := api.ParseOutputFrame(*m.buf)
				if err != nil {
					g.log.Warn("gateway output frame", "session", c.SessionID, "err", err)
				} else {
					f.Data = red.Write(f)
					out.Add(ctx, f) // copies what it keeps
				}
				msgBuffers.Put(m.buf)
				continue
			}
			var f api.Frame
			err := json.Unmarshal(*m.buf, &f)
			msgBuffers.Put(m.buf)
			if err != nil {
				g.log.Warn("gateway frame", "session", c.SessionID, "err", err)
				continue
			}
			switch f.Type {
			case api.FrameResult:
				c.Gate.Leave(f.Seq)
				red.Flush(f.Seq, func(o api.OutputFrame) { out.Add(ctx, o) })
				evs := out.Finish(f.Seq)
				red.Result(&f)
				if !g.handler.Result(ctx, c, f, evs) {
					// Also when the connection is ending: the output was
					// held, not written, while the hand-over waited.
					out.Record(context.WithoutCancel(ctx), evs)
				}
			case api.FrameArtifact:
				out.Flush(ctx) // the call's output before its artifact event
				arts.Frame(ctx, f)
			case api.FrameRestored:
				red.Report(&f)
				out.Flush(ctx)
				g.handler.Restored(ctx, c, f)
			case api.FrameSuspended, api.FrameCheckpointed:
				red.Report(&f)
				out.Flush(ctx)
				g.handler.Suspended(c, f)
			default:
				g.log.Debug("gateway frame ignored", "session", c.SessionID, "type", f.Type)
			}
		}
	}
}
