package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/agent"
	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/redact"
	"github.com/outpost-sh/outpost/internal/steptrace"
	"github.com/outpost-sh/outpost/internal/store"
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

// gatewayHandler is the server's side of the gateway (gateway.Handler):
// it decides who may connect, what a hello means for the session, and what
// becomes of the remote's results and reports.
type gatewayHandler struct{ s *Server }

// Admit checks the connect token and counts the connection in the
// server's shutdown.
func (h gatewayHandler) Admit(w http.ResponseWriter, r *http.Request) (store.QueueEntry, func(), bool) {
	s := h.s
	steptrace.Mark("server.gateway_request", r.Header.Get(api.HeaderSessionID))
	_, e, err := s.connectClaim(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return store.QueueEntry{}, nil, false
	}
	if !s.track() {
		s.writeError(w, r, &httpError{http.StatusServiceUnavailable, api.CodeUnavailable, "The server is shutting down; reconnect shortly."})
		return store.QueueEntry{}, nil, false
	}
	return e, s.wg.Done, true
}

// Refused counts a second remote process refused under one claim.
func (h gatewayHandler) Refused(*gateway.Conn, string) { h.s.metrics.remotesRefused.Inc() }

// Hello reads what the welcome gives the remote back (its repositories,
// its snapshot, the session's env and secrets) and records the remote's
// arrival.
func (h gatewayHandler) Hello(ctx context.Context, c *gateway.Conn, e store.QueueEntry, hello *api.Frame) (gateway.Welcome, error) {
	s := h.s
	steptrace.Mark("server.hello", c.SessionID)
	var err error
	// A session resuming on another machine gets its repositories back.
	var restore []api.GitCloneArgs
	if e.Kind == api.KindResume {
		if restore, err = s.restoreList(ctx, c.SessionID); err != nil {
			return gateway.Welcome{}, err
		}
	}
	if c.Snapshot, err = s.welcomeSnapshot(ctx, c, e); err != nil {
		return gateway.Welcome{}, err
	}
	full, err := s.store.GetSession(ctx, c.SessionID) // with its env and secrets
	if err != nil {
		return gateway.Welcome{}, fmt.Errorf("get session %s: %w", c.SessionID, err)
	}
	c.Secrets = redact.NewSet(full.Secrets)
	// What the hello says of the machine goes on the transcript.
	gateway.NewOutputRedactor(c.Secrets).Report(hello)
	sess, err := s.onHello(ctx, c, *hello, restore, full, e.Kind)
	if errors.Is(err, errStaleClaim) {
		return gateway.Welcome{Refused: errStaleClaim.Error(), CloseReason: errStaleClaim.Error()}, nil
	}
	if err != nil {
		return gateway.Welcome{}, err
	}
	if api.IsFinal(sess.Status) || sess.Status == api.StatusSuspended {
		return gateway.Welcome{Frame: api.Frame{Type: api.FrameEnd, Reason: sess.Reason}}, nil
	}
	return gateway.Welcome{Frame: api.Frame{Type: api.FrameWelcome, SessionID: sess.ID, Env: full.Spec.Env, Secrets: full.Secrets, Restore: restore, Snapshot: c.Snapshot, Desktop: full.Spec.Desktop}}, nil
}

// Attached counts the remote and starts the session's runner unless its
// claim moved meanwhile. When the connection ends the claim gets its
// reconnect grace.
func (h gatewayHandler) Attached(ctx context.Context, c *gateway.Conn, run bool) (func(), bool) {
	s := h.s
	s.metrics.remotes.Inc()
	leave := func() {
		s.metrics.remotes.Dec()
		s.graceAfter(c)
	}
	// A claim may have moved between the token check and attach.
	if cur, err := s.store.GetQueueEntry(ctx, c.SessionID); err != nil || cur.Epoch != c.Epoch {
		return leave, false
	}
	if run {
		steptrace.Mark("server.attached", c.SessionID)
		s.ensureRunner(c.SessionID)
		s.live.Attached(ctx, c.SessionID) // viewers waiting for this remote
	}
	return leave, true
}

// Result hands a call's result and its output to the session's runner.
func (h gatewayHandler) Result(ctx context.Context, c *gateway.Conn, f api.Frame, output []api.Event) bool {
	return h.s.deliverResult(ctx, c, f, output)
}

// Artifacts receives the connection's artifact uploads into the blob store.
func (h gatewayHandler) Artifacts(c *gateway.Conn) gateway.Artifacts {
	return h.s.newArtifactUploads(c)
}

// Restored records how the remote restored the session's repositories and
// snapshot.
func (h gatewayHandler) Restored(ctx context.Context, c *gateway.Conn, f api.Frame) {
	h.s.recordRestore(ctx, c, f.Restored)
	if f.SnapshotRestored != nil {
		h.s.recordSnapshotRestore(ctx, c, *f.SnapshotRestored)
	}
}

// Suspended takes the remote's snapshot for a suspend or checkpoint.
func (h gatewayHandler) Suspended(c *gateway.Conn, f api.Frame) { h.s.onSuspended(c, f) }

// DesktopTiles hands a frame of the live desktop to its viewers.
func (h gatewayHandler) DesktopTiles(c *gateway.Conn, msg []byte) { h.s.live.Tiles(c.SessionID, msg) }

// Disconnected records the remote's disconnect on the transcript.
func (h gatewayHandler) Disconnected(c *gateway.Conn) { h.s.recordDisconnect(c) }

// onHello records the remote's arrival through the state machine, which
// moves the session to running. restore is what the welcome will ask the
// remote to clone again.
//
// The first hello of a session that never ran records its first call in
// the same commit, so that the runner can send it at once.
func (s *Server) onHello(ctx context.Context, c *gateway.Conn, hello api.Frame, restore []api.GitCloneArgs, full store.Session, kind string) (store.Session, error) {
	steptrace.Mark("server.arrive", c.SessionID)
	a := lifecycle.Arrival{
		Epoch: c.Epoch, AcceptorID: c.AcceptorID, Owner: s.opts.ReplicaID, Capabilities: hello.Capabilities,
		ResumeNote: func(lastSeq int64) string { return resumeNote(restore, c.Snapshot, c.RestoreFrom, lastSeq) },
		ForkedFrom: full.Spec.ForkedFrom,
	}
	if kind != api.KindResume && full.Spec.ForkedFrom == "" && full.StartedAt == nil && full.LastSeq == 0 {
		if call, ev, ok := agent.FirstCall(full, s.now()); ok {
			a.FirstCall, a.FirstCallEvent = &call, ev
		}
	}
	sess, prevOwner, err := s.life.Arrive(ctx, c.SessionID, a)
	if errors.Is(err, lifecycle.ErrConflict) {
		return sess, errStaleClaim
	}
	if err != nil {
		return sess, fmt.Errorf("record remote of session %s: %w", c.SessionID, err)
	}
	if s.shared && prevOwner != "" && prevOwner != s.opts.ReplicaID {
		// The remote left another replica: that one drops its connection
		// and runner now rather than when it notices.
		s.wg.Go(func() { s.tellDrop(context.WithoutCancel(s.runCtx), prevOwner, c.SessionID) })
	}
	return sess, nil
}

func (s *Server) recordDisconnect(c *gateway.Conn) {
	ev := []api.Event{{Type: api.EventRemoteDisconnected, Time: s.now().UnixMilli(), AcceptorID: c.AcceptorID,
		Reason: "The remote's connection closed; it may reconnect."}}
	sess, err := s.store.GetSession(context.Background(), c.SessionID)
	if err != nil || api.IsFinal(sess.Status) {
		return
	}
	if err := s.store.AppendEvents(context.Background(), c.SessionID, ev); err != nil {
		s.log.Warn("record disconnect", "session", c.SessionID, "err", err)
		return
	}
	s.topics.publish(c.SessionID, ev...)
}
