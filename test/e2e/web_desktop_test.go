//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
	"github.com/outpost-sh/outpost/internal/web"
)

// TestWebUILiveDesktop drives the session page's live desktop in Chromium
// against a real server, worker, remote, Xvfb and xterm: the canvas shows
// what the computer tool's screenshot shows; the person takes control,
// clicks and types into the xterm through the canvas while the agent's
// computer call waits, and hands back, when the call goes on and sees the
// text; leaving the page hands back; a token without sessions.write gets
// no button and its input is refused by the server; screenshots in the
// transcript are thumbnails without their base64 in the page.
func TestWebUILiveDesktop(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"Xvfb", "xterm", "xwininfo", "setsid"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is missing (scripts/test-deps.sh installs it)", bin)
			}
			t.Skipf("%s is not installed (scripts/test-deps.sh installs it)", bin)
		}
	}
	ctx := browser(t)
	c := startCluster(t)
	token := setupOutpost(t, c, "webdesk")
	// Without a sandbox: xterm as root in the bwrap sandbox cannot chown
	// its pty (TestDesktopSession covers the desktop in the sandbox).
	startWorker(t, c, "webdesk", token, "--desktop", "on")
	const w, h = 640, 400
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "webdesk", Title: "live desktop",
		Desktop: &api.DesktopSize{Width: w, Height: h}, Agent: api.Agent{Kind: api.AgentExternal}})
	waitfor.Within(t, 30*time.Second, "the session to run", func() bool { return c.session(id).Status.Status == api.StatusRunning })

	// A distinctive screen: a coloured xterm, mapped before the page
	// looks. (The window manager's desktop covers the root window, so
	// xsetroot would change nothing here.)
	shell := `(setsid xterm -T webdesk -geometry 50x8+60+60 -bg '#1c2a80' -fg white >xterm.log 2>&1 &) && ` +
		`for i in $(seq 200); do xwininfo -name webdesk 2>/dev/null | grep -q IsViewable && exit 0; sleep 0.05; done; cat xterm.log; exit 1`
	if r, err := callTool(c, id, api.ToolExec, api.ExecArgs{Command: shell}); err != nil || !r.OK {
		t.Fatalf("open the xterm: %v %+v", err, r)
	}
	wait := 1.0 // the window manager focuses the new window
	if _, err := callTool(c, id, api.ToolComputer, api.ComputerArgs{Action: api.ComputerWait, Duration: &wait}); err != nil {
		t.Fatal(err)
	}

	signIn(t, ctx, c, c.admin)
	do(t, ctx, "the session page", chromedp.Navigate(c.url+"/ui/sessions/"+id), chromedp.WaitVisible(chromedp.CSS("#desktop canvas")))
	waitJS(t, ctx, "the first frame on the canvas", `Number(document.getElementById("desktop").dataset.frames||0) > 0`, 20*time.Second)
	if got := eval[[]int](t, ctx, `(() => { const c = document.querySelector("#desktop canvas"); return [c.width, c.height]; })()`); got[0] != w || got[1] != h {
		t.Fatalf("canvas is %v, want the display's %d×%d", got, w, h)
	}

	// The canvas shows what the tool sees, within a tolerance, at about
	// the same moment (both are retried until they agree).
	var before image.Image
	var diff float64
	match := waitUntil(15*time.Second, func() bool {
		before = toolShot(t, c, id)
		diff = fractionDiffering(before, canvasImage(t, ctx))
		return diff < 0.005
	})
	if !match {
		t.Fatalf("the canvas differs from the tool's screenshot in %.1f%% of its pixels", diff*100)
	}
	t.Logf("the canvas differs from the tool's screenshot in %.3f%% of its pixels", diff*100)

	// A hidden page draws nothing and queues nothing: it drops the frames
	// of a screen change, and once visible again it asks for a keyframe
	// and shows the screen as it is.
	eval[bool](t, ctx, `(() => { window.deskVis = "hidden"; Object.defineProperty(document, "visibilityState", {configurable: true, get: () => window.deskVis});
		document.dispatchEvent(new Event("visibilitychange")); window.deskDrawn = document.getElementById("desktop").desk.frames; return true; })()`)
	if r, err := callTool(c, id, api.ToolComputer, api.ComputerArgs{Action: api.ComputerType, Text: "# typed while hidden "}); err != nil || !r.OK {
		t.Fatalf("type while the page is hidden: %v %+v", err, r)
	}
	waitJS(t, ctx, "frames dropped while hidden", `document.getElementById("desktop").desk.dropped > 0`, 15*time.Second)
	if eval[bool](t, ctx, `document.getElementById("desktop").desk.frames === window.deskDrawn && document.getElementById("desktop").desk.pending === 0`) != true {
		t.Fatal("a hidden page drew or queued frames")
	}
	eval[bool](t, ctx, `(() => { window.deskVis = "visible"; document.dispatchEvent(new Event("visibilitychange")); return true; })()`)
	match = waitUntil(15*time.Second, func() bool {
		before = toolShot(t, c, id)
		diff = fractionDiffering(before, canvasImage(t, ctx))
		return diff < 0.005
	})
	if !match {
		t.Fatalf("after the page was visible again, the canvas differs from the tool's screenshot in %.1f%% of its pixels", diff*100)
	}

	// Take control: the button shows for a writer, the state says so.
	do(t, ctx, "take control", chromedp.Click(chromedp.CSS("#desktop [data-take]")))
	waitText(t, ctx, "#desktop .desk-state", "You have control", 10*time.Second)

	// The agent's next computer call waits while the person has control.
	type answer struct {
		r   api.ToolResult
		err error
		at  time.Time
	}
	agent := make(chan answer, 1)
	go func() {
		r, err := callTool(c, id, api.ToolComputer, api.ComputerArgs{Action: api.ComputerScreenshot})
		agent <- answer{r, err, time.Now()}
	}()

	// Click into the xterm through the scaled canvas, then type.
	const clickX, clickY = 200, 100 // display pixels, inside the xterm
	pt := eval[[]float64](t, ctx, fmt.Sprintf(`(() => { const c = document.querySelector("#desktop canvas"); c.scrollIntoView(); const r = c.getBoundingClientRect();
		return [r.left + (%d + 0.5) * r.width / c.width, r.top + (%d + 0.5) * r.height / c.height]; })()`, clickX, clickY))
	do(t, ctx, "click the xterm", chromedp.MouseClickXY(pt[0], pt[1]))
	if eval[bool](t, ctx, `document.activeElement === document.querySelector("#desktop canvas")`) != true {
		t.Fatal("the canvas does not have the keyboard focus in control")
	}
	do(t, ctx, "type into the xterm", chromedp.KeyEvent("echo typed-through-the-page"+kb.Enter))
	typed := waitUntil(15*time.Second, func() bool { return fractionDiffering(before, canvasImage(t, ctx)) > 0.002 })
	if !typed {
		t.Fatal("the typing never showed on the canvas")
	}
	typedAt := time.Now()
	// Type-to-see latency: from the page sending one character to the
	// next frame drawn on its canvas (the server, the gateway, XTEST, the
	// xterm's redraw, the capture, PNG tiles back, decoding, drawing).
	lat := eval[[]float64](t, ctx, `(async () => {
		const d = document.getElementById("desktop").desk, out = [];
		for (let i = 0; i < 10; i++) {
			const n = d.frames, t0 = performance.now();
			d.input({kind: "text", text: "x"});
			while (d.frames === n && performance.now() - t0 < 3000) await new Promise(r => setTimeout(r, 1));
			out.push(performance.now() - t0);
			await new Promise(r => setTimeout(r, 100));
		}
		return out;
	})()`)
	slices.Sort(lat)
	t.Logf("type-to-see latency over 10 characters: min %.0f ms, p50 %.0f ms, max %.0f ms", lat[0], lat[len(lat)/2], lat[len(lat)-1])
	select {
	case a := <-agent:
		t.Fatalf("the agent's computer call completed while a person had control: %+v %v", a.r, a.err)
	default:
	}
	handedBack := time.Now()
	do(t, ctx, "hand back", chromedp.Click(chromedp.CSS("#desktop [data-hand-back]")))
	var a answer
	select {
	case a = <-agent:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent's computer call did not go on after hand-back")
	}
	if a.err != nil || !a.r.OK || a.at.Before(handedBack) {
		t.Fatalf("the agent's call after hand-back: %+v %v at %v (handed back at %v)", a.r, a.err, a.at, handedBack)
	}
	var res api.ComputerResult
	if err := json.Unmarshal(a.r.Value, &res); err != nil {
		t.Fatal(err)
	}
	after := decodePNG(t, res)
	if n := differing(before, after); n < 200 {
		t.Errorf("the typed text changed only %d pixels of the agent's screenshot", n)
	} else {
		t.Logf("the typed text changed %d pixels; the agent's call completed %s after the typing showed on the canvas, with the hand-back between", n, a.at.Sub(typedAt).Round(time.Millisecond))
	}
	// The click landed where it was made on the scaled canvas.
	if r, err := callTool(c, id, api.ToolComputer, api.ComputerArgs{Action: api.ComputerCursorPosition}); err != nil || !r.OK {
		t.Fatalf("cursor_position: %v %+v", err, r)
	} else {
		var pos api.ComputerResult
		_ = json.Unmarshal(r.Value, &pos)
		if len(pos.Coordinate) != 2 || abs(pos.Coordinate[0]-clickX) > 1 || abs(pos.Coordinate[1]-clickY) > 1 {
			t.Errorf("the pointer is at %v, want the clicked [%d %d]", pos.Coordinate, clickX, clickY)
		}
	}
	waitText(t, ctx, "#desktop .desk-state", "the agent has control", 10*time.Second)

	// The transcript: readable take-over lines, screenshots as thumbnails
	// served from their event, no base64 of them in the page.
	waitText(t, ctx, "#transcript", "handed back", 10*time.Second)
	waitText(t, ctx, "#transcript", "took control", 1*time.Second)
	sample := res.Image.Data[len(res.Image.Data)/2 : len(res.Image.Data)/2+64]
	for _, when := range []string{"live", "reloaded"} {
		if when == "reloaded" {
			do(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#transcript")))
			waitText(t, ctx, "#transcript", "handed back", 5*time.Second)
		}
		// The page opened after one screenshot (the wait's); at least
		// three more came live.
		waitJS(t, ctx, "screenshot thumbnails ("+when+")", `document.querySelectorAll("figure.shot img").length >= 4`, 10*time.Second)
		waitJS(t, ctx, "a screenshot thumbnail ("+when+")", imgLoaded("figure.shot img"), 10*time.Second)
		if got := eval[[]int](t, ctx, `(() => { const i = document.querySelector("figure.shot img"); return [i.naturalWidth, i.naturalHeight]; })()`); got[0] != w || got[1] != h {
			t.Errorf("%s: the screenshot behind the thumbnail is %v, want %d×%d", when, got, w, h)
		}
		if eval[bool](t, ctx, fmt.Sprintf(`document.documentElement.outerHTML.includes(%q)`, sample)) {
			t.Errorf("%s: the page holds a screenshot's base64", when)
		}
	}

	// The image route: a screenshot's event gives its PNG; another
	// event, or no number, a clear 404.
	var shotSeq, otherSeq int64
	for _, ev := range c.events(id) {
		if ev.Type == api.EventResult && ev.Tool == api.ToolComputer && shotSeq == 0 {
			shotSeq = ev.Seq
		}
		if ev.Type == api.EventCall && otherSeq == 0 {
			otherSeq = ev.Seq
		}
	}
	for path, want := range map[string]int{fmt.Sprint(shotSeq): 200, fmt.Sprint(otherSeq): 404, "x": 404, "0": 404, "999999": 404} {
		code, ct := webGet(t, c, "/ui/sessions/"+id+"/events/"+path+"/image")
		if code != want || (want == 200 && ct != "image/png") || (want == 404 && !strings.HasPrefix(ct, "text/html")) {
			t.Errorf("screenshot of event %s: %d %s, want %d", path, code, ct, want)
		}
	}

	// Leaving the page while in control hands back.
	waitJS(t, ctx, "the desktop again", `!document.querySelector("#desktop [data-take]").hidden`, 20*time.Second)
	do(t, ctx, "take control again", chromedp.Click(chromedp.CSS("#desktop [data-take]")))
	waitText(t, ctx, "#desktop .desk-state", "You have control", 10*time.Second)
	do(t, ctx, "leave the page", chromedp.Navigate(c.url+"/ui/sessions"))
	waitfor.Within(t, 15*time.Second, "a hand-back when the controller left", func() bool { return desktopEvents(c, id) == "take_control,hand_back,take_control,hand_back" })

	// A token that may only watch: no button, and the server refuses the
	// input the page sends anyway.
	var reader api.CreateTokenResponse
	if code := c.api("POST", "/v1/tokens", c.admin, api.CreateTokenRequest{Scopes: []string{api.ScopeSessionsRead}}, &reader); code != 201 {
		t.Fatalf("token: %d", code)
	}
	signOut(t, ctx)
	signIn(t, ctx, c, reader.Secret)
	do(t, ctx, "the session page as a reader", chromedp.Navigate(c.url+"/ui/sessions/"+id), chromedp.WaitVisible(chromedp.CSS("#desktop canvas")))
	waitText(t, ctx, "#desktop .desk-state", "may only watch", 20*time.Second)
	if eval[bool](t, ctx, `document.querySelector("#desktop [data-take]").hidden && document.querySelector("#desktop [data-hand-back]").hidden`) != true {
		t.Error("a reader sees a control button")
	}
	eval[bool](t, ctx, `document.getElementById("desktop").desk.send({type: "input", input: {kind: "text", text: "x"}}), true`)
	waitText(t, ctx, "#desktop .desk-state", api.ScopeSessionsWrite, 10*time.Second)
	if got := desktopEvents(c, id); got != "take_control,hand_back,take_control,hand_back" {
		t.Errorf("desktop events after a reader's attempt: %s", got)
	}

	// The session ends: the page stops trying to reach its desktop.
	if code := c.api("POST", "/v1/sessions/"+id+"/terminate", c.admin, api.TerminateRequest{Reason: "done"}, nil); code >= 300 {
		t.Fatalf("terminate: %d", code)
	}
	waitText(t, ctx, "#desktop .desk-state", "The session has ended", 20*time.Second)
}

// callTool runs a tool of an external session over plain HTTP; unlike
// cluster.api it may run on another goroutine.
func callTool(c *cluster, id, tool string, args any) (api.ToolResult, error) {
	var r api.ToolResult
	b, _ := json.Marshal(args)
	req, _ := http.NewRequest("POST", c.url+"/v1/sessions/"+id+"/tools/"+tool, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+c.admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client().Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return r, fmt.Errorf("%s: %d %s", tool, resp.StatusCode, raw)
	}
	return r, json.Unmarshal(raw, &r)
}

// webGet gets a web UI path signed in as the admin; it returns the status
// and content type.
func webGet(t *testing.T, c *cluster, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", c.url+path, nil)
	req.AddCookie(&http.Cookie{Name: web.CookieName, Value: c.admin})
	resp, err := c.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type")
}

// toolShot is a screenshot by the computer tool.
func toolShot(t *testing.T, c *cluster, id string) image.Image {
	t.Helper()
	r, err := callTool(c, id, api.ToolComputer, api.ComputerArgs{Action: api.ComputerScreenshot})
	if err != nil || !r.OK {
		t.Fatalf("screenshot: %v %+v", err, r)
	}
	var res api.ComputerResult
	if err := json.Unmarshal(r.Value, &res); err != nil {
		t.Fatal(err)
	}
	return decodePNG(t, res)
}

// canvasImage reads the live desktop's canvas.
func canvasImage(t *testing.T, ctx context.Context) image.Image {
	t.Helper()
	url := eval[string](t, ctx, `document.querySelector("#desktop canvas").toDataURL("image/png")`)
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(url, "data:image/png;base64,"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// fractionDiffering is the share of pixels whose colour differs by more
// than a little in some channel; images of different sizes differ
// entirely.
func fractionDiffering(a, b image.Image) float64 {
	if a.Bounds().Size() != b.Bounds().Size() {
		return 1
	}
	n, total := 0, 0
	ab, bb := a.Bounds(), b.Bounds()
	for y := 0; y < ab.Dy(); y++ {
		for x := 0; x < ab.Dx(); x++ {
			total++
			r1, g1, b1, _ := a.At(ab.Min.X+x, ab.Min.Y+y).RGBA()
			r2, g2, b2, _ := b.At(bb.Min.X+x, bb.Min.Y+y).RGBA()
			if far(r1, r2) || far(g1, g2) || far(b1, b2) {
				n++
			}
		}
	}
	return float64(n) / float64(total)
}

func far(a, b uint32) bool { return abs(int(a>>8)-int(b>>8)) > 16 }

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// waitUntil polls cond until it holds or the time is up.
func waitUntil(within time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); ; {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// desktopEvents lists the actions of a session's desktop events.
func desktopEvents(c *cluster, id string) string {
	var actions []string
	for _, ev := range c.events(id) {
		if ev.Type == api.EventDesktop {
			actions = append(actions, ev.Action)
		}
	}
	return strings.Join(actions, ",")
}
