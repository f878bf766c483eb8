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
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
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
