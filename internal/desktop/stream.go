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
// returned, as PNGs. Given a DamageWatch (UseDamage), it captures only the
// tiles the X server reports damaged; without one, the whole screen. It is
// not safe for concurrent use; one stream owns it.
type Streamer struct {
	d *Desktop
	// last is the screen as of the last frame returned; nil before the
	// first (or after Reset), when every tile is sent.
	last *image.RGBA
	// watch, when set, says which areas changed since the last frame.
	watch *DamageWatch
	// Captures counts the screen captures (GetImage requests) taken, and
	// CapturedPixels the pixels they read.
	Captures, CapturedPixels int
}

// NewStreamer returns a streamer of d.
func NewStreamer(d *Desktop) *Streamer { return &Streamer{d: d} }

// Desktop is the desktop s streams.
func (s *Streamer) Desktop() *Desktop { return s.d }

// UseDamage makes s capture only what w reports damaged. w must watch
// s's desktop, and s must be its only reader (Take).
func (s *Streamer) UseDamage(w *DamageWatch) { s.watch = w }

// Reset makes the next frame a keyframe: every tile.
func (s *Streamer) Reset() { s.last = nil }

// Next captures the screen and returns the tiles that changed; a frame
// without tiles (ok false) means nothing changed and nothing need be sent.
func (s *Streamer) Next() (f api.DesktopTiles, ok bool, err error) {
	w, h := s.d.Size()
	if s.watch == nil || s.last == nil {
		if s.watch != nil {
			s.watch.Take() // the full capture below covers them
		}
		return s.nextFull()
	}
	// Taken before the capture: what is drawn meanwhile is both in the
	// capture and in the next Take, never in neither.
	rects, full := s.watch.Take()
	if full {
		return s.nextFull()
	}
	areas, tiles := damagedAreas(rects, w, h)
	if len(areas) == 0 {
		return api.DesktopTiles{Width: w, Height: h}, false, nil
	}
	const ts = api.DesktopTileSize
	if all := ((w + ts - 1) / ts) * ((h + ts - 1) / ts); 2*tiles > all {
		return s.nextFull() // one large request beats many
	}
	f = api.DesktopTiles{Width: w, Height: h}
	for _, a := range areas {
		img, err := s.d.Capture(a)
		if err != nil {
			s.last = nil // what was damaged is lost: a keyframe next
			return api.DesktopTiles{}, false, err
		}
		s.Captures++
		s.CapturedPixels += a.Dx() * a.Dy()
		for y := a.Min.Y; y < a.Max.Y; y += ts {
			for x := a.Min.X; x < a.Max.X; x += ts {
				r := image.Rect(x, y, min(x+ts, w), min(y+ts, h))
				if !copyChanged(s.last, img, a.Min, r) {
					continue
				}
				if f.Tiles, err = appendTile(f.Tiles, s.last, r); err != nil {
					return api.DesktopTiles{}, false, err
				}
			}
		}
	}
	return f, len(f.Tiles) > 0, nil
}

// nextFull captures the whole screen and returns the tiles that differ
// from the last frame (all of them without one).
func (s *Streamer) nextFull() (f api.DesktopTiles, ok bool, err error) {
	img, err := s.d.Capture(image.Rectangle{})
	if err != nil {
		return api.DesktopTiles{}, false, err
	}
	s.Captures++
	w, h := img.Rect.Dx(), img.Rect.Dy()
	s.CapturedPixels += w * h
	f = api.DesktopTiles{Keyframe: s.last == nil, Width: w, Height: h}
	const ts = api.DesktopTileSize
	for y := 0; y < h; y += ts {
		for x := 0; x < w; x += ts {
			r := image.Rect(x, y, min(x+ts, w), min(y+ts, h))
			if s.last != nil && sameRect(img, s.last, r) {
				continue
			}
			if f.Tiles, err = appendTile(f.Tiles, img, r); err != nil {
				return api.DesktopTiles{}, false, err
			}
		}
	}
	s.last = img
	return f, len(f.Tiles) > 0, nil
}

// appendTile appends the tile r of img, PNG-encoded.
func appendTile(tiles []api.DesktopTile, img *image.RGBA, r image.Rectangle) ([]api.DesktopTile, error) {
	var buf bytes.Buffer
	if err := pngEncoder.Encode(&buf, img.SubImage(r)); err != nil {
		return nil, fmt.Errorf("encode a desktop tile: %w", err)
	}
	return append(tiles, api.DesktopTile{X: r.Min.X, Y: r.Min.Y, W: r.Dx(), H: r.Dy(), PNG: buf.Bytes()}), nil
}

// damagedAreas turns damaged rectangles into the areas to capture: the
// tiles they touch, clipped to the w×h screen, as rectangles of whole
// tiles (runs of a tile row, stacked where rows have equal runs), and how
// many tiles those cover.
func damagedAreas(rects []image.Rectangle, w, h int) (areas []image.Rectangle, tiles int) {
	const ts = api.DesktopTileSize
	cols, rows := (w+ts-1)/ts, (h+ts-1)/ts
	dirty := make([]bool, cols*rows)
	screen := image.Rect(0, 0, w, h)
	for _, r := range rects {
		r = r.Intersect(screen)
		if r.Empty() {
			continue
		}
		for ty := r.Min.Y / ts; ty <= (r.Max.Y-1)/ts; ty++ {
			for tx := r.Min.X / ts; tx <= (r.Max.X-1)/ts; tx++ {
				if !dirty[ty*cols+tx] {
					dirty[ty*cols+tx] = true
					tiles++
				}
			}
		}
	}
	// open holds the areas that reach the previous tile row, by their
	// run of columns, so that an equal run below extends them.
	type run struct{ x0, x1 int }
	open := map[run]int{} // index in areas
	for ty := 0; ty < rows; ty++ {
		next := map[run]int{}
		for tx := 0; tx < cols; {
			if !dirty[ty*cols+tx] {
				tx++
				continue
			}
			x0 := tx
			for tx < cols && dirty[ty*cols+tx] {
				tx++
			}
			k := run{x0, tx}
			maxY := min((ty+1)*ts, h)
			if i, ok := open[k]; ok {
				areas[i].Max.Y = maxY
				next[k] = i
				continue
			}
			areas = append(areas, image.Rect(x0*ts, ty*ts, min(tx*ts, w), maxY))
			next[k] = len(areas) - 1
		}
		open = next
	}
	return areas, tiles
}

// copyChanged copies the tile r of the screen from src, a capture whose
// top-left is at origin on the screen, into last, and reports whether its
// pixels changed.
func copyChanged(last, src *image.RGBA, origin image.Point, r image.Rectangle) bool {
	changed := false
	n := 4 * r.Dx()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		i := last.PixOffset(r.Min.X, y)
		j := src.PixOffset(r.Min.X-origin.X, y-origin.Y)
		if !bytes.Equal(last.Pix[i:i+n], src.Pix[j:j+n]) {
			copy(last.Pix[i:i+n], src.Pix[j:j+n])
			changed = true
		}
	}
	return changed
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
