//go:build linux

package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/sandbox"
)

// TestDesktopSession: a script session with a desktop, served by a worker
// in its default sandbox, opens an X program from a command, and the
// computer tool sees its window appear and closes it with a key; zoom
// returns a region at full resolution.
func TestDesktopSession(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"Xvfb", "xmessage", "xwininfo", "setsid"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is missing (scripts/test-deps.sh installs it)", bin)
			}
			t.Skipf("%s is not installed (scripts/test-deps.sh installs it)", bin)
		}
	}
	c := startCluster(t)
	token := setupOutpost(t, c, "desktops")
	startWorker(t, c, "desktops", token, "--isolation", "auto", "--desktop", "on")
	step := func(tool string, args any) api.Step {
		b, _ := json.Marshal(args)
		return api.Step{Tool: tool, Args: b}
	}
	shot := func() api.Step { return step(api.ToolComputer, api.ComputerArgs{Action: api.ComputerScreenshot}) }
	// The commands wait for the window with a deadline of their own
	// (xwininfo lists the display's windows).
	const mapped = `for i in $(seq 200); do xwininfo -name xmessage 2>/dev/null | grep -q IsViewable && exit 0; sleep 0.05; done; exit 1`
	const gone = `for i in $(seq 200); do xwininfo -name xmessage >/dev/null 2>&1 || exit 0; sleep 0.05; done; exit 1`
	wait := 1.0 // as an agent would: the window manager focuses the new window
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "desktops", Title: "desktop",
		Desktop: &api.DesktopSize{Width: 800, Height: 600},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			shot(), // 1: before
			step(api.ToolExec, api.ExecArgs{Command: `setsid xmessage -geometry 300x100+100+100 -default okay "hello from outpost" >/dev/null 2>&1 & ` + mapped}),
			step(api.ToolComputer, api.ComputerArgs{Action: api.ComputerWait, Duration: &wait}),
			shot(), // 4: with the window
			step(api.ToolComputer, api.ComputerArgs{Action: api.ComputerMouseMove, Coordinate: []int{250, 150}}),
			step(api.ToolComputer, api.ComputerArgs{Action: api.ComputerKey, Text: "Return"}),
			step(api.ToolExec, api.ExecArgs{Command: gone}),
			shot(), // 8: after
			step(api.ToolComputer, api.ComputerArgs{Action: api.ComputerZoom, Region: []int{0, 0, 400, 300}}),
		}}})
	s := c.waitFinal(id, 120*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		for _, ev := range c.events(id) {
			if ev.Type == api.EventResult {
				t.Logf("result %d %s ok=%v %s", ev.CallSeq, ev.Tool, ev.OK, ev.Error)
			}
		}
		t.Fatalf("session: %+v", s.Status)
	}
	if caps := s.Status.Capabilities; caps == nil || !caps.Desktop {
		t.Errorf("capabilities do not say desktop: %+v", caps)
	}
	results := map[int64]api.ComputerResult{}
	for _, ev := range c.events(id) {
		if ev.Type == api.EventResult && ev.Tool == api.ToolComputer {
			var r api.ComputerResult
			if err := json.Unmarshal(ev.Value, &r); err != nil {
				t.Fatalf("result %d: %v", ev.CallSeq, err)
			}
			results[ev.CallSeq] = r
		}
	}
	before, with, after := decodePNG(t, results[1]), decodePNG(t, results[4]), decodePNG(t, results[8])
	if before.Bounds().Dx() != 800 || before.Bounds().Dy() != 600 {
		t.Fatalf("screenshot is %v, want the session's 800×600", before.Bounds())
	}
	if n := differing(before, with); n < 1000 {
		t.Errorf("the window's appearance changed only %d pixels", n)
	}
	if n := differing(with, after); n < 1000 {
		t.Errorf("closing the window changed only %d pixels", n)
	}
	if z := results[9]; z.Width != 400 || z.Height != 300 || z.DisplayWidth != 800 {
		t.Errorf("zoom = %dx%d of %d, want 400×300 of 800", z.Width, z.Height, z.DisplayWidth)
	}
}

func decodePNG(t *testing.T, r api.ComputerResult) image.Image {
	t.Helper()
	if r.Image == nil {
		t.Fatalf("result without an image: %+v", r)
	}
	raw, err := base64.StdEncoding.DecodeString(r.Image.Data)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// differing counts the pixels that differ between two images of one size.
func differing(a, b image.Image) int {
	n := 0
	for y := a.Bounds().Min.Y; y < a.Bounds().Max.Y; y++ {
		for x := a.Bounds().Min.X; x < a.Bounds().Max.X; x++ {
			if a.At(x, y) != b.At(x, y) {
				n++
			}
		}
	}
	return n
}

// TestDesktopXtermInSandbox: on a worker in its default (bwrap) sandbox,
// also when the worker runs as root, session code starts xterm on its
// desktop; the terminal stays up, draws its window, and draws what the
// computer tool types into it.
func TestDesktopXtermInSandbox(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"Xvfb", "xterm", "xwininfo", "setsid", "bwrap"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is missing (scripts/test-deps.sh installs it)", bin)
			}
			t.Skipf("%s is not installed (scripts/test-deps.sh installs it)", bin)
		}
	}
	c := startCluster(t)
	token := setupOutpost(t, c, "xterms")
	startWorker(t, c, "xterms", token, "--isolation", "bwrap", "--desktop", "on")
	step := func(tool string, args any) api.Step {
		b, _ := json.Marshal(args)
		return api.Step{Tool: tool, Args: b}
	}
	shot := func() api.Step { return step(api.ToolComputer, api.ComputerArgs{Action: api.ComputerScreenshot}) }
	// xterm reports a failure to set up its terminal on stderr and exits,
	// so the command waits for its window and then checks it is still up.
	const mapped = `for i in $(seq 200); do xwininfo -name outpost-xterm 2>/dev/null | grep -q IsViewable && break; sleep 0.05; done; ` +
		`sleep 0.5; xwininfo -name outpost-xterm | grep -q IsViewable || { cat /tmp/xterm.log; exit 1; }`
	wait := 1.0
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "xterms", Title: "xterm",
		Desktop: &api.DesktopSize{Width: 800, Height: 600},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			shot(), // 1: before
			step(api.ToolExec, api.ExecArgs{Command: `setsid xterm -T outpost-xterm -geometry 60x15+50+50 >/tmp/xterm.log 2>&1 & ` + mapped}),
			step(api.ToolComputer, api.ComputerArgs{Action: api.ComputerWait, Duration: &wait}),
			shot(), // 4: with the terminal
			step(api.ToolComputer, api.ComputerArgs{Action: api.ComputerLeftClick, Coordinate: []int{200, 120}}),
			step(api.ToolComputer, api.ComputerArgs{Action: api.ComputerType, Text: "echo typed into the terminal\n"}),
			step(api.ToolComputer, api.ComputerArgs{Action: api.ComputerWait, Duration: &wait}),
			shot(), // 8: after typing
			step(api.ToolExec, api.ExecArgs{Command: `xwininfo -name outpost-xterm | grep -q IsViewable && id -u`}),
		}}})
	s := c.waitFinal(id, 120*time.Second)
	var uid string
	results := map[int64]api.ComputerResult{}
	for _, ev := range c.events(id) {
		if ev.Type != api.EventResult {
			continue
		}
		if ev.Tool != api.ToolComputer && ((ev.OK != nil && !*ev.OK) || s.Status.StatusDetail != api.DetailFinished) {
			t.Logf("result %d %s %s %s", ev.CallSeq, ev.Tool, ev.Error, ev.Value)
		}
		switch {
		case ev.Tool == api.ToolComputer:
			var r api.ComputerResult
			if err := json.Unmarshal(ev.Value, &r); err != nil {
				t.Fatalf("result %d: %v", ev.CallSeq, err)
			}
			results[ev.CallSeq] = r
		case ev.CallSeq == 9:
			var r api.ExecResult
			if err := json.Unmarshal(ev.Value, &r); err != nil {
				t.Fatalf("result %d: %v", ev.CallSeq, err)
			}
			uid = strings.TrimSpace(r.Tail)
		}
	}
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session: %+v", s.Status)
	}
	if os.Geteuid() == 0 && uid != strconv.Itoa(sandbox.SessionUID) {
		t.Errorf("session code of a root worker ran as uid %q in the sandbox, want %d", uid, sandbox.SessionUID)
	}
	before, with, after := decodePNG(t, results[1]), decodePNG(t, results[4]), decodePNG(t, results[8])
	if n := differing(before, with); n < 1000 {
		t.Errorf("the terminal's window changed only %d pixels", n)
	}
	if n := differing(with, after); n < 100 {
		t.Errorf("typing into the terminal changed only %d pixels", n)
	}
}

// TestOutpostDesktopClaims: an outpost whose sessions get a desktop, of
// its size: a worker that gives none never takes its session; one that
// gives desktops does, and the session's screen is the outpost's size.
func TestOutpostDesktopClaims(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("Xvfb"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("Xvfb is missing (scripts/test-deps.sh installs it)")
		}
		t.Skip("Xvfb is not installed (scripts/test-deps.sh installs it)")
	}
	c := startCluster(t)
	token := setupOutpost(t, c, "deskpost")
	run(t, c.env(c.admin), "outposts", "update", "deskpost", "--desktop", "640x480")
	startWorker(t, c, "deskpost", token, "--desktop", "off")
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "deskpost", Title: "outpost desktop",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			{Tool: api.ToolComputer, Args: json.RawMessage(`{"action":"screenshot"}`)},
		}}})
	// The worker without a desktop is connected and polling; for two
	// seconds the session stays in the queue.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if s := c.session(id); s.Status.Status != api.StatusNew {
			t.Fatalf("a worker without a desktop took the session: %+v", s.Status)
		}
		time.Sleep(100 * time.Millisecond) // a bounded negative check: nothing to wait on
	}
	startWorker(t, c, "deskpost", token, "--desktop", "on")
	s := c.waitFinal(id, 120*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session: %+v", s.Status)
	}
	if d := s.Spec.Desktop; d == nil || *d != (api.DesktopSize{Width: 640, Height: 480}) {
		t.Errorf("session's desktop %+v, want the outpost's 640×480", d)
	}
	for _, ev := range c.events(id) {
		if ev.Type == api.EventResult && ev.Tool == api.ToolComputer {
			var r api.ComputerResult
			if err := json.Unmarshal(ev.Value, &r); err != nil {
				t.Fatal(err)
			}
			if img := decodePNG(t, r); img.Bounds().Dx() != 640 || img.Bounds().Dy() != 480 {
				t.Errorf("screenshot is %v, want the outpost's 640×480", img.Bounds())
			}
			return
		}
	}
	t.Fatal("no screenshot on the transcript")
}
