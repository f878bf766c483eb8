package desktop

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"strings"

	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"

	"github.com/outpost-sh/outpost/api"
)

// Streamer turns captures of a desktop into frames of the live view: the
// tiles (api.DesktopTileSize squares) that changed since the last frame it
// returned, as PNGs. It is not safe for concurrent use; one stream owns it.
type Streamer struct {
	d *Desktop
	// last is the screen as of the last frame returned; nil before the
	// first (or after Reset), when every tile is sent.
	last *image.RGBA
	// Captures counts the screen captures taken.
	Captures int
}

// NewStreamer returns a streamer of d.
func NewStreamer(d *Desktop) *Streamer { return &Streamer{d: d} }

// Desktop is the desktop s streams.
func (s *Streamer) Desktop() *Desktop { return s.d }

// Reset makes the next frame a keyframe: every tile.
func (s *Streamer) Reset() { s.last = nil }

// Next captures the screen and returns the tiles that changed; a frame
// without tiles (ok false) means nothing changed and nothing need be sent.
func (s *Streamer) Next() (f api.DesktopTiles, ok bool, err error) {
	img, err := s.d.Capture(image.Rectangle{})
	if err != nil {
		return api.DesktopTiles{}, false, err
	}
	s.Captures++
	w, h := img.Rect.Dx(), img.Rect.Dy()
	f = api.DesktopTiles{Keyframe: s.last == nil, Width: w, Height: h}
	const ts = api.DesktopTileSize
	for y := 0; y < h; y += ts {
		for x := 0; x < w; x += ts {
			r := image.Rect(x, y, min(x+ts, w), min(y+ts, h))
			if s.last != nil && sameRect(img, s.last, r) {
				continue
			}
			var buf bytes.Buffer
			if err := pngEncoder.Encode(&buf, img.SubImage(r)); err != nil {
				return api.DesktopTiles{}, false, fmt.Errorf("encode a desktop tile: %w", err)
			}
			f.Tiles = append(f.Tiles, api.DesktopTile{X: x, Y: y, W: r.Dx(), H: r.Dy(), PNG: buf.Bytes()})
		}
	}
	s.last = img
	return f, len(f.Tiles) > 0, nil
}

// sameRect reports whether a and b hold the same pixels in r.
func sameRect(a, b *image.RGBA, r image.Rectangle) bool {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		i, j := a.PixOffset(r.Min.X, y), b.PixOffset(r.Min.X, y)
		n := 4 * r.Dx()
		if !bytes.Equal(a.Pix[i:i+n], b.Pix[j:j+n]) {
			return false
		}
	}
	return true
}

// maxInputText bounds one text input of a person.
const maxInputText = 4096

// CheckInput validates a person's input event without sending it.
func (d *Desktop) CheckInput(in api.DesktopInput) error {
	switch in.Kind {
	case api.DesktopPointerMove, api.DesktopPointerDown, api.DesktopPointerUp:
		if in.X < 0 || in.Y < 0 || in.X >= d.width || in.Y >= d.height {
			return fmt.Errorf("desktop input %s: [%d, %d] is outside the %d×%d screen", in.Kind, in.X, in.Y, d.width, d.height)
		}
		if in.Kind != api.DesktopPointerMove && (in.Button < 1 || in.Button > 7) {
			return fmt.Errorf("desktop input %s: button must be 1 to 7, not %d", in.Kind, in.Button)
		}
	case api.DesktopKeyDown, api.DesktopKeyUp:
		if _, err := parseKey(in.Key); err != nil {
			return fmt.Errorf("desktop input %s: %w", in.Kind, err)
		}
	case api.DesktopText:
		if len(in.Text) > maxInputText {
			return fmt.Errorf("desktop input text: %d bytes, at most %d", len(in.Text), maxInputText)
		}
	default:
		return fmt.Errorf("desktop input: unknown kind %q: use one of %s", in.Kind, strings.Join(api.DesktopInputKinds, ", "))
	}
	return nil
}

// Input sends a person's input event to the display through XTEST, the
// path the computer tool uses, serialised with its actions.
func (d *Desktop) Input(ctx context.Context, in api.DesktopInput) error {
	if err := d.CheckInput(in); err != nil {
		return err
	}
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	fake := func(typ, detail byte) error {
		return xtest.FakeInputChecked(d.conn, typ, detail, 0, d.root, 0, 0, 0).Check()
	}
	var err error
	switch in.Kind {
	case api.DesktopPointerMove, api.DesktopPointerDown, api.DesktopPointerUp:
		err = xtest.FakeInputChecked(d.conn, xproto.MotionNotify, 0, 0, d.root, int16(in.X), int16(in.Y), 0).Check()
		if err == nil && in.Kind == api.DesktopPointerDown {
			err = fake(xproto.ButtonPress, byte(in.Button))
		} else if err == nil && in.Kind == api.DesktopPointerUp {
			err = fake(xproto.ButtonRelease, byte(in.Button))
		}
	case api.DesktopKeyDown, api.DesktopKeyUp:
		sym, _ := parseKey(in.Key)
		code, _, lerr := d.keys.lookup(sym)
		if lerr != nil {
			return lerr
		}
		typ := byte(xproto.KeyPress)
		if in.Kind == api.DesktopKeyUp {
			typ = xproto.KeyRelease
		}
		err = fake(typ, byte(code))
	case api.DesktopText:
		c := &Computer{d: d, sw: d.width, sh: d.height}
		err = c.typeText(ctx, in.Text)
	}
	if err != nil {
		return fmt.Errorf("send input to the display: %w", err)
	}
	return nil
}
