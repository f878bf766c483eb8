package remote

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/desktop"
)

// startDesktopServe runs Serve for a session with a desktop (or without,
// when desk is nil).
func startDesktopServe(t *testing.T, g *testGateway, desk *DesktopOptions) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	done := make(chan struct{})
	caps := api.Capabilities{OS: "test", Tools: []string{api.ToolExec, api.ToolComputer}}
	go func() {
		defer close(done)
		errc <- Serve(ctx, Options{
			GatewayURL: g.url(), ConnectToken: testToken, SessionID: testSession,
			StateDir: t.TempDir(), WorkDir: t.TempDir(),
			Logger:       slog.New(slog.NewTextHandler(testWriter{t}, nil)),
			Capabilities: &caps, Desktop: desk,
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return errc
}

// computerCall runs one computer action and returns its result.
func computerCall(t *testing.T, gc *gwConn, seq int64, a api.ComputerArgs) (api.ComputerResult, api.Frame) {
	t.Helper()
	gc.send(t, api.Frame{Type: api.FrameCall, Seq: seq, Tool: api.ToolComputer, Args: mustJSON(a)})
	f := gc.next(t, api.FrameResult)
	if f.Seq != seq {
		t.Fatalf("result of %d, want %d", f.Seq, seq)
	}
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: seq})
	var r api.ComputerResult
	if f.OK {
		if err := json.Unmarshal(f.Value, &r); err != nil {
			t.Fatal(err)
		}
	}
	return r, f
}

// level is the mean red level of r in a computer result's image.
func level(t *testing.T, res api.ComputerResult, r image.Rectangle) int {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(res.Image.Data)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	sum, n := 0, 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			red, _, _, _ := img.At(x, y).RGBA()
			sum += int(red >> 8)
			n++
		}
	}
	return sum / n
}

// TestServeDesktop: a session with a desktop gets one of its size on
// first use; its programs find it in $DISPLAY; the computer tool sees an
// X program's window appear and closes it with a key; the session's end
// takes the display away.
func TestServeDesktop(t *testing.T) {
	for _, bin := range []string{"Xvfb", "xmessage", "setsid"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is missing (scripts/test-deps.sh installs it)", bin)
			}
			t.Skipf("%s is not installed", bin)
		}
	}
	g := newTestGateway(t)
	errc := startDesktopServe(t, g, &DesktopOptions{WindowManager: "none"})
	gc := g.accept(t)
	hello := gc.next(t, api.FrameHello)
	if c := hello.Capabilities; c == nil || !c.Desktop || !slices.Contains(c.Tools, api.ToolComputer) {
		t.Fatalf("hello capabilities = %+v, want a desktop and the computer tool", hello.Capabilities)
	}
	gc.send(t, api.Frame{Type: api.FrameWelcome, Desktop: &api.DesktopSize{Width: 640, Height: 480}})

	blank, f := computerCall(t, gc, 1, api.ComputerArgs{Action: api.ComputerScreenshot})
	if !f.OK || blank.Width != 640 || blank.Height != 480 || blank.Image == nil || blank.Image.MediaType != "image/png" {
		t.Fatalf("screenshot result = %+v (%s)", blank, f.Error)
	}
	win := image.Rect(100, 100, 130, 120) // the top left of the message's window
	base := level(t, blank, win)

	gc.send(t, execCall(2, `echo "display=$DISPLAY"; setsid xmessage -geometry +100+100 -default okay "hello from outpost" >/dev/null 2>&1 &`))
	if res := gc.next(t, api.FrameResult); !res.OK {
		t.Fatalf("exec: %+v", res)
	}
	out := gc.output(2, api.StreamStdout)
	display := strings.TrimSpace(strings.TrimPrefix(out, "display="))
	if !strings.HasPrefix(display, ":") {
		t.Fatalf("the session's programs got DISPLAY %q", out)
	}
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 2})

	// The window appears (xmessage needs a moment to map it).
	seq := int64(3)
	deadline := time.Now().Add(waitTimeout)
	for {
		shot, f := computerCall(t, gc, seq, api.ComputerArgs{Action: api.ComputerScreenshot})
		seq++
		if !f.OK {
			t.Fatal(f.Error)
		}
		if level(t, shot, win) != base {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("xmessage's window never showed on the screenshots")
		}
	}
	// Pointer into the window (focus follows it without a window
	// manager), then Return presses the default button and closes it.
	if _, f := computerCall(t, gc, seq, api.ComputerArgs{Action: api.ComputerMouseMove, Coordinate: []int{120, 110}}); !f.OK {
		t.Fatal(f.Error)
	}
	seq++
	if _, f := computerCall(t, gc, seq, api.ComputerArgs{Action: api.ComputerKey, Text: "Return"}); !f.OK {
		t.Fatal(f.Error)
	}
	seq++
	for {
		shot, f := computerCall(t, gc, seq, api.ComputerArgs{Action: api.ComputerScreenshot})
		seq++
		if !f.OK {
			t.Fatal(f.Error)
		}
		if level(t, shot, win) == base {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Return did not close xmessage's window")
		}
	}
	// Bad arguments: a clear error, nothing run.
	if _, f := computerCall(t, gc, seq, api.ComputerArgs{Action: api.ComputerLeftClick, Coordinate: []int{640, 0}}); f.OK || !strings.Contains(f.Error, "outside the screen") {
		t.Errorf("click outside the screen: %+v", f)
	}

	gc.send(t, api.Frame{Type: api.FrameEnd, Reason: "done"})
	if err := waitErr(t, errc); err != nil {
		t.Fatalf("Serve = %v", err)
	}
	if _, err := os.Stat("/tmp/.X11-unix/X" + strings.TrimPrefix(display, ":")); !os.IsNotExist(err) {
		t.Errorf("the display's socket is left after the session (stat: %v)", err)
	}
}

// TestServeWithoutDesktop: a session without a desktop is not offered the
// computer tool, and a call of it says why.
func TestServeWithoutDesktop(t *testing.T) {
	g := newTestGateway(t)
	startDesktopServe(t, g, nil)
	gc := g.accept(t)
	hello := gc.handshake(t, nil, nil)
	if c := hello.Capabilities; c.Desktop || slices.Contains(c.Tools, api.ToolComputer) {
		t.Fatalf("capabilities = %+v, want no desktop and no computer tool", c)
	}
	_, f := computerCall(t, gc, 1, api.ComputerArgs{Action: api.ComputerScreenshot})
	if f.OK || !strings.Contains(f.Error, "this session has no desktop") {
		t.Fatalf("computer without a desktop: %+v", f)
	}
}

func TestDesktopFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if d := desktopFromEnv(env(nil)); d != nil {
		t.Errorf("no variable: %+v", d)
	}
	if d := desktopFromEnv(env(map[string]string{"DEVIN_OUTPOST_DESKTOP": "true"})); d == nil || d.Display != "" {
		t.Errorf("public name, no DISPLAY: %+v, want a virtual desktop", d)
	}
	if d := desktopFromEnv(env(map[string]string{"OUTPOST_DESKTOP": "true", "DISPLAY": ":3"})); d == nil || d.Display != ":3" {
		t.Errorf("with DISPLAY: %+v, want that display", d)
	}
	if d := desktopFromEnv(env(map[string]string{"OUTPOST_DESKTOP": "false"})); d != nil {
		t.Errorf("false: %+v", d)
	}
}

// TestServeDesktopOnDemand: a session that gave no desktop size gets the
// default one, started by its first computer call, not by its commands;
// from then on its commands find it in $DISPLAY.
func TestServeDesktopOnDemand(t *testing.T) {
	if _, err := exec.LookPath("Xvfb"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("Xvfb is missing (scripts/test-deps.sh installs it)")
		}
		t.Skip("Xvfb is not installed")
	}
	t.Setenv("DISPLAY", "") // the remote's own environment has none
	g := newTestGateway(t)
	startDesktopServe(t, g, &DesktopOptions{WindowManager: "none"})
	gc := g.accept(t)
	gc.handshake(t, nil, nil)

	gc.send(t, execCall(1, `echo "display=$DISPLAY."`))
	if res := gc.next(t, api.FrameResult); !res.OK {
		t.Fatalf("exec: %+v", res)
	}
	if out := gc.output(1, api.StreamStdout); out != "display=.\n" {
		t.Errorf("before the desktop is used, a command got %q", out)
	}
	shot, f := computerCall(t, gc, 2, api.ComputerArgs{Action: api.ComputerScreenshot})
	if !f.OK || shot.Width != 1280 || shot.Height != 800 {
		t.Fatalf("first screenshot: %+v %s, want the default 1280×800", shot, f.Error)
	}
	gc.send(t, execCall(3, `echo "display=$DISPLAY."`))
	if res := gc.next(t, api.FrameResult); !res.OK {
		t.Fatalf("exec: %+v", res)
	}
	if out := gc.output(3, api.StreamStdout); !strings.HasPrefix(out, "display=:") {
		t.Errorf("once the desktop runs, a command got %q", out)
	}
}

// TestServeDesktopBrowser: on a session's desktop the browser is a window
// the computer tool sees.
func TestServeDesktopBrowser(t *testing.T) {
	for _, bin := range []string{"Xvfb", "chromium"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed", bin)
		}
	}
	g := newTestGateway(t)
	startDesktopServe(t, g, &DesktopOptions{WindowManager: "none"})
	gc := g.accept(t)
	gc.next(t, api.FrameHello)
	gc.send(t, api.Frame{Type: api.FrameWelcome, Desktop: &api.DesktopSize{Width: 800, Height: 600}})

	page := "data:text/html,<body style='background:rgb(255,0,0);margin:0'></body>"
	gc.send(t, api.Frame{Type: api.FrameCall, Seq: 1, Tool: api.ToolBrowserNavigate, Args: mustJSON(api.BrowserNavigateArgs{URL: page}), TimeoutS: 60})
	if res := gc.next(t, api.FrameResult); !res.OK {
		t.Fatalf("browser_navigate: %+v", res)
	}
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 1})
	// The window paints a moment after the page has loaded.
	deadline := time.Now().Add(waitTimeout)
	for seq := int64(2); ; seq++ {
		shot, f := computerCall(t, gc, seq, api.ComputerArgs{Action: api.ComputerScreenshot})
		if !f.OK {
			t.Fatal(f.Error)
		}
		red := redPixels(t, shot)
		if total := 200 * 150; red >= total/4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sampled pixels are the page's red: the browser is not on the desktop", red)
		}
	}
}

// redPixels counts the pure red pixels of a screenshot, one in 4×4.
func redPixels(t *testing.T, shot api.ComputerResult) int {
	t.Helper()
	raw, _ := base64.StdEncoding.DecodeString(shot.Image.Data)
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	red := 0
	b := img.Bounds()
	for y := 0; y < b.Dy(); y += 4 {
		for x := 0; x < b.Dx(); x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 > 240 && g>>8 < 16 && bl>>8 < 16 {
				red++
			}
		}
	}
	return red
}

// TestRecordSessionDesktop: record_start records the session's desktop,
// which ffmpeg reaches with the display's cookie.
func TestRecordSessionDesktop(t *testing.T) {
	for _, bin := range []string{"Xvfb", "ffmpeg"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed", bin)
		}
	}
	d, err := desktop.Start(context.Background(), desktop.Options{Width: 320, Height: 240, WindowManager: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	tc := newTestCall(t, t.TempDir(), nil)
	tc.c.stateDir = t.TempDir()
	tc.c.env = mergeEnv(tc.c.env, map[string]string{"DISPLAY": d.Display(), "XAUTHORITY": strings.TrimPrefix(d.Env()[1], "XAUTHORITY=")})
	tc.c.desktop = &desktopHost{opts: &DesktopOptions{}}
	defer tc.c.browser.close()
	ctx := context.Background()
	if err := tc.run(t, ctx, api.ToolRecordStart, api.RecordStartArgs{Name: "desk.mp4"}, nil); err != nil {
		t.Fatal(err)
	}
	// Some frames of the display, then stop.
	comp := desktop.NewComputer(d)
	for i := range 10 {
		if _, err := comp.Do(ctx, api.ComputerArgs{Action: api.ComputerMouseMove, Coordinate: []int{10 + i*20, 10 + i*10}}); err != nil {
			t.Fatal(err)
		}
	}
	var res api.BrowserFileResult
	if err := tc.run(t, ctx, api.ToolRecordStop, api.RecordStopArgs{}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Size == 0 || res.ContentType != "video/mp4" {
		t.Fatalf("record_stop = %+v", res)
	}
}
