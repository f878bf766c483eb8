package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/liveview"
	"github.com/outpost-sh/outpost/internal/web"
)

// The live desktop's WebSocket (api.DesktopPath): a viewer watches the
// session's desktop, streamed over its remote's gateway connection and
// fanned out by s.live; with sessions.write it may take control and send
// input. It is served by the replica holding the session's connection
// (toOwner), like every other request that needs the remote.

// viewerReadLimit bounds one message of a viewer: text input is at most
// 4096 bytes.
const viewerReadLimit = 16 << 10

func (s *Server) newLiveView() *liveview.Hub {
	return liveview.New(liveview.Options{
		Remote: s.liveRemote,
		Record: s.recordDesktop,
		Logger: s.log,
	})
}

// liveRemote is the session's remote connection on this replica, when it
// can stream its desktop.
func (s *Server) liveRemote(sessionID string) (liveview.Remote, error) {
	c := s.hub.Get(sessionID)
	if c == nil {
		return nil, &httpError{http.StatusServiceUnavailable, api.CodeUnavailable,
			"No machine is connected to this session, so its desktop cannot be shown; try again once it runs."}
	}
	if !c.LiveDesktop {
		return nil, errConflict("The machine serving this session has no live desktop: its worker runs with --desktop off, " +
			"has no Xvfb, or runs an older remote.")
	}
	return c, nil
}

// recordDesktop writes a take-over or hand-back on the transcript.
func (s *Server) recordDesktop(ctx context.Context, sessionID, action, actor, reason string) error {
	ev := []api.Event{{Type: api.EventDesktop, Time: s.now().UnixMilli(), Action: action, Actor: actor, Reason: reason}}
	// ctx is the viewer's request's: the audit entry names its token.
	actx := s.audited(context.WithoutCancel(ctx), "desktop."+action, audit.Object{Kind: audit.ObjectSession, ID: sessionID}, nil, nil)
	if err := s.store.AppendEvents(actx, sessionID, ev); err != nil {
		return err
	}
	s.topics.publish(sessionID, ev...)
	return nil
}

// withWebCookie lets the web UI's sign-in cookie stand for a bearer token
// on the live view's WebSocket, which a browser opens without headers of
// its own. The cookie is SameSite=Strict, and a cookie-authenticated
// handshake must come from this server's own origin.
func (s *Server) withWebCookie(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			if c, err := r.Cookie(web.CookieName); err == nil && c.Value != "" {
				if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
					s.writeError(w, r, errForbidden("The live desktop was opened from another site with this site's sign-in cookie, so it was refused."))
					return
				}
				r.Header.Set("Authorization", "Bearer "+c.Value)
			}
		}
		h(w, r)
	}
}

// sameOrigin reports whether the Origin header names host.
func sameOrigin(origin, host string) bool {
	_, rest, ok := strings.Cut(origin, "://")
	return ok && strings.EqualFold(rest, host)
}

// desktopView serves one viewer of a session's live desktop.
func (s *Server) desktopView(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id := r.PathValue("session")
	sess, err := s.sessionFor(ctx, id)
	if err != nil {
		return err
	}
	if _, err := s.liveRemote(id); err != nil {
		return err
	}
	p := principalFrom(ctx)
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil // Accept wrote the refusal (a cross-origin handshake, not a WebSocket)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(viewerReadLimit)
	v, err := s.live.Join(ctx, id, p.tokenID, p.hasOn(sess.OutpostID, api.ScopeSessionsWrite))
	if err != nil {
		s.log.Info("live desktop: join", "session", id, "err", err)
		ws.Close(websocket.StatusTryAgainLater, truncateReason(clientMessage(err)))
		return nil
	}
	defer s.live.Leave(context.WithoutCancel(ctx), v)
	actor, you := s.live.Controller(v)
	if err := writeViewer(ctx, ws, api.DesktopMessage{Type: api.DesktopMsgHello, CanControl: v.CanControl, Controller: actor, You: you}); err != nil {
		return nil
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The reader's context outlives the request's: coder/websocket drops
	// the connection without a close frame when a read's context ends, and
	// a viewer whose token was revoked should hear why. The reader ends
	// when the connection closes.
	readCtx, stopRead := context.WithCancel(context.WithoutCancel(ctx))
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer cancel()
		s.readViewer(readCtx, ws, v)
	}()
	defer func() { ws.CloseNow(); stopRead(); <-readDone }()
	for {
		select {
		case <-rctx.Done():
			if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil && !errors.Is(cause, context.Canceled) {
				// The viewer's token was revoked or expired (whileValid).
				ws.Close(websocket.StatusPolicyViolation, truncateReason(clientMessage(cause)))
				return nil
			}
			ws.Close(websocket.StatusNormalClosure, "")
			return nil
		case b := <-v.Frames():
			if err := ws.Write(rctx, websocket.MessageBinary, b); err != nil {
				return nil
			}
			s.live.Caught(v)
		case m := <-v.Notes():
			if err := writeViewer(rctx, ws, m); err != nil {
				return nil
			}
		}
	}
}

// readViewer handles a viewer's messages until it goes.
func (s *Server) readViewer(ctx context.Context, ws *websocket.Conn, v *liveview.Viewer) {
	for {
		typ, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			_ = writeViewerError(ctx, ws, "Viewers send JSON text messages only.")
			continue
		}
		var m api.DesktopMessage
		if err := json.Unmarshal(b, &m); err != nil {
			_ = writeViewerError(ctx, ws, "The message is not valid JSON: "+err.Error())
			continue
		}
		switch m.Type {
		case api.DesktopMsgTakeControl:
			err = s.live.TakeControl(ctx, v)
		case api.DesktopMsgHandBack:
			err = s.live.HandBack(ctx, v)
		case api.DesktopMsgKeyframe:
			s.live.Resync(v)
		case api.DesktopMsgInput:
			if m.Input == nil {
				err = errBadRequest("An input message needs its input field.")
			} else {
				err = s.live.Input(ctx, v, *m.Input)
			}
		default:
			err = errBadRequest("Unknown message type %q: send take_control, hand_back, input or keyframe.", m.Type)
		}
		if err != nil {
			if !errors.Is(err, liveview.ErrRefused) {
				s.log.Info("live desktop message", "session", v.SessionID, "type", m.Type, "err", err)
			}
			if werr := writeViewerError(ctx, ws, clientMessage(err)); werr != nil {
				return
			}
		}
	}
}

func writeViewer(ctx context.Context, ws *websocket.Conn, m api.DesktopMessage) error {
	m.V = api.DesktopProtocolVersion
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return ws.Write(ctx, websocket.MessageText, b)
}

func writeViewerError(ctx context.Context, ws *websocket.Conn, msg string) error {
	return writeViewer(ctx, ws, api.DesktopMessage{Type: api.DesktopMsgError, Error: msg})
}

// truncateReason keeps a close reason within WebSocket's 123 bytes.
func truncateReason(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}
