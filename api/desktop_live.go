package api

import (
	"encoding/binary"
	"errors"
)

// The live desktop. A viewer opens a WebSocket at DesktopPath; the server
// asks the session's remote, over its gateway connection, to stream its
// desktop while at least one viewer watches (FrameDesktopStream), and fans
// the remote's tile messages out to every viewer as they came, so several
// viewers cost the machine one stream. Nothing listens on the machine.

// Gateway frames of the live desktop, sent only to a remote whose hello
// says Capabilities.LiveDesktop (added within version 3: an older remote
// never announces it).
const (
	// FrameDesktopStream starts (On) or stops the desktop stream, or asks
	// for a keyframe (every tile sent again) when a viewer joins.
	FrameDesktopStream = "desktop_stream"
	// FrameDesktopInput is one input event of the person in control, for
	// the desktop's XTEST path.
	FrameDesktopInput = "desktop_input"
	// FrameDesktopControl tells the remote that a person took control
	// (DesktopTakeControl: the computer tool's calls wait) or handed it
	// back (DesktopHandBack: they go on).
	FrameDesktopControl = "desktop_control"
)

// Take-control actions: Frame.DesktopControl, the viewer messages of the
// same names, and the Action of a transcript event of type EventDesktop.
const (
	DesktopTakeControl = "take_control"
	DesktopHandBack    = "hand_back"
)

// EventDesktop records on a session's transcript that a person took
// control of its desktop or handed it back: Action is DesktopTakeControl
// or DesktopHandBack, Actor the API token's id, Reason a sentence.
const EventDesktop = "desktop"

// DesktopPath is the live view's WebSocket, with the session's id for
// {session}.
const DesktopPath = "/v1/sessions/{session}/desktop"

// DesktopProtocolVersion is the version of the viewer protocol: the JSON
// messages (DesktopMessage) and binary tile messages (DesktopTiles) of
// DesktopPath. It is bumped when a viewer must know what changed.
const DesktopProtocolVersion = 1

// DesktopMaxFPS is the most frames a second a desktop stream sends.
const DesktopMaxFPS = 15

// DesktopTileSize is the side of the square tiles a frame is compared in:
// a frame sends only the tiles that changed since the last one sent.
const DesktopTileSize = 64

// DesktopStream is the body of FrameDesktopStream.
type DesktopStream struct {
	// On starts or goes on streaming; false stops.
	On bool `json:"on"`
	// Keyframe asks for every tile in the next frame (a viewer joined, or
	// one fell behind and dropped frames).
	Keyframe bool `json:"keyframe,omitempty"`
	// FPS caps the frame rate; 0 means DesktopMaxFPS.
	FPS int `json:"fps,omitempty"`
}

// Input kinds of DesktopInput.Kind.
const (
	// DesktopPointerMove moves the pointer to X, Y (display pixels).
	DesktopPointerMove = "pointer_move"
	// DesktopPointerDown and DesktopPointerUp press and release Button
	// (1 left, 2 middle, 3 right, 4–7 wheel) at X, Y.
	DesktopPointerDown = "pointer_down"
	DesktopPointerUp   = "pointer_up"
	// DesktopKeyDown and DesktopKeyUp press and release Key, an X keysym
	// name or the computer tool's key names ("Return", "a", "ctrl").
	DesktopKeyDown = "key_down"
	DesktopKeyUp   = "key_up"
	// DesktopText types Text.
	DesktopText = "text"
)

// DesktopInputKinds lists the input kinds.
var DesktopInputKinds = []string{DesktopPointerMove, DesktopPointerDown, DesktopPointerUp, DesktopKeyDown, DesktopKeyUp, DesktopText}

// DesktopInput is one input event of a person in control.
type DesktopInput struct {
	// Kind is one of DesktopInputKinds.
	Kind string `json:"kind"`
	// X, Y are display pixels, for pointer events.
	X int `json:"x,omitempty"`
	Y int `json:"y,omitempty"`
	// Button is the pointer button of pointer_down and pointer_up.
	Button int `json:"button,omitempty"`
	// Key names the key of key_down and key_up.
	Key string `json:"key,omitempty"`
	// Text is what text types (at most 4096 bytes).
	Text string `json:"text,omitempty"`
}

// Viewer messages (DesktopMessage.Type).
const (
	// DesktopMsgHello is the server's first message: the protocol
	// version, the display's size if known, who is in control, and
	// whether this viewer may send input.
	DesktopMsgHello = "hello"
	// DesktopMsgInput carries one DesktopInput (viewer to server); it is
	// refused unless this viewer has control.
	DesktopMsgInput = "input"
	// DesktopMsgTakeControl and DesktopMsgHandBack (viewer to server) take
	// and hand back control; both need sessions.write.
	DesktopMsgTakeControl = DesktopTakeControl
	DesktopMsgHandBack    = DesktopHandBack
	// DesktopMsgKeyframe (viewer to server) says the viewer dropped
	// frames (it could not draw them in time, or its page was hidden): it
	// gets no more frames until the next keyframe, which is asked of the
	// remote once until it comes. A server older than this message answers
	// it with an error message, which a viewer may ignore.
	DesktopMsgKeyframe = "keyframe"
	// DesktopMsgControl (server to viewers) says who is in control now
	// (Controller "" when nobody).
	DesktopMsgControl = "control"
	// DesktopMsgError (server to viewer) says why a message was refused.
	DesktopMsgError = "error"
)

// DesktopMessage is a JSON text message of the live view's WebSocket.
type DesktopMessage struct {
	// V is DesktopProtocolVersion.
	V    int    `json:"v"`
	Type string `json:"type"`
	// CanControl, in hello: whether this viewer's token holds
	// sessions.write.
	CanControl bool `json:"can_control,omitempty"`
	// Controller is the token id of the person in control, "" when none.
	Controller string `json:"controller,omitempty"`
	// You, in hello and control: whether the controller is this viewer.
	You   bool          `json:"you,omitempty"`
	Input *DesktopInput `json:"input,omitempty"`
	// Error, in error messages: a sentence.
	Error string `json:"error,omitempty"`
}

// DesktopTile is one changed rectangle of the screen. The tiles of one
// frame travel in one binary message (DesktopTiles).
type DesktopTile struct {
	X, Y, W, H int
	// PNG is the rectangle's pixels as a PNG image.
	PNG []byte
}

// DesktopTiles is a frame of the desktop stream: the screen's size and
// the tiles that changed. On the wire (the gateway and the viewer's
// WebSocket alike) it is a binary message: one byte 'd', one byte flags
// (1: a keyframe, every tile of the screen), two bytes big-endian screen
// width and two its height, two bytes tile count; then per tile two bytes
// each of x, y, w, h, four bytes the PNG's length, and the PNG.
type DesktopTiles struct {
	Keyframe      bool
	Width, Height int
	Tiles         []DesktopTile
}

const desktopHeaderLen = 8

// IsDesktopTiles reports whether a binary message is a DesktopTiles.
func IsDesktopTiles(msg []byte) bool { return len(msg) > 0 && msg[0] == 'd' }

// AppendBinary appends the wire form of f to b.
func (f DesktopTiles) AppendBinary(b []byte) []byte {
	var flags byte
	if f.Keyframe {
		flags = 1
	}
	b = append(b, 'd', flags)
	b = binary.BigEndian.AppendUint16(b, uint16(f.Width))
	b = binary.BigEndian.AppendUint16(b, uint16(f.Height))
	b = binary.BigEndian.AppendUint16(b, uint16(len(f.Tiles)))
	for _, t := range f.Tiles {
		for _, v := range []int{t.X, t.Y, t.W, t.H} {
			b = binary.BigEndian.AppendUint16(b, uint16(v))
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(t.PNG)))
		b = append(b, t.PNG...)
	}
	return b
}

// ParseDesktopTiles decodes a binary DesktopTiles message. The tiles' PNG
// bytes alias msg.
func ParseDesktopTiles(msg []byte) (DesktopTiles, error) {
	bad := errors.New("malformed desktop tiles message")
	if len(msg) < desktopHeaderLen || msg[0] != 'd' {
		return DesktopTiles{}, bad
	}
	be := binary.BigEndian
	f := DesktopTiles{Keyframe: msg[1]&1 != 0, Width: int(be.Uint16(msg[2:])), Height: int(be.Uint16(msg[4:]))}
	n := int(be.Uint16(msg[6:]))
	rest := msg[desktopHeaderLen:]
	for range n {
		if len(rest) < 12 {
			return DesktopTiles{}, bad
		}
		t := DesktopTile{X: int(be.Uint16(rest)), Y: int(be.Uint16(rest[2:])), W: int(be.Uint16(rest[4:])), H: int(be.Uint16(rest[6:]))}
		l := int(be.Uint32(rest[8:]))
		rest = rest[12:]
		if l > len(rest) {
			return DesktopTiles{}, bad
		}
		t.PNG, rest = rest[:l], rest[l:]
		f.Tiles = append(f.Tiles, t)
	}
	if len(rest) != 0 {
		return DesktopTiles{}, bad
	}
	return f, nil
}
