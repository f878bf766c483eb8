// Package liveview fans a session's live desktop out to its viewers and
// keeps who has control of it. The session's remote streams one frame
// sequence for all viewers: the hub asks it to start when the first viewer
// joins and to stop when the last one leaves, asks for a keyframe when a
// viewer joins or falls behind, and hands every frame to each viewer's
// bounded queue, where a slow viewer drops frames (and then waits for the
// next keyframe) instead of slowing the others or growing memory. A viewer
// that may write (sessions.write) can take control; the remote then holds
// the agent's screen actions back and takes that viewer's input, until it
// hands back or disconnects. The package knows no HTTP: the server's
// WebSocket handler drives a Viewer.
package liveview

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// Remote is a session's remote connection, as far as the live view needs
// it.
type Remote interface {
	Send(ctx context.Context, f api.Frame) error
}

// Options configure a Hub.
type Options struct {
	// Remote returns the session's remote connection on this process, or
	// an error that says, in a sentence for the viewer, why there is none
	// (no machine connected, or one whose remote cannot stream).
	Remote func(sessionID string) (Remote, error)
	// Record writes a take-over or hand-back on the session's transcript
	// (api.EventDesktop) before the remote hears of it.
	Record func(ctx context.Context, sessionID, action, actor, reason string) error
	// Queue is how many frames wait for one viewer; zero means 8.
	Queue int
	// FPS caps the stream's frame rate; zero means api.DesktopMaxFPS.
	FPS    int
	Logger *slog.Logger
}

// ErrRefused matches (errors.Is) the refusals a viewer caused: input
// without control, control without sessions.write, control held by
// another viewer, a malformed input. Their message is a sentence for the
// viewer.
var ErrRefused = errors.New("refused")

// refusal is a refusal of a viewer's message.
type refusal struct{ msg string }

func (r *refusal) Error() string        { return r.msg }
func (r *refusal) Is(target error) bool { return target == ErrRefused }

func refused(format string, args ...any) error {
	return &refusal{msg: fmt.Sprintf(format, args...)}
}

// sendTimeout bounds one frame to a remote.
const sendTimeout = 10 * time.Second

// Hub holds the live views of the sessions whose remotes this process
// serves.
type Hub struct {
	opts Options

	mu       sync.Mutex // guards the following
	sessions map[string]*view
}

// view is one session's viewers and controller.
type view struct {
	viewers    map[*Viewer]struct{}
	controller *Viewer
	framesIn   atomic.Int64
}

// New returns a hub.
func New(opts Options) *Hub {
	if opts.Queue <= 0 {
		opts.Queue = 8
	}
	if opts.FPS <= 0 {
		opts.FPS = api.DesktopMaxFPS
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Hub{opts: opts, sessions: map[string]*view{}}
}

// Viewer is one viewer's connection to a session's desktop.
type Viewer struct {
	// SessionID is the session viewed; Actor the viewer's token id;
	// CanControl whether the token holds sessions.write.
	SessionID  string
	Actor      string
	CanControl bool

	frames chan []byte
	notes  chan api.DesktopMessage
	// behind is set when a frame was dropped for this viewer (or before
	// its first): it takes only a keyframe next; asked is set once a
	// keyframe was asked for it. Guarded by the hub's mu.
	behind, asked bool
}

// Frames delivers the stream's frames (api.DesktopTiles messages).
func (v *Viewer) Frames() <-chan []byte { return v.frames }

// Notes delivers control messages (api.DesktopMsgControl) for the viewer.
func (v *Viewer) Notes() <-chan api.DesktopMessage { return v.notes }

// Join adds a viewer of sessionID. The first viewer starts the remote's
// stream; every viewer gets a keyframe first.
func (h *Hub) Join(ctx context.Context, sessionID, actor string, canControl bool) (*Viewer, error) {
	r, err := h.opts.Remote(sessionID)
	if err != nil {
		return nil, err
	}
	v := &Viewer{SessionID: sessionID, Actor: actor, CanControl: canControl,
		frames: make(chan []byte, h.opts.Queue), notes: make(chan api.DesktopMessage, 16), behind: true, asked: true}
	h.mu.Lock()
	s := h.sessions[sessionID]
	if s == nil {
		s = &view{viewers: map[*Viewer]struct{}{}}
		h.sessions[sessionID] = s
	}
	s.viewers[v] = struct{}{}
	h.mu.Unlock()
	if err := h.send(ctx, r, api.Frame{Type: api.FrameDesktopStream, DesktopStream: &api.DesktopStream{On: true, Keyframe: true, FPS: h.opts.FPS}}); err != nil {
		h.Leave(context.WithoutCancel(ctx), v)
		return nil, fmt.Errorf("start the desktop stream of session %s: %w", sessionID, err)
	}
	return v, nil
}

// Controller returns the actor in control of sessionID and whether it is
// v.
func (h *Hub) Controller(v *Viewer) (actor string, you bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.sessions[v.SessionID]; s != nil && s.controller != nil {
		return s.controller.Actor, s.controller == v
	}
	return "", false
}

// Leave removes v; a controller hands back first, and the last viewer
// stops the stream.
func (h *Hub) Leave(ctx context.Context, v *Viewer) {
	if _, you := h.Controller(v); you {
		if err := h.handBack(ctx, v, "The person in control disconnected from the live desktop; control went back to the agent."); err != nil {
			h.opts.Logger.Warn("hand back the desktop of a viewer that left", "session", v.SessionID, "err", err)
		}
	}
	h.mu.Lock()
	s := h.sessions[v.SessionID]
	last := false
	if s != nil {
		delete(s.viewers, v)
		if len(s.viewers) == 0 {
			delete(h.sessions, v.SessionID)
			last = true
		}
	}
	h.mu.Unlock()
	if !last {
		return
	}
	if r, err := h.opts.Remote(v.SessionID); err == nil {
		if err := h.send(ctx, r, api.Frame{Type: api.FrameDesktopStream, DesktopStream: &api.DesktopStream{On: false}}); err != nil {
			h.opts.Logger.Debug("stop the desktop stream", "session", v.SessionID, "err", err)
		}
	}
}

// TakeControl gives v control of its session's desktop.
func (h *Hub) TakeControl(ctx context.Context, v *Viewer) error {
	if !v.CanControl {
		return refused("Taking control of the desktop needs a token with the %s scope.", api.ScopeSessionsWrite)
	}
	r, err := h.opts.Remote(v.SessionID)
	if err != nil {
		return err
	}
	h.mu.Lock()
	s := h.sessions[v.SessionID]
	if s == nil {
		h.mu.Unlock()
		return refused("This viewer has left.")
	}
	if s.controller != nil {
		other := s.controller
		h.mu.Unlock()
		if other == v {
			return nil
		}
		return refused("Token %s has control of the desktop; it must hand back first.", other.Actor)
	}
	s.controller = v
	h.mu.Unlock()
	reason := fmt.Sprintf("Token %s took control of the desktop; the agent's screen actions wait until it hands back.", v.Actor)
	err = h.opts.Record(ctx, v.SessionID, api.DesktopTakeControl, v.Actor, reason)
	if err == nil {
		err = h.send(ctx, r, api.Frame{Type: api.FrameDesktopControl, DesktopControl: api.DesktopTakeControl})
	}
	if err != nil {
		h.mu.Lock()
		if s.controller == v {
			s.controller = nil
		}
		h.mu.Unlock()
		return fmt.Errorf("take control of the desktop of session %s: %w", v.SessionID, err)
	}
	h.announce(v.SessionID)
	return nil
}

// HandBack returns control from v to the agent.
func (h *Hub) HandBack(ctx context.Context, v *Viewer) error {
	if _, you := h.Controller(v); !you {
		return refused("This viewer does not have control of the desktop.")
	}
	return h.handBack(ctx, v, fmt.Sprintf("Token %s handed the desktop back to the agent.", v.Actor))
}

func (h *Hub) handBack(ctx context.Context, v *Viewer, reason string) error {
	h.mu.Lock()
	s := h.sessions[v.SessionID]
	if s == nil || s.controller != v {
		h.mu.Unlock()
		return nil
	}
	s.controller = nil
	h.mu.Unlock()
	var errs []error
	if err := h.opts.Record(ctx, v.SessionID, api.DesktopHandBack, v.Actor, reason); err != nil {
		errs = append(errs, err)
	}
	// The remote is told even when the record failed: a person who left
	// must not keep the agent waiting.
	if r, err := h.opts.Remote(v.SessionID); err == nil {
		if err := h.send(ctx, r, api.Frame{Type: api.FrameDesktopControl, DesktopControl: api.DesktopHandBack}); err != nil {
			errs = append(errs, err)
		}
	}
	h.announce(v.SessionID)
	return errors.Join(errs...)
}

// Input sends a person's input to the remote; only the viewer in control
// may.
func (h *Hub) Input(ctx context.Context, v *Viewer, in api.DesktopInput) error {
	if !v.CanControl {
		return refused("Input needs a token with the %s scope; this viewer may only watch.", api.ScopeSessionsWrite)
	}
	if _, you := h.Controller(v); !you {
		return refused("Send %s before input: only the person in control sends input.", api.DesktopMsgTakeControl)
	}
	if err := checkInput(in); err != nil {
		return refused("Input refused: %v.", err)
	}
	r, err := h.opts.Remote(v.SessionID)
	if err != nil {
		return err
	}
	return h.send(ctx, r, api.Frame{Type: api.FrameDesktopInput, DesktopInput: &in})
}

// checkInput refuses what no desktop takes; the remote checks the
// coordinates against its screen.
func checkInput(in api.DesktopInput) error {
	switch in.Kind {
	case api.DesktopPointerMove, api.DesktopPointerDown, api.DesktopPointerUp:
		if in.X < 0 || in.Y < 0 || in.X > api.MaxDesktopSize || in.Y > api.MaxDesktopSize {
			return fmt.Errorf("input %s at [%d, %d] is outside any desktop", in.Kind, in.X, in.Y)
		}
		if in.Kind != api.DesktopPointerMove && (in.Button < 1 || in.Button > 7) {
			return fmt.Errorf("input %s: button must be 1 to 7, not %d", in.Kind, in.Button)
		}
	case api.DesktopKeyDown, api.DesktopKeyUp:
		if in.Key == "" || len(in.Key) > 64 {
			return fmt.Errorf("input %s: key must name one key", in.Kind)
		}
	case api.DesktopText:
		if in.Text == "" || len(in.Text) > 4096 {
			return fmt.Errorf("input text: 1 to 4096 bytes, not %d", len(in.Text))
		}
	default:
		return fmt.Errorf("unknown input kind %q", in.Kind)
	}
	return nil
}

// Tiles hands a frame of the remote of sessionID to its viewers. msg is
// copied once, shared by all. A viewer whose queue is full loses the
// frame and then takes only a keyframe, which is asked for once it has
// caught up (Caught): asking at once would make every frame a keyframe,
// for every viewer, while one stays slow.
func (h *Hub) Tiles(sessionID string, msg []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sessions[sessionID]
	if s == nil {
		return
	}
	s.framesIn.Add(1)
	key := len(msg) > 1 && msg[1]&1 != 0
	b := append([]byte(nil), msg...)
	for v := range s.viewers {
		if v.behind && !key {
			continue
		}
		select {
		case v.frames <- b:
			v.behind = false
		default:
			v.behind = true // it lost tiles: only a keyframe repairs its picture
		}
		if key {
			v.asked = false
		}
	}
}

// Caught tells the hub that v's queue is empty: a viewer that lost
// frames asks for a keyframe now, once.
func (h *Hub) Caught(v *Viewer) {
	h.mu.Lock()
	ask := v.behind && !v.asked && len(v.frames) == 0
	if ask {
		v.asked = true
	}
	h.mu.Unlock()
	if ask {
		h.keyframe(v.SessionID)
	}
}

// Resync tells the hub that v dropped frames of its own (its page could
// not draw them in time, or was hidden): it takes only a keyframe next,
// asked of the remote at most once until one comes, however often the
// viewer asks.
func (h *Hub) Resync(v *Viewer) {
	h.mu.Lock()
	v.behind = true
	ask := !v.asked
	v.asked = true
	h.mu.Unlock()
	if ask {
		h.keyframe(v.SessionID)
	}
}

// FramesIn is how many frames the remote of sessionID sent while viewed.
func (h *Hub) FramesIn(sessionID string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.sessions[sessionID]; s != nil {
		return s.framesIn.Load()
	}
	return 0
}

// Attached tells the hub that the remote of sessionID (re)connected: it
// hears again what the viewers want.
func (h *Hub) Attached(ctx context.Context, sessionID string) {
	h.mu.Lock()
	s := h.sessions[sessionID]
	viewed, controlled := s != nil, s != nil && s.controller != nil
	h.mu.Unlock()
	if !viewed {
		return
	}
	r, err := h.opts.Remote(sessionID)
	if err != nil {
		return
	}
	_ = h.send(ctx, r, api.Frame{Type: api.FrameDesktopStream, DesktopStream: &api.DesktopStream{On: true, Keyframe: true, FPS: h.opts.FPS}})
	if controlled {
		_ = h.send(ctx, r, api.Frame{Type: api.FrameDesktopControl, DesktopControl: api.DesktopTakeControl})
	}
}

func (h *Hub) keyframe(sessionID string) {
	r, err := h.opts.Remote(sessionID)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	defer cancel()
	_ = h.send(ctx, r, api.Frame{Type: api.FrameDesktopStream, DesktopStream: &api.DesktopStream{On: true, Keyframe: true, FPS: h.opts.FPS}})
}

// announce tells every viewer of sessionID who has control now.
func (h *Hub) announce(sessionID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sessions[sessionID]
	if s == nil {
		return
	}
	actor := ""
	if s.controller != nil {
		actor = s.controller.Actor
	}
	for v := range s.viewers {
		m := api.DesktopMessage{V: api.DesktopProtocolVersion, Type: api.DesktopMsgControl, Controller: actor, You: s.controller == v}
		select {
		case v.notes <- m:
		default: // a viewer that reads no notes misses one; the next says the same
		}
	}
}

func (h *Hub) send(ctx context.Context, r Remote, f api.Frame) error {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	return r.Send(ctx, f)
}
