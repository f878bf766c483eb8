package remote

import (
	"context"
	"encoding/json"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/machine"
)

const testPage = `<!doctype html>
<html><head><title>Outpost test</title></head>
<body>
<h1>Hello</h1>
<input id="name" type="text">
<button id="go" onclick="document.getElementById('out').textContent = 'Hi ' + document.getElementById('name').value; console.log('clicked', 42)">Go</button>
<p id="out">nobody yet</p>
<script>console.warn("loaded")</script>
</body></html>`

// newBrowserCall returns a call whose session's browser is closed when the
// test ends, and the URL of a test page; it skips when Chrome is missing.
func newBrowserCall(t *testing.T) (*testCall, string) {
	t.Helper()
	if machine.ChromePath() == "" {
		t.Skip("Chrome/Chromium not installed (apt-get install chromium, or set OUTPOST_CHROME_PATH)")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(testPage))
	}))
	t.Cleanup(srv.Close)
	tc := newTestCall(t, t.TempDir(), nil)
	tc.c.stateDir = t.TempDir()
	t.Cleanup(tc.c.browser.close)
	return tc, srv.URL + "/page"
}

func TestBrowserTools(t *testing.T) {
	t.Parallel()
	tc, url := newBrowserCall(t)
	ctx := context.Background()

	var nav api.BrowserNavigateResult
	if err := tc.run(t, ctx, api.ToolBrowserNavigate, api.BrowserNavigateArgs{URL: url}, &nav); err != nil {
		t.Fatal(err)
	}
	if nav.URL != url || nav.Title != "Outpost test" {
		t.Fatalf("navigate = %+v", nav)
	}
	if err := tc.run(t, ctx, api.ToolBrowserType, api.BrowserTypeArgs{Selector: "#name", Text: "Ada"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := tc.run(t, ctx, api.ToolBrowserClick, api.BrowserClickArgs{Selector: "#go"}, nil); err != nil {
		t.Fatal(err)
	}
	var txt api.BrowserTextResult
	if err := tc.run(t, ctx, api.ToolBrowserText, api.BrowserTextArgs{Selector: "#out"}, &txt); err != nil {
		t.Fatal(err)
	}
	if txt.Text != "Hi Ada" {
		t.Fatalf("text of #out = %q, want Hi Ada", txt.Text)
	}
	if err := tc.run(t, ctx, api.ToolBrowserText, api.BrowserTextArgs{}, &txt); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt.Text, "Hello") || !strings.Contains(txt.Text, "Hi Ada") {
		t.Fatalf("page text = %q", txt.Text)
	}

	// press: Backspace in the focused input.
	if err := tc.run(t, ctx, api.ToolBrowserClick, api.BrowserClickArgs{Selector: "#name"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := tc.run(t, ctx, api.ToolBrowserPress, api.BrowserPressArgs{Key: "End"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := tc.run(t, ctx, api.ToolBrowserPress, api.BrowserPressArgs{Key: "Backspace"}, nil); err != nil {
		t.Fatal(err)
	}
	var val json.RawMessage
	if err := tc.run(t, ctx, api.ToolBrowserEval, api.BrowserEvalArgs{Expression: `document.getElementById("name").value`}, &val); err != nil {
		t.Fatal(err)
	}
	if string(val) != `"Ad"` {
		t.Fatalf("input value after Backspace = %s", val)
	}
	if err := tc.run(t, ctx, api.ToolBrowserPress, api.BrowserPressArgs{Key: "Hyper"}, nil); err == nil || !strings.Contains(err.Error(), "unknown key") {
		t.Fatalf("press Hyper: %v", err)
	}

	var obj struct {
		Sum int    `json:"sum"`
		S   string `json:"s"`
	}
	if err := tc.run(t, ctx, api.ToolBrowserEval, api.BrowserEvalArgs{Expression: `Promise.resolve({sum: 1 + 2, s: "x"})`}, &obj); err != nil {
		t.Fatal(err)
	}
	if obj.Sum != 3 || obj.S != "x" {
		t.Fatalf("eval = %+v", obj)
	}
	if err := tc.run(t, ctx, api.ToolBrowserEval, api.BrowserEvalArgs{Expression: `undefined`}, &val); err != nil || string(val) != "null" {
		t.Fatalf("eval undefined = %s, %v", val, err)
	}
	if err := tc.run(t, ctx, api.ToolBrowserEval, api.BrowserEvalArgs{Expression: `(() => { throw new Error("boom") })()`}, nil); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("eval throw: %v", err)
	}

	var shot api.BrowserFileResult
	if err := tc.run(t, ctx, api.ToolBrowserScreenshot, api.BrowserScreenshotArgs{Name: "after-click"}, &shot); err != nil {
		t.Fatal(err)
	}
	var vp struct{ W, H int }
	if err := tc.run(t, ctx, api.ToolBrowserEval, api.BrowserEvalArgs{Expression: `({W: window.innerWidth, H: window.innerHeight})`}, &vp); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(shot.Path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(f)
	f.Close()
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if filepath.Base(shot.Path) != "after-click.png" || cfg.Width != vp.W || cfg.Height != vp.H || shot.Width != vp.W || shot.Size == 0 {
		t.Fatalf("screenshot %+v, PNG %dx%d, viewport %dx%d", shot, cfg.Width, cfg.Height, vp.W, vp.H)
	}
	if err := tc.run(t, ctx, api.ToolBrowserScreenshot, api.BrowserScreenshotArgs{Name: "../evil"}, nil); err == nil {
		t.Fatal("screenshot named ../evil was taken")
	}

	// Console messages arrive asynchronously: poll.
	deadline := time.Now().Add(10 * time.Second)
	var got []api.BrowserConsoleMessage
	for {
		var cons api.BrowserConsoleResult
		if err := tc.run(t, ctx, api.ToolBrowserConsole, api.BrowserConsoleArgs{}, &cons); err != nil {
			t.Fatal(err)
		}
		got = append(got, cons.Messages...)
		var clicked bool
		for _, m := range got {
			clicked = clicked || (m.Level == "log" && m.Text == "clicked 42")
		}
		if clicked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("console = %+v, want clicked 42", got)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A selector that never matches fails with the call's timeout.
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := tc.run(t, short, api.ToolBrowserClick, api.BrowserClickArgs{Selector: "#missing"}, nil); err == nil {
		t.Fatal("click on a missing element succeeded")
	}
	// The browser survives a timed-out call.
	if err := tc.run(t, ctx, api.ToolBrowserText, api.BrowserTextArgs{Selector: "h1"}, &txt); err != nil || txt.Text != "Hello" {
		t.Fatalf("text after a timeout = %q, %v", txt.Text, err)
	}
}

func TestRecording(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed (apt-get install ffmpeg)")
	}
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("ffprobe not installed (apt-get install ffmpeg)")
	}
	tc, url := newBrowserCall(t)
	ctx := context.Background()

	if err := tc.run(t, ctx, api.ToolRecordStop, api.RecordStopArgs{}, nil); err == nil {
		t.Fatal("record_stop without a recording succeeded")
	}
	if err := tc.run(t, ctx, api.ToolBrowserNavigate, api.BrowserNavigateArgs{URL: url}, nil); err != nil {
		t.Fatal(err)
	}
	var start api.RecordStartResult
	if err := tc.run(t, ctx, api.ToolRecordStart, api.RecordStartArgs{Name: "demo"}, &start); err != nil {
		t.Fatal(err)
	}
	if err := tc.run(t, ctx, api.ToolRecordStart, api.RecordStartArgs{}, nil); err == nil {
		t.Fatal("a second recording started")
	}
	// About two seconds of activity: type a character at a time.
	begin := time.Now()
	for i := 0; time.Since(begin) < 2*time.Second; i++ {
		if err := tc.run(t, ctx, api.ToolBrowserType, api.BrowserTypeArgs{Selector: "#name", Text: strconv.Itoa(i % 10)}, nil); err != nil {
			t.Fatal(err)
		}
		if err := tc.run(t, ctx, api.ToolBrowserClick, api.BrowserClickArgs{Selector: "#go"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var res api.BrowserFileResult
	if err := tc.run(t, ctx, api.ToolRecordStop, api.RecordStopArgs{}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Path != start.Path || filepath.Base(res.Path) != "demo.mp4" || res.ContentType != "video/mp4" || res.Size == 0 || res.Frames == 0 {
		t.Fatalf("record_stop = %+v (start %+v)", res, start)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "default=noprint_wrappers=1:nokey=1", res.Path).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v: %s", err, out)
	}
	d, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || d <= 0 {
		t.Fatalf("ffprobe duration %q: %v", out, err)
	}
	t.Logf("recording: %+v, ffprobe duration %.2fs", res, d)
}

// TestBrowserWithoutChrome points either name of the Chrome path at a
// missing file: the error names the variable that was set.
func TestBrowserWithoutChrome(t *testing.T) {
	// Not parallel: it changes the environment.
	for _, name := range api.EnvChromePath.Names() {
		t.Run(name, func(t *testing.T) {
			for _, n := range api.EnvChromePath.Names() {
				t.Setenv(n, "")
			}
			t.Setenv(name, filepath.Join(t.TempDir(), "no-such-chrome"))
			tc := newTestCall(t, t.TempDir(), nil)
			tc.c.stateDir = t.TempDir()
			defer tc.c.browser.close()
			err := tc.run(t, context.Background(), api.ToolBrowserNavigate, api.BrowserNavigateArgs{URL: "http://127.0.0.1:1/"}, nil)
			if err == nil || !strings.Contains(err.Error(), name+" is") || !strings.Contains(err.Error(), "apt-get install chromium") {
				t.Fatalf("navigate without Chrome: %v", err)
			}
		})
	}
}
