package remote

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestDesktopRecording records an X display (a real Xvfb) when
// OUTPOST_DESKTOP is on: the file is a video ffprobe can read.
func TestDesktopRecording(t *testing.T) {
	// Not parallel: it changes the environment.
	for _, bin := range []string{"Xvfb", "ffmpeg", "ffprobe"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed (apt-get install xvfb ffmpeg)", bin)
		}
	}
	// -displayfd writes the display number Xvfb picked once it is ready.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	xvfb := exec.Command("Xvfb", "-displayfd", "3", "-screen", "0", "320x240x24", "-nolisten", "tcp")
	xvfb.ExtraFiles = []*os.File{w}
	if err := xvfb.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// SIGTERM, not a kill: Xvfb then removes its socket from /tmp/.X11-unix.
	t.Cleanup(func() { _ = xvfb.Process.Signal(syscall.SIGTERM); _ = xvfb.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(r).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	var display string
	select {
	case display = <-line:
	case <-time.After(20 * time.Second):
		t.Fatal("Xvfb did not start")
	}
	t.Setenv("DISPLAY", ":"+display)
	// The public contract's name turns it on as OUTPOST_DESKTOP does.
	t.Setenv(api.EnvDesktop.Public, "true")

	tc := newTestCall(t, t.TempDir(), nil)
	tc.c.stateDir = t.TempDir()
	defer tc.c.browser.close()
	ctx := context.Background()
	var start api.RecordStartResult
	if err := tc.run(t, ctx, api.ToolRecordStart, api.RecordStartArgs{Name: "desk.mp4"}, &start); err != nil {
		t.Fatal(err)
	}
	<-time.After(3 * time.Second) // record some seconds of the display (ffmpeg may start slowly on a busy machine)
	var res api.BrowserFileResult
	if err := tc.run(t, ctx, api.ToolRecordStop, api.RecordStopArgs{}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Path != start.Path || res.Size == 0 || res.ContentType != "video/mp4" {
		t.Fatalf("record_stop = %+v", res)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "default=noprint_wrappers=1:nokey=1", res.Path).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v: %s", err, out)
	}
	if d, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err != nil || d <= 0 {
		t.Fatalf("ffprobe duration %q: %v", out, err)
	}
}
