//go:build unix

package desktop

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/png"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"github.com/outpost-sh/outpost/api"
)

// startDesktop starts a desktop without a window manager (so windows stay
// where the test puts them) and stops it when the test ends.
func startDesktop(t testing.TB, w, h int) *Desktop {
	t.Helper()
	if XvfbPath() == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("Xvfb is missing (scripts/test-deps.sh installs it)")
		}
		t.Skip("Xvfb is not installed (apt-get install xvfb)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := Start(ctx, Options{Width: w, Height: h, WindowManager: "none"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// testWindow is a tiny X client: a white window that turns black at its
// first button press and records the keys pressed in it.
type testWindow struct {
	conn   *xgb.Conn
	win    xproto.Window
	clicks chan xproto.ButtonPressEvent
	keys   chan xproto.KeyPressEvent
	mapped chan struct{}
}

func openWindow(t testing.TB, d *Desktop, x, y, w, h int) *testWindow {
	t.Helper()
	conn, err := d.newConn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	scr := xproto.Setup(conn).DefaultScreen(conn)
	win, err := xproto.NewWindowId(conn)
	if err != nil {
		t.Fatal(err)
	}
	err = xproto.CreateWindowChecked(conn, scr.RootDepth, win, scr.Root, int16(x), int16(y), uint16(w), uint16(h), 0,
		xproto.WindowClassInputOutput, scr.RootVisual, xproto.CwBackPixel|xproto.CwOverrideRedirect|xproto.CwEventMask,
		[]uint32{scr.WhitePixel, 1, xproto.EventMaskExposure | xproto.EventMaskButtonPress | xproto.EventMaskKeyPress | xproto.EventMaskStructureNotify}).Check()
	if err != nil {
		t.Fatal(err)
	}
	tw := &testWindow{conn: conn, win: win, clicks: make(chan xproto.ButtonPressEvent, 16), keys: make(chan xproto.KeyPressEvent, 256), mapped: make(chan struct{})}
	go func() {
		black := scr.BlackPixel
		for {
			ev, xerr := conn.WaitForEvent()
			if ev == nil && xerr == nil {
				return
			}
			switch e := ev.(type) {
			case xproto.MapNotifyEvent:
				close(tw.mapped)
			case xproto.ButtonPressEvent:
				xproto.ChangeWindowAttributes(conn, win, xproto.CwBackPixel, []uint32{black})
				xproto.ClearArea(conn, false, win, 0, 0, 0, 0)
				tw.clicks <- e
			case xproto.KeyPressEvent:
				tw.keys <- e
			}
		}
	}()
	if err := xproto.MapWindowChecked(conn, win).Check(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tw.mapped:
	case <-time.After(10 * time.Second):
		t.Fatal("the test window was not mapped")
	}
	return tw
}

// text turns the key presses received into the characters they type.
func (tw *testWindow) text(t *testing.T, n int) string {
	t.Helper()
	setup := xproto.Setup(tw.conn)
	km, err := xproto.GetKeyboardMapping(tw.conn, setup.MinKeycode, byte(setup.MaxKeycode-setup.MinKeycode+1)).Reply()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := 0; i < n; i++ {
		select {
		case e := <-tw.keys:
			i := (int(e.Detail) - int(setup.MinKeycode)) * int(km.KeysymsPerKeycode)
			sym := km.Keysyms[i]
			if e.State&xproto.ModMaskShift != 0 {
				sym = km.Keysyms[i+1]
			}
			switch {
			case sym >= 0xffe1 && sym <= 0xffee: // a modifier's own press
				n++
			case sym == 0xff0d:
				b.WriteRune('\n')
			case sym >= 0x01000000:
				b.WriteRune(rune(sym - 0x01000000))
			default:
				b.WriteRune(rune(sym))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("only %q of %d keys arrived", b.String(), n)
		}
	}
	return b.String()
}

func decodeShot(t *testing.T, r api.ComputerResult) *image.RGBA {
	t.Helper()
	if r.Image == nil || r.Image.MediaType != "image/png" {
		t.Fatalf("result has no PNG image: %+v", r)
	}
	raw, err := base64.StdEncoding.DecodeString(r.Image.Data)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != r.Width || b.Dy() != r.Height {
		t.Fatalf("image is %v, result says %d×%d", b, r.Width, r.Height)
	}
	rgba := image.NewRGBA(img.Bounds())
	for y := range img.Bounds().Dy() {
		for x := range img.Bounds().Dx() {
			rgba.Set(x, y, img.At(x, y))
		}
	}
	return rgba
}

// meanLevel is the mean of the red channel over r: 255 for white, 0 for
// black.
func meanLevel(img *image.RGBA, r image.Rectangle) int {
	sum, n := 0, 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			sum += int(img.Pix[y*img.Stride+4*x])
			n++
		}
	}
	return sum / n
}

func do(t *testing.T, c *Computer, a api.ComputerArgs) api.ComputerResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.Do(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", a.Action, err)
	}
	return r
}

func TestClickAndTypeChangeTheScreen(t *testing.T) {
	d := startDesktop(t, 640, 480)
	if !strings.HasPrefix(d.Display(), ":") {
		t.Fatalf("display %q", d.Display())
	}
	tw := openWindow(t, d, 100, 100, 200, 150)
	c := NewComputer(d)
	if w, h := c.ScreenshotSize(); w != 640 || h != 480 {
		t.Fatalf("screenshot size %d×%d, want the display's 640×480", w, h)
	}
	win := image.Rect(110, 110, 290, 240)
	before := decodeShot(t, do(t, c, api.ComputerArgs{Action: api.ComputerScreenshot}))
	if got := meanLevel(before, win); got < 250 {
		t.Fatalf("window region mean %d before the click, want white", got)
	}
	after := decodeShot(t, do(t, c, api.ComputerArgs{Action: api.ComputerLeftClick, Coordinate: []int{150, 160}}))
	select {
	case e := <-tw.clicks:
		if e.Detail != buttonLeft || e.EventX != 50 || e.EventY != 60 {
			t.Errorf("click: button %d at %d,%d in the window, want 1 at 50,60", e.Detail, e.EventX, e.EventY)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the window got no click")
	}
	if got := meanLevel(after, win); got > 5 {
		t.Errorf("window region mean %d after the click, want black", got)
	}
	if got, want := meanLevel(after, image.Rect(0, 0, 90, 90)), meanLevel(before, image.Rect(0, 0, 90, 90)); got != want {
		t.Errorf("outside the window the screen changed: mean %d, was %d", got, want)
	}

	pos := do(t, c, api.ComputerArgs{Action: api.ComputerCursorPosition})
	if len(pos.Coordinate) != 2 || pos.Coordinate[0] != 150 || pos.Coordinate[1] != 160 || pos.Image != nil {
		t.Errorf("cursor_position = %+v, want [150 160] and no image", pos)
	}

	const typed = "Hi, é!\n"
	do(t, c, api.ComputerArgs{Action: api.ComputerType, Text: typed})
	if got := tw.text(t, len([]rune(typed))); got != typed {
		t.Errorf("typed %q, the window got %q", typed, got)
	}
	do(t, c, api.ComputerArgs{Action: api.ComputerKey, Text: "ctrl+a"})
	if got := tw.text(t, 1); got != "a" {
		t.Errorf("key ctrl+a: the window got %q", got)
	}
}

func TestZoomReturnsTheRegionAtFullResolution(t *testing.T) {
	d := startDesktop(t, 2400, 1200) // larger than the model's limit
	openWindow(t, d, 1200, 600, 400, 300)
	c := NewComputer(d)
	sw, sh := c.ScreenshotSize()
	if sw >= 2400 || sw > api.ComputerMaxLongEdge || sw*sh > api.ComputerMaxPixels || sw*1200 != sh*2400 && (sw*1200-sh*2400) > 2400 {
		t.Fatalf("screenshot size %d×%d for a 2400×1200 display", sw, sh)
	}
	full := do(t, c, api.ComputerArgs{Action: api.ComputerScreenshot})
	if full.Width != sw || full.Height != sh || full.DisplayWidth != 2400 || full.DisplayHeight != 1200 {
		t.Fatalf("screenshot %+v", full)
	}
	// The window's top-left quarter, in the screenshot's space.
	x0, y0 := 1200*sw/2400, 600*sh/1200
	x1, y1 := 1400*sw/2400, 750*sh/1200
	z := do(t, c, api.ComputerArgs{Action: api.ComputerZoom, Region: []int{x0 - 10, y0 - 10, x1, y1}})
	wantW := (x1*2400+sw-1)/sw - (x0-10)*2400/sw
	if z.Width != wantW || z.Width <= x1-x0+10 {
		t.Errorf("zoom width %d, want %d (full resolution, more than the screenshot's %d)", z.Width, wantW, x1-x0+10)
	}
	img := decodeShot(t, z)
	// The window is white, the root black: the zoomed image holds both,
	// the white in its lower right.
	b := img.Bounds()
	if meanLevel(img, image.Rect(b.Dx()-20, b.Dy()-20, b.Dx(), b.Dy())) < 250 || meanLevel(img, image.Rect(0, 0, 5, 5)) > 5 {
		t.Error("the zoomed region does not show the window's corner")
	}
	// A click at the window's place in screenshot space lands in it.
	tw2 := openWindow(t, d, 100, 100, 300, 300)
	do(t, c, api.ComputerArgs{Action: api.ComputerLeftClick, Coordinate: []int{250 * sw / 2400, 250 * sh / 1200}})
	select {
	case e := <-tw2.clicks:
		if e.EventX < 140 || e.EventX > 160 || e.EventY < 140 || e.EventY > 160 {
			t.Errorf("scaled click landed at %d,%d in the window, want about 150,150", e.EventX, e.EventY)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the scaled click missed the window")
	}
}

func TestBadArgumentsAreRefused(t *testing.T) {
	d := startDesktop(t, 320, 240)
	c := NewComputer(d)
	amount := 5
	dur := 1000.0
	for _, tc := range []struct {
		args api.ComputerArgs
		want string
	}{
		{api.ComputerArgs{}, "no action"},
		{api.ComputerArgs{Action: "dance"}, `unknown action "dance"`},
		{api.ComputerArgs{Action: api.ComputerLeftClick, Coordinate: []int{320, 10}}, "outside the screen"},
		{api.ComputerArgs{Action: api.ComputerLeftClick, Coordinate: []int{-1, 10}}, "outside the screen"},
		{api.ComputerArgs{Action: api.ComputerMouseMove}, "coordinate [x, y] is required"},
		{api.ComputerArgs{Action: api.ComputerLeftClick, Coordinate: []int{1}}, "two integers"},
		{api.ComputerArgs{Action: api.ComputerType}, "text is required"},
		{api.ComputerArgs{Action: api.ComputerKey, Text: "ctrl+nosuchkey"}, `unknown key "nosuchkey"`},
		{api.ComputerArgs{Action: api.ComputerKey}, "text is required"},
		{api.ComputerArgs{Action: api.ComputerScroll, ScrollDirection: "sideways"}, "scroll_direction"},
		{api.ComputerArgs{Action: api.ComputerScreenshot, ScrollAmount: &amount}, "scroll_amount does not apply"},
		{api.ComputerArgs{Action: api.ComputerWait, Duration: &dur}, "duration must be"},
		{api.ComputerArgs{Action: api.ComputerHoldKey, Text: "shift"}, "duration (seconds) is required"},
		{api.ComputerArgs{Action: api.ComputerZoom, Region: []int{10, 10, 5, 20}}, "region"},
		{api.ComputerArgs{Action: api.ComputerZoom, Region: []int{0, 0, 321, 20}}, "region"},
		{api.ComputerArgs{Action: api.ComputerZoom}, "four integers"},
		{api.ComputerArgs{Action: api.ComputerLeftMouseDown, Coordinate: []int{1, 1}, Text: "shift"}, "text does not apply"},
		{api.ComputerArgs{Action: api.ComputerLeftClick, Text: "shift", Key: "ctrl"}, "text or in key, not both"},
		{api.ComputerArgs{Action: api.ComputerType, Text: "x", Key: "ctrl"}, "key does not apply"},
		{api.ComputerArgs{Action: api.ComputerLeftClick, Key: "ctrl+nosuchkey"}, `unknown key "nosuchkey"`},
	} {
		_, err := c.Do(context.Background(), tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
	// Nothing moved.
	pos := do(t, c, api.ComputerArgs{Action: api.ComputerCursorPosition})
	if pos.Coordinate[0] != 160 || pos.Coordinate[1] != 120 {
		t.Errorf("the pointer is at %v after refused calls, want Xvfb's start 160,120", pos.Coordinate)
	}
}

func TestCloseLeavesNothingBehind(t *testing.T) {
	d := startDesktop(t, 320, 240)
	num := strings.TrimPrefix(d.Display(), ":")
	pid := d.xvfb.Process.Pid
	socket, lock := "/tmp/.X11-unix/X"+num, "/tmp/.X"+num+"-lock"
	if _, err := os.Stat(socket); err != nil {
		t.Fatalf("no socket while running: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, p := range []string{socket, lock} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is left after Close (stat: %v)", p, err)
		}
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("Xvfb (pid %d) still runs after Close", pid)
	}
	if _, err := d.newConn(); err == nil {
		t.Error("the display still answers after Close")
	}
	if _, err := os.Stat(d.authDir); !os.IsNotExist(err) {
		t.Errorf("the authority directory %s is left after Close (stat: %v)", d.authDir, err)
	}
}

func TestWindowManagerStartsAndStops(t *testing.T) {
	if XvfbPath() == "" {
		t.Skip("Xvfb is not installed")
	}
	if _, err := exec.LookPath("matchbox-window-manager"); err != nil {
		t.Skip("matchbox-window-manager is not installed (scripts/test-deps.sh installs it)")
	}
	d, err := Start(context.Background(), Options{Width: 400, Height: 300})
	if err != nil {
		t.Fatal(err)
	}
	if d.WindowManager() != "matchbox-window-manager" {
		t.Errorf("window manager %q", d.WindowManager())
	}
	wm := d.wm.Process.Pid
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(wm, 0); err == nil {
		t.Errorf("the window manager (pid %d) still runs after Close", wm)
	}
}

func TestStartRefusesBadSizesAndMissingXvfb(t *testing.T) {
	if _, err := Start(context.Background(), Options{Width: 100, Height: 800}); err == nil || !strings.Contains(err.Error(), "out of bounds") {
		t.Errorf("100×800: %v", err)
	}
	if _, err := Start(context.Background(), Options{XvfbPath: "/nonexistent/Xvfb"}); err == nil {
		t.Error("a missing Xvfb binary started")
	}
}

func TestScaledSize(t *testing.T) {
	for _, tc := range []struct{ w, h, sw, sh int }{
		{1280, 800, 1280, 800},
		{1024, 768, 1024, 768},
		{1920, 1080, 1429, 804},
		{3840, 2160, 1429, 804},
		{4096, 300, 1568, 114},
	} {
		sw, sh := ScaledSize(tc.w, tc.h)
		if sw != tc.sw || sh != tc.sh {
			t.Errorf("ScaledSize(%d, %d) = %d×%d, want %d×%d", tc.w, tc.h, sw, sh, tc.sw, tc.sh)
		}
		if max(sw, sh) > api.ComputerMaxLongEdge || sw*sh > api.ComputerMaxPixels {
			t.Errorf("%d×%d is beyond the limit", sw, sh)
		}
	}
}

// BenchmarkScreenshot measures the screenshot action at 1280×800: capture
// (GetImage), PNG encoding and base64, on a blank screen and on one of
// random pixels (PNG's worst case). It reports the p50 and p95 per call
// and the PNG's size.
func BenchmarkScreenshot(b *testing.B) {
	if XvfbPath() == "" {
		b.Skip("Xvfb is not installed")
	}
	for _, scene := range []string{"blank", "text", "noise"} {
		b.Run(scene, func(b *testing.B) {
			d, err := Start(context.Background(), Options{Width: 1280, Height: 800, WindowManager: "none"})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			if scene != "blank" {
				paint(b, d, scene == "text")
			}
			c := NewComputer(d)
			var times []time.Duration
			var size int
			for b.Loop() {
				start := time.Now()
				r, err := c.Do(context.Background(), api.ComputerArgs{Action: api.ComputerScreenshot})
				if err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(start))
				size = len(r.Image.Data) * 3 / 4
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(times[len(times)*95/100].Microseconds())/1000, "p95-ms")
			b.ReportMetric(float64(size), "png-bytes")
		})
	}
}

// paint fills the root window, in strips that fit a request without the
// BIG-REQUESTS extension, with random pixels, or with text: dark glyph-like
// speckles in 16-pixel lines on white, like a full terminal.
func paint(b *testing.B, d *Desktop, text bool) {
	conn := d.conn
	gc, err := xproto.NewGcontextId(conn)
	if err != nil {
		b.Fatal(err)
	}
	if err := xproto.CreateGCChecked(conn, gc, xproto.Drawable(d.root), 0, nil).Check(); err != nil {
		b.Fatal(err)
	}
	const rows = 32
	buf := make([]byte, d.width*rows*4)
	rng := rand.New(rand.NewPCG(1, 2))
	for y := 0; y < d.height; y += rows {
		for i := range buf {
			buf[i] = byte(rng.UintN(256))
			if text {
				row := (y + i/(4*d.width)) % 16
				buf[i] = 0xff
				if row >= 3 && row < 13 && rng.UintN(3) == 0 {
					buf[i] = 0x20
				}
			}
		}
		err := xproto.PutImageChecked(conn, xproto.ImageFormatZPixmap, xproto.Drawable(d.root), gc,
			uint16(d.width), rows, 0, int16(y), 0, 24, buf).Check()
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCapture measures GetImage alone at 1280×800, the part of a
// screenshot that a live view's frames also pay.
func BenchmarkCapture(b *testing.B) {
	if XvfbPath() == "" {
		b.Skip("Xvfb is not installed")
	}
	d, err := Start(context.Background(), Options{Width: 1280, Height: 800, WindowManager: "none"})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	for b.Loop() {
		if _, err := d.Capture(image.Rectangle{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDisplayNeedsItsCookie: other processes of the machine (another
// session) cannot use a desktop's display; programs given its Env can.
func TestDisplayNeedsItsCookie(t *testing.T) {
	d := startDesktop(t, 320, 240)
	t.Setenv("XAUTHORITY", filepath.Join(t.TempDir(), "none"))
	if conn, err := xgb.NewConnDisplay(d.Display()); err == nil {
		conn.Close()
		t.Fatal("a client without the cookie connected")
	}
	if _, err := exec.LookPath("xwininfo"); err != nil {
		t.Skip("xwininfo is not installed (x11-utils)")
	}
	bare := exec.Command("xwininfo", "-root")
	bare.Env = []string{"DISPLAY=" + d.Display(), "XAUTHORITY=/nonexistent"}
	if out, err := bare.CombinedOutput(); err == nil {
		t.Errorf("xwininfo without the cookie ran: %s", out)
	}
	with := exec.Command("xwininfo", "-root")
	with.Env = d.Env()
	if out, err := with.CombinedOutput(); err != nil || !strings.Contains(string(out), "320") {
		t.Errorf("xwininfo with the desktop's Env: %v: %s", err, out)
	}
	if info, err := os.Stat(d.authFile); err != nil {
		t.Error(err)
	} else if info.Mode().Perm() != 0o600 {
		t.Errorf("authority file mode %v, want 0600", info.Mode())
	}
}

// TestActionsAfterCloseFail: a closed desktop answers an error at once,
// never hangs.
func TestActionsAfterCloseFail(t *testing.T) {
	d := startDesktop(t, 320, 240)
	c := NewComputer(d)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, api.ComputerArgs{Action: api.ComputerScreenshot})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a screenshot of a closed desktop succeeded")
		}
	case <-ctx.Done():
		t.Fatal("a screenshot of a closed desktop hangs")
	}
}

func TestParseCombo(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		fail bool
	}{
		{"ctrl+a", 2, false}, {"Return", 1, false}, {"ctrl+shift+T", 3, false}, {"ctrl++", 2, false},
		{"+", 1, false}, {"ctrl+", 0, true}, {"", 0, true}, {"ctrl+nosuch", 0, true}, {"super+F35", 2, false},
	} {
		syms, err := parseCombo(tc.in)
		if (err != nil) != tc.fail || (!tc.fail && len(syms) != tc.want) {
			t.Errorf("parseCombo(%q) = %v, %v", tc.in, syms, err)
		}
	}
}

// TestNativeArgumentForms: the forms of Anthropic's native computer tool
// that Outpost's own schema does not lead to are taken: left_mouse_down and
// left_mouse_up at a coordinate move the pointer there first, and a
// click's modifier keys may come in key.
func TestNativeArgumentForms(t *testing.T) {
	d := startDesktop(t, 320, 240)
	c := NewComputer(d)
	do(t, c, api.ComputerArgs{Action: api.ComputerLeftMouseDown, Coordinate: []int{40, 50}})
	if pos := do(t, c, api.ComputerArgs{Action: api.ComputerCursorPosition}); pos.Coordinate[0] != 40 || pos.Coordinate[1] != 50 {
		t.Errorf("after left_mouse_down at 40,50 the pointer is at %v", pos.Coordinate)
	}
	do(t, c, api.ComputerArgs{Action: api.ComputerLeftMouseUp, Coordinate: []int{90, 70}})
	if pos := do(t, c, api.ComputerArgs{Action: api.ComputerCursorPosition}); pos.Coordinate[0] != 90 || pos.Coordinate[1] != 70 {
		t.Errorf("after left_mouse_up at 90,70 the pointer is at %v", pos.Coordinate)
	}
	if r := do(t, c, api.ComputerArgs{Action: api.ComputerLeftClick, Coordinate: []int{10, 10}, Key: "shift"}); r.Image == nil {
		t.Error("a click with key gave no screenshot")
	}
	if pos := do(t, c, api.ComputerArgs{Action: api.ComputerCursorPosition}); pos.Coordinate[0] != 10 || pos.Coordinate[1] != 10 {
		t.Errorf("after the click at 10,10 the pointer is at %v", pos.Coordinate)
	}
}

// TestScaledPointsRoundTrip: a point of the screenshot's space mapped to
// the display and back is the same point, at every scale.
func TestScaledPointsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, size := range [][2]int{{1600, 1000}, {2560, 1600}, {1920, 1080}, {4096, 300}, {1280, 800}} {
		c := &Computer{d: &Desktop{width: size[0], height: size[1]}}
		c.sw, c.sh = ScaledSize(size[0], size[1])
		for x := range c.sw {
			dx, _ := c.toDisplay(x, 0)
			if bx, _ := c.toShot(dx, 0); bx != x || dx >= size[0] {
				t.Fatalf("%v: x %d -> display %d -> %d", size, x, dx, bx)
			}
		}
		for y := range c.sh {
			_, dy := c.toDisplay(0, y)
			if _, by := c.toShot(0, dy); by != y || dy >= size[1] {
				t.Fatalf("%v: y %d -> display %d -> %d", size, y, dy, by)
			}
		}
	}
}
