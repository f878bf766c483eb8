package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/redact"
	"github.com/outpost-sh/outpost/internal/store"
)

const (
	// gatewayReadLimit bounds one gateway message.
	gatewayReadLimit = 32 << 20
	// closeHandshakeWait bounds how long a finished connection waits for
	// the remote to answer its close before it is cut.
	closeHandshakeWait = 5 * time.Second
)

// errStaleClaim refuses a remote whose claim lapsed or moved.
var errStaleClaim = errors.New("the claim this remote served has lapsed or moved to another machine")

// connectClaim checks a connect token against the session's current claim.
func (s *Server) connectClaim(ctx context.Context, r *http.Request) (store.ConnectToken, store.QueueEntry, error) {
	secret := bearer(r)
	if secret == "" {
		return store.ConnectToken{}, store.QueueEntry{}, errUnauthorized("A connect token is required: send it as 'Authorization: Bearer <token>'.")
	}
	ct, err := s.store.LookupConnectToken(ctx, hashSecret(secret))
	if errors.Is(err, store.ErrNotFound) {
		return ct, store.QueueEntry{}, errUnauthorized("The connect token is not valid.")
	}
	if err != nil {
		return ct, store.QueueEntry{}, fmt.Errorf("look up connect token: %w", err)
	}
	if sid := r.Header.Get(api.HeaderSessionID); sid != "" && sid != ct.SessionID {
		return ct, store.QueueEntry{}, errUnauthorized("The connect token belongs to another session.")
	}
	e, err := s.store.GetQueueEntry(ctx, ct.SessionID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return ct, e, fmt.Errorf("get queue entry: %w", err)
	}
	if err != nil || !e.Held(s.now()) || e.Epoch != ct.Epoch {
		return ct, e, errUnauthorized("The connect token is no longer valid: the claim lapsed or moved to another machine.")
	}
	return ct, e, nil
}

// gateway serves one remote's WebSocket for the life of its connection.
func (s *Server) gateway(w http.ResponseWriter, r *http.Request) {
	ct, e, err := s.connectClaim(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if !s.track() {
		s.writeError(w, r, &httpError{http.StatusServiceUnavailable, api.CodeUnavailable, "The server is shutting down; reconnect shortly."})
		return
	}
	defer s.wg.Done()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		s.log.Warn("gateway accept", "session", ct.SessionID, "err", err)
		return
	}
	ws.SetReadLimit(gatewayReadLimit)
	c := &remoteConn{sessionID: ct.SessionID, epoch: ct.Epoch, acceptorID: e.AcceptorID, ws: ws,
		version: api.CurrentProtocolVersion, done: make(chan struct{})}
	defer func() {
		s.hub.detach(c) // first, so runners stop choosing this connection
		close(c.done)
		c.close(websocket.StatusNormalClosure, "")
		c.closed(closeHandshakeWait)
	}()
	ctx := r.Context()
	hello, err := readHello(ctx, ws, ct.SessionID)
	if err != nil {
		s.log.Warn("gateway hello", "session", ct.SessionID, "v", hello.V, "err", err)
		if v := api.ProtocolVersion(hello.V); v.Supported() {
			c.version = v // refused for another reason: say it in the remote's version
		}
		_ = c.send(ctx, api.Frame{Type: api.FrameError, Reason: err.Error()})
		c.close(websocket.StatusProtocolError, "hello refused; the error frame says why")
		return
	}
	c.instance, c.version = hello.Instance, api.ProtocolVersion(hello.V)
	if other := s.otherLiveInstance(ctx, c); other != "" {
		msg := fmt.Sprintf("another remote (instance %s) is serving session %s under the same claim; this one (instance %s) is refused. "+
			"Two workers or machines must never share an acceptor id or a connect token.", other, c.sessionID, c.instance)
		s.log.Warn("refused a second remote for one session", "session", c.sessionID, "serving", other, "refused", c.instance, "acceptor", c.acceptorID)
		s.metrics.remotesRefused.Inc()
		_ = c.send(ctx, api.Frame{Type: api.FrameError, Reason: msg})
		c.close(websocket.StatusPolicyViolation, "another remote is serving this session")
		return
	}
	// A session resuming on another machine gets its repositories back.
	var restore []api.GitCloneArgs
	if e.Kind == api.KindResume {
		if restore, err = s.restoreList(ctx, ct.SessionID); err != nil {
			s.log.Error("gateway hello", "session", ct.SessionID, "err", err)
			return // the remote reconnects
		}
	}
	if c.snapshot, err = s.welcomeSnapshot(ctx, c, e); err != nil {
		s.log.Error("gateway hello", "session", ct.SessionID, "err", err)
		return // the remote reconnects
	}
	full, err := s.store.GetSession(ctx, ct.SessionID) // with its env and secrets
	if err != nil {
		s.log.Error("gateway hello", "session", ct.SessionID, "err", err)
		return // the remote reconnects
	}
	c.secrets = redact.NewSet(full.Secrets)
	// What the hello says of the machine goes on the transcript.
	newOutputRedactor(c.secrets).report(&hello)
	sess, err := s.onHello(ctx, c, hello, restore)
	if errors.Is(err, errStaleClaim) {
		_ = c.send(ctx, api.Frame{Type: api.FrameError, Reason: errStaleClaim.Error()})
		c.close(websocket.StatusPolicyViolation, errStaleClaim.Error())
		return
	}
	if err != nil {
		s.log.Error("gateway hello", "session", ct.SessionID, "err", err)
		return
	}
	if api.IsFinal(sess.Status) || sess.Status == api.StatusSuspended {
		_ = c.send(ctx, api.Frame{Type: api.FrameEnd, Reason: sess.Reason})
	} else {
		if err := c.send(ctx, api.Frame{Type: api.FrameWelcome, SessionID: sess.ID, Env: full.Spec.Env, Secrets: full.Secrets, Restore: restore, Snapshot: c.snapshot}); err != nil {
			return
		}
	}
	// Attach only after welcome: the runner sends calls to attached
	// connections, and the remote needs the welcome first.
	s.hub.attach(c)
	defer s.graceAfter(c)
	s.metrics.remotes.Inc()
	defer s.metrics.remotes.Dec()
	pctx, stopPing := context.WithCancel(ctx)
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		s.pingRemote(pctx, c)
	}()
	defer func() {
		stopPing()
		<-pinged
	}()
	// A claim may have moved between the token check and attach.
	if cur, err := s.store.GetQueueEntry(ctx, ct.SessionID); err != nil || cur.Epoch != ct.Epoch {
		c.close(websocket.StatusPolicyViolation, "the claim this remote served has lapsed or moved")
		return
	}
	if !api.IsFinal(sess.Status) && sess.Status != api.StatusSuspended {
		s.ensureRunner(sess.ID)
	}
	s.readLoop(ctx, c)
	if ctx.Err() == nil && !c.moved.Load() {
		s.recordDisconnect(c)
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

// onHello records the remote's arrival and moves the session to running.
// restore is what the welcome will ask the remote to clone again.
func (s *Server) onHello(ctx context.Context, c *remoteConn, hello api.Frame, restore []api.GitCloneArgs) (store.Session, error) {
	now := s.now()
	var out store.Session
	var prevOwner string
	m, err := s.store.UpdateSession(ctx, c.sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		out, prevOwner = sess, ""
		if api.IsFinal(sess.Status) || sess.Status == api.StatusSuspended {
			return store.Mutation{}, nil // the remote is told to end
		}
		// The claim may have lapsed or moved since the token was checked.
		if !e.Held(now) || e.Epoch != c.epoch {
			return store.Mutation{}, errStaleClaim
		}
		// From now on the connection holds the claim (see keepClaimsAlive)
		// and this replica owns the session (replicas.go).
		e.LiveUntil = now.Add(s.opts.ReconnectGrace)
		prevOwner, e.Owner = e.Owner, s.opts.ReplicaID
		var m store.Mutation
		if hello.Capabilities != nil {
			sess.Capabilities = hello.Capabilities
		}
		m.Events = append(m.Events, api.Event{Type: api.EventRemoteConnected, Time: now.UnixMilli(), AcceptorID: c.acceptorID,
			Capabilities: hello.Capabilities, Reason: fmt.Sprintf("The remote of %s connected.", c.acceptorID)})
		if sess.Status == api.StatusResuming {
			m.Events = append(m.Events, api.Event{Type: api.EventResume, Time: now.UnixMilli(), AcceptorID: c.acceptorID,
				Reason: fmt.Sprintf("The session moved to a new machine (%s); it continues after call %d, the last whose result the server holds. %s", c.acceptorID, sess.LastSeq, resumeNote(restore, c.snapshot, c.restoreFrom, sess.LastSeq))})
		}
		if sess.Status != api.StatusRunning {
			sess.Status, sess.StatusDetail, sess.Reason = api.StatusRunning, api.DetailWorking, fmt.Sprintf("Running on %s.", c.acceptorID)
			m.Events = append(m.Events, lifecycle.StatusEvent(sess, now))
		}
		if sess.StartedAt == nil {
			sess.StartedAt = &now
		}
		sess.UpdatedAt = now
		e.SessionStatus = lifecycle.QueueSessionStatus(sess.Status)
		e.UpdatedAt = now
		m.Session, m.Entry = &sess, &e
		out = sess
		return m, nil
	})
	if err != nil {
		return out, fmt.Errorf("record remote of session %s: %w", c.sessionID, err)
	}
	s.committed(c.sessionID, m)
	if s.shared && prevOwner != "" && prevOwner != s.opts.ReplicaID {
		// The remote left another replica: that one drops its connection
		// and runner now rather than when it notices.
		s.wg.Go(func() { s.tellDrop(context.WithoutCancel(s.runCtx), prevOwner, c.sessionID) })
	}
	return out, nil
}

func (s *Server) recordDisconnect(c *remoteConn) {
	ev := []api.Event{{Type: api.EventRemoteDisconnected, Time: s.now().UnixMilli(), AcceptorID: c.acceptorID,
		Reason: "The remote's connection closed; it may reconnect."}}
	sess, err := s.store.GetSession(context.Background(), c.sessionID)
	if err != nil || api.IsFinal(sess.Status) {
		return
	}
	if err := s.store.AppendEvents(context.Background(), c.sessionID, ev); err != nil {
		s.log.Warn("record disconnect", "session", c.sessionID, "err", err)
		return
	}
	s.topics.publish(c.sessionID, ev...)
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
// is batched into transcript events; results go to the session's runner.
// Messages are read by a goroutine of their own, so that output is flushed
// on time while the remote is quiet; readLoop returns only after it ended.
func (s *Server) readLoop(ctx context.Context, c *remoteConn) {
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
	out := s.outputFor(c.sessionID)
	defer out.storeSpills() // after the flush below
	red := newOutputRedactor(c.secrets)
	arts := s.newArtifactUploads(c)
	defer arts.close()
	flush := time.NewTicker(100 * time.Millisecond)
	defer flush.Stop()
	defer out.flush(context.WithoutCancel(ctx))
	defer red.flushAll(func(f api.OutputFrame) { out.add(context.WithoutCancel(ctx), f) }) // before that flush
	for {
		select {
		case <-flush.C:
			out.flush(ctx)
		case m, ok := <-msgs:
			if !ok {
				if websocket.CloseStatus(readErr) == -1 && ctx.Err() == nil {
					s.log.Debug("gateway read", "session", c.sessionID, "err", readErr)
				}
				return
			}
			if m.typ == websocket.MessageBinary && api.IsArtifactChunk(*m.buf) {
				arts.chunk(ctx, *m.buf)
				msgBuffers.Put(m.buf)
				continue
			}
			if m.typ == websocket.MessageBinary {
				f, err := api.ParseOutputFrame(*m.buf)
				if err != nil {
					s.log.Warn("gateway output frame", "session", c.sessionID, "err", err)
				} else {
					f.Data = red.write(f)
					out.add(ctx, f) // copies what it keeps
				}
				msgBuffers.Put(m.buf)
				continue
			}
			var f api.Frame
			err := json.Unmarshal(*m.buf, &f)
			msgBuffers.Put(m.buf)
			if err != nil {
				s.log.Warn("gateway frame", "session", c.sessionID, "err", err)
				continue
			}
			switch f.Type {
			case api.FrameResult:
				c.gate.leave(f.Seq)
				red.flush(f.Seq, func(o api.OutputFrame) { out.add(ctx, o) })
				out.finish(ctx, f.Seq)
				red.result(&f)
				s.deliverResult(ctx, c, f)
			case api.FrameArtifact:
				out.flush(ctx) // the call's output before its artifact event
				arts.frame(ctx, f)
			case api.FrameRestored:
				red.report(&f)
				out.flush(ctx)
				s.recordRestore(ctx, c, f.Restored)
				if f.SnapshotRestored != nil {
					s.recordSnapshotRestore(ctx, c, *f.SnapshotRestored)
				}
			case api.FrameSuspended, api.FrameCheckpointed:
				red.report(&f)
				out.flush(ctx)
				s.onSuspended(c, f)
			default:
				s.log.Debug("gateway frame ignored", "session", c.sessionID, "type", f.Type)
			}
		}
	}
}
