package desktop

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/png"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
	"github.com/outpost-sh/outpost/api"
)

// settle is how long an input action waits before its screenshot, so the
// screen shows what the input did (a repaint, a menu opening).
const settle = 150 * time.Millisecond

// typeChunkDelay paces type between characters; some programs drop keys
// sent faster than they read them.
const typeChunkDelay = 2 * time.Millisecond

// X button numbers.
const (
	buttonLeft   = 1
	buttonMiddle = 2
	buttonRight  = 3
	wheelUp      = 4
	wheelDown    = 5
	wheelLeft    = 6
	wheelRight   = 7
)

// ScaledSize is the size of a screenshot of a w×h display
// (api.ComputerScreenshotSize, which the agent uses too).
func ScaledSize(w, h int) (int, int) { return api.ComputerScreenshotSize(w, h) }

// Computer runs computer-use actions on a desktop, with coordinates in
// the space of its screenshots.
type Computer struct {
	d *Desktop
	// sw, sh are the screenshots' size.
	sw, sh int
}

// NewComputer returns the computer-use driver of d.
func NewComputer(d *Desktop) *Computer {
	sw, sh := ScaledSize(d.width, d.height)
	return &Computer{d: d, sw: sw, sh: sh}
}

// ScreenshotSize is the size of the screenshots, the space of the
// actions' coordinates.
func (c *Computer) ScreenshotSize() (int, int) { return c.sw, c.sh }

// Do runs one action. Bad arguments get an error that says what to send
// and change nothing on the screen.
func (c *Computer) Do(ctx context.Context, a api.ComputerArgs) (api.ComputerResult, error) {
	if err := c.check(a); err != nil {
		return api.ComputerResult{}, err
	}
	if a.Key != "" {
		a.Text = a.Key // check allows key only where text holds modifiers
	}
	d := c.d
	d.inputMu.Lock()
	err := c.act(ctx, a)
	d.inputMu.Unlock()
	if err != nil {
		return api.ComputerResult{}, err
	}
	switch a.Action {
	case api.ComputerCursorPosition:
		p, err := xproto.QueryPointer(d.conn, d.root).Reply()
		if err != nil {
			return api.ComputerResult{}, fmt.Errorf("cursor_position: %w", err)
		}
		x, y := c.toShot(int(p.RootX), int(p.RootY))
		return api.ComputerResult{Coordinate: []int{x, y}, DisplayWidth: d.width, DisplayHeight: d.height}, nil
	case api.ComputerZoom:
		r := c.toDisplayRect(a.Region)
		return c.shot(r, r.Dx(), r.Dy())
	case api.ComputerScreenshot, api.ComputerWait:
	default:
		if err := sleep(ctx, settle); err != nil {
			return api.ComputerResult{}, err
		}
	}
	return c.shot(image.Rectangle{}, c.sw, c.sh)
}

// check validates a before anything is sent to the display.
func (c *Computer) check(a api.ComputerArgs) error {
	if !slices.Contains(api.ComputerActions, a.Action) {
		if a.Action == "" {
			return errors.New("computer: no action given: set action to one of " + strings.Join(api.ComputerActions, ", "))
		}
		return fmt.Errorf("computer: unknown action %q: use one of %s", a.Action, strings.Join(api.ComputerActions, ", "))
	}
	name := a.Action
	point := func(field string, p []int, required bool) error {
		if p == nil {
			if required {
				return fmt.Errorf("computer %s: %s [x, y] is required", name, field)
			}
			return nil
		}
		if len(p) != 2 {
			return fmt.Errorf("computer %s: %s must be [x, y], two integers, not %d", name, field, len(p))
		}
		if p[0] < 0 || p[1] < 0 || p[0] >= c.sw || p[1] >= c.sh {
			return fmt.Errorf("computer %s: %s [%d, %d] is outside the screen: x must be 0 to %d and y 0 to %d", name, field, p[0], p[1], c.sw-1, c.sh-1)
		}
		return nil
	}
	refuse := func(field string, set bool) error {
		if set {
			return fmt.Errorf("computer %s: %s does not apply to this action", name, field)
		}
		return nil
	}
	var errs []error
	switch name {
	case api.ComputerLeftClick, api.ComputerRightClick, api.ComputerMiddleClick, api.ComputerDoubleClick, api.ComputerTripleClick:
		errs = append(errs, point("coordinate", a.Coordinate, false), c.checkKeys(a.Text, false))
	case api.ComputerMouseMove:
		errs = append(errs, point("coordinate", a.Coordinate, true))
	case api.ComputerLeftClickDrag:
		errs = append(errs, point("start_coordinate", a.StartCoordinate, true), point("coordinate", a.Coordinate, true))
	case api.ComputerLeftMouseDown, api.ComputerLeftMouseUp:
		// Anthropic's documentation shows these with a coordinate, its
		// reference tool without: either is taken, a coordinate moving
		// the pointer first.
		errs = append(errs, point("coordinate", a.Coordinate, false))
	case api.ComputerScroll:
		errs = append(errs, point("coordinate", a.Coordinate, false), c.checkKeys(a.Text, false))
		if !slices.Contains([]string{"up", "down", "left", "right"}, a.ScrollDirection) {
			errs = append(errs, fmt.Errorf("computer scroll: scroll_direction must be up, down, left or right, not %q", a.ScrollDirection))
		}
		if n := a.ScrollAmount; n != nil && (*n < 0 || *n > api.ComputerMaxScroll) {
			errs = append(errs, fmt.Errorf("computer scroll: scroll_amount must be 0 to %d", api.ComputerMaxScroll))
		}
	case api.ComputerType:
		if a.Text == "" {
			errs = append(errs, errors.New("computer type: text is required: the text to type"))
		}
	case api.ComputerKey:
		errs = append(errs, c.checkKeys(a.Text, true))
	case api.ComputerHoldKey:
		errs = append(errs, c.checkKeys(a.Text, true), checkDuration(name, a.Duration, true))
	case api.ComputerWait:
		errs = append(errs, checkDuration(name, a.Duration, false))
	case api.ComputerZoom:
		if len(a.Region) != 4 {
			errs = append(errs, fmt.Errorf("computer zoom: region must be [x0, y0, x1, y1], four integers"))
			break
		}
		r := a.Region
		if r[0] < 0 || r[1] < 0 || r[2] > c.sw || r[3] > c.sh || r[0] >= r[2] || r[1] >= r[3] {
			errs = append(errs, fmt.Errorf("computer zoom: region %v must have 0 <= x0 < x1 <= %d and 0 <= y0 < y1 <= %d", r, c.sw, c.sh))
		}
	}
	if name != api.ComputerScroll {
		errs = append(errs, refuse("scroll_direction", a.ScrollDirection != ""), refuse("scroll_amount", a.ScrollAmount != nil))
	}
	if a.Key != "" {
		switch name {
		case api.ComputerLeftClick, api.ComputerRightClick, api.ComputerMiddleClick, api.ComputerDoubleClick,
			api.ComputerTripleClick, api.ComputerScroll:
			if a.Text != "" {
				errs = append(errs, fmt.Errorf("computer %s: give the modifier keys in text or in key, not both", name))
			} else {
				errs = append(errs, c.checkKeys(a.Key, false))
			}
		default:
			errs = append(errs, refuse("key", true))
		}
	}
	if name != api.ComputerZoom {
		errs = append(errs, refuse("region", a.Region != nil))
	}
	if name != api.ComputerLeftClickDrag {
		errs = append(errs, refuse("start_coordinate", a.StartCoordinate != nil))
	}
	if name != api.ComputerWait && name != api.ComputerHoldKey {
		errs = append(errs, refuse("duration", a.Duration != nil))
	}
	switch name {
	case api.ComputerScreenshot, api.ComputerCursorPosition, api.ComputerWait, api.ComputerZoom, api.ComputerMouseMove,
		api.ComputerLeftClickDrag, api.ComputerLeftMouseDown, api.ComputerLeftMouseUp:
		errs = append(errs, refuse("text", a.Text != ""))
	}
	switch name {
	case api.ComputerScreenshot, api.ComputerCursorPosition, api.ComputerWait, api.ComputerZoom, api.ComputerType,
		api.ComputerKey, api.ComputerHoldKey:
		errs = append(errs, refuse("coordinate", a.Coordinate != nil))
	}
	return errors.Join(errs...)
}

func (c *Computer) checkKeys(text string, required bool) error {
	if text == "" {
		if required {
			return errors.New("computer: text is required: the keys, e.g. ctrl+a or Return")
		}
		return nil
	}
	_, err := parseCombo(text)
	if err != nil {
		return fmt.Errorf("computer: %w", err)
	}
	return nil
}

func checkDuration(name string, d *float64, required bool) error {
	if d == nil {
		if required {
			return fmt.Errorf("computer %s: duration (seconds) is required", name)
		}
		return nil
	}
	if *d < 0 || *d > api.ComputerMaxDurationS || math.IsNaN(*d) {
		return fmt.Errorf("computer %s: duration must be 0 to %d seconds", name, api.ComputerMaxDurationS)
	}
	return nil
}

// act sends the action's input; the caller holds inputMu.
func (c *Computer) act(ctx context.Context, a api.ComputerArgs) error {
	switch a.Action {
	case api.ComputerLeftClick:
		return c.click(a, buttonLeft, 1)
	case api.ComputerRightClick:
		return c.click(a, buttonRight, 1)
	case api.ComputerMiddleClick:
		return c.click(a, buttonMiddle, 1)
	case api.ComputerDoubleClick:
		return c.click(a, buttonLeft, 2)
	case api.ComputerTripleClick:
		return c.click(a, buttonLeft, 3)
	case api.ComputerMouseMove:
		return c.move(a.Coordinate)
	case api.ComputerLeftClickDrag:
		if err := c.move(a.StartCoordinate); err != nil {
			return err
		}
		if err := c.fake(xproto.ButtonPress, buttonLeft); err != nil {
			return err
		}
		// A drag that jumps is not seen as one by every program: pass
		// through the middle.
		mid := []int{(a.StartCoordinate[0] + a.Coordinate[0]) / 2, (a.StartCoordinate[1] + a.Coordinate[1]) / 2}
		errs := errors.Join(c.move(mid), c.move(a.Coordinate))
		return errors.Join(errs, c.fake(xproto.ButtonRelease, buttonLeft))
	case api.ComputerLeftMouseDown:
		if a.Coordinate != nil {
			if err := c.move(a.Coordinate); err != nil {
				return err
			}
		}
		c.d.buttons[buttonLeft] = true
		return c.fake(xproto.ButtonPress, buttonLeft)
	case api.ComputerLeftMouseUp:
		if a.Coordinate != nil {
			if err := c.move(a.Coordinate); err != nil {
				return err
			}
		}
		delete(c.d.buttons, buttonLeft)
		return c.fake(xproto.ButtonRelease, buttonLeft)
	case api.ComputerScroll:
		if a.Coordinate != nil {
			if err := c.move(a.Coordinate); err != nil {
				return err
			}
		}
		button := map[string]byte{"up": wheelUp, "down": wheelDown, "left": wheelLeft, "right": wheelRight}[a.ScrollDirection]
		n := 3
		if a.ScrollAmount != nil {
			n = *a.ScrollAmount
		}
		return c.withKeys(a.Text, func() error {
			for range n {
				if err := c.press(button); err != nil {
					return err
				}
			}
			return nil
		})
	case api.ComputerType:
		return c.typeText(ctx, a.Text)
	case api.ComputerKey:
		return c.withKeys(a.Text, func() error { return nil })
	case api.ComputerHoldKey:
		return c.withKeys(a.Text, func() error { return sleep(ctx, seconds(*a.Duration)) })
	case api.ComputerWait:
		if a.Duration != nil {
			return sleep(ctx, seconds(*a.Duration))
		}
		return sleep(ctx, time.Second)
	}
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func (c *Computer) click(a api.ComputerArgs, button byte, times int) error {
	if a.Coordinate != nil {
		if err := c.move(a.Coordinate); err != nil {
			return err
		}
	}
	return c.withKeys(a.Text, func() error {
		for range times {
			if err := c.press(button); err != nil {
				return err
			}
		}
		return nil
	})
}

// press presses and releases button.
func (c *Computer) press(button byte) error {
	return errors.Join(c.fake(xproto.ButtonPress, button), c.fake(xproto.ButtonRelease, button))
}

// move puts the pointer at p, in the screenshot's space.
func (c *Computer) move(p []int) error {
	x, y := c.toDisplay(p[0], p[1])
	err := xtest.FakeInputChecked(c.d.conn, xproto.MotionNotify, 0, 0, c.d.root, int16(x), int16(y), 0).Check()
	if err != nil {
		return fmt.Errorf("move the pointer: %w", err)
	}
	return nil
}

// fake sends one XTEST event and waits for the server to have it, so
// events of one action arrive in order and before its screenshot.
func (c *Computer) fake(typ byte, detail byte) error {
	if err := xtest.FakeInputChecked(c.d.conn, typ, detail, 0, c.d.root, 0, 0, 0).Check(); err != nil {
		return fmt.Errorf("send input to the display: %w", err)
	}
	return nil
}

// withKeys holds the keys of combo (may be empty) down around fn, then
// releases them in reverse order, even when fn fails.
func (c *Computer) withKeys(combo string, fn func() error) error {
	if combo == "" {
		return fn()
	}
	syms, err := parseCombo(combo)
	if err != nil {
		return err
	}
	var held []xproto.Keycode
	release := func() error {
		var errs []error
		for i := len(held) - 1; i >= 0; i-- {
			errs = append(errs, c.fake(xproto.KeyRelease, byte(held[i])))
		}
		return errors.Join(errs...)
	}
	for _, s := range syms {
		code, shift, err := c.d.keys.lookup(s)
		if err != nil {
			return errors.Join(err, release())
		}
		if shift && !slices.Contains(syms, keysyms["shift"]) {
			shiftCode, _, err := c.d.keys.lookup(keysyms["shift"])
			if err != nil {
				return errors.Join(err, release())
			}
			if err := c.fake(xproto.KeyPress, byte(shiftCode)); err != nil {
				return errors.Join(err, release())
			}
			held = append(held, shiftCode)
		}
		if err := c.fake(xproto.KeyPress, byte(code)); err != nil {
			return errors.Join(err, release())
		}
		held = append(held, code)
	}
	return errors.Join(fn(), release())
}

// typeText types text character by character.
func (c *Computer) typeText(ctx context.Context, text string) error {
	for _, r := range text {
		if err := ctx.Err(); err != nil {
			return err
		}
		sym := keysymOfRune(r)
		code, shift, err := c.d.keys.lookup(sym)
		if err != nil {
			return fmt.Errorf("type %q: %w", r, err)
		}
		var keys []byte
		if shift {
			sc, _, err := c.d.keys.lookup(keysyms["shift"])
			if err != nil {
				return err
			}
			keys = append(keys, byte(sc))
		}
		keys = append(keys, byte(code))
		for _, k := range keys {
			if err := c.fake(xproto.KeyPress, k); err != nil {
				return err
			}
		}
		for i := len(keys) - 1; i >= 0; i-- {
			if err := c.fake(xproto.KeyRelease, keys[i]); err != nil {
				return err
			}
		}
		if err := sleep(ctx, typeChunkDelay); err != nil {
			return err
		}
	}
	return nil
}

// toDisplay maps a point of the screenshot's space to the display's.
func (c *Computer) toDisplay(x, y int) (int, int) {
	if c.sw == c.d.width && c.sh == c.d.height {
		return x, y
	}
	// The first display pixel wholly inside the screenshot pixel's span
	// (rounding up): toShot maps it back to the same point, so a model
	// that clicks at a point and asks cursor_position gets that point.
	return min(c.d.width-1, (x*c.d.width+c.sw-1)/c.sw), min(c.d.height-1, (y*c.d.height+c.sh-1)/c.sh)
}

// toShot maps a point of the display to the screenshot's space.
func (c *Computer) toShot(x, y int) (int, int) {
	return min(c.sw-1, x*c.sw/c.d.width), min(c.sh-1, y*c.sh/c.d.height)
}

// toDisplayRect maps a region [x0, y0, x1, y1] of the screenshot's space
// to the display's pixels (rounding outwards).
func (c *Computer) toDisplayRect(r []int) image.Rectangle {
	x0, y0 := r[0]*c.d.width/c.sw, r[1]*c.d.height/c.sh
	x1 := min(c.d.width, (r[2]*c.d.width+c.sw-1)/c.sw)
	y1 := min(c.d.height, (r[3]*c.d.height+c.sh-1)/c.sh)
	return image.Rect(x0, y0, x1, y1)
}

// shot captures r (empty: the screen) and returns it as a PNG of w×h at
// most, scaled down within the model's limit when larger.
func (c *Computer) shot(r image.Rectangle, w, h int) (api.ComputerResult, error) {
	img, err := c.d.Capture(r)
	if err != nil {
		return api.ComputerResult{}, err
	}
	sw, sh := ScaledSize(w, h)
	out := image.Image(img)
	if sw != img.Rect.Dx() || sh != img.Rect.Dy() {
		out = scale(img, sw, sh)
	}
	data, err := encodePNG(out)
	if err != nil {
		return api.ComputerResult{}, err
	}
	return api.ComputerResult{
		Image: &api.ComputerImage{MediaType: "image/png", Data: base64.StdEncoding.EncodeToString(data)},
		Width: sw, Height: sh, DisplayWidth: c.d.width, DisplayHeight: c.d.height,
	}, nil
}

// pngEncoder trades size for speed: a screenshot is taken at every action.
var pngEncoder = png.Encoder{CompressionLevel: png.BestSpeed}

func encodePNG(img image.Image) ([]byte, error) {
	var buf bytes.Buffer
	if err := pngEncoder.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("encode the screenshot: %w", err)
	}
	return buf.Bytes(), nil
}

// scale shrinks src to w×h by averaging the source pixels each target
// pixel covers, which keeps text legible better than picking one.
func scale(src *image.RGBA, w, h int) *image.RGBA {
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	sw, sh := src.Rect.Dx(), src.Rect.Dy()
	for y := range h {
		y0, y1 := y*sh/h, max(y*sh/h+1, (y+1)*sh/h)
		for x := range w {
			x0, x1 := x*sw/w, max(x*sw/w+1, (x+1)*sw/w)
			var r, g, b, n int
			for yy := y0; yy < y1; yy++ {
				row := src.Pix[yy*src.Stride:]
				for xx := x0; xx < x1; xx++ {
					r += int(row[4*xx])
					g += int(row[4*xx+1])
					b += int(row[4*xx+2])
					n++
				}
			}
			i := y*dst.Stride + 4*x
			dst.Pix[i], dst.Pix[i+1], dst.Pix[i+2], dst.Pix[i+3] = byte(r/n), byte(g/n), byte(b/n), 0xff
		}
	}
	return dst
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
