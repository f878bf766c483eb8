//go:build !windows

package bench

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
)

// transcriptEvents makes n transcript events shaped like a script session's:
// per tool call a call, two lines of coloured output and a result.
func transcriptEvents(n int) []api.Event {
	evs := make([]api.Event, 0, n)
	ok, zero := true, 0
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	for call := int64(1); len(evs) < n; call++ {
		at := t0 + call*10
		args, _ := json.Marshal(map[string]string{"command": fmt.Sprintf("make test PKG=./pkg/%d", call)})
		value, _ := json.Marshal(map[string]any{"exit_code": 0, "duration_ms": 12})
		for _, ev := range []api.Event{
			{Type: api.EventCall, Time: at, CallSeq: call, Tool: api.ToolExec, Args: args},
			{Type: api.EventOutput, Time: at + 1, CallSeq: call, Stream: "stdout", Text: fmt.Sprintf("\x1b[32mok\x1b[0m  \tgithub.com/example/pkg/%d\t0.%03ds\n", call, call%1000)},
			{Type: api.EventOutput, Time: at + 2, CallSeq: call, Stream: "stderr", Text: "warning: <this> & that are \x1b[1mescaped\x1b[0m\n"},
			{Type: api.EventResult, Time: at + 3, CallSeq: call, Tool: api.ToolExec, OK: &ok, ExitCode: &zero, Value: value},
		} {
			if len(evs) < n {
				evs = append(evs, ev)
			}
		}
	}
	return evs
}

// shotEvents makes n transcript events shaped like a computer-use
// session's: per call a screenshot action and its result, which carries
// a 1280×800 PNG inline (base64), as the computer tool's results do. The
// image is a desktop-like picture (flat colours, a window with lines of
// "text"), so it compresses about as a real one does.
func shotEvents(n int) ([]api.Event, int) {
	img := image.NewRGBA(image.Rect(0, 0, 1280, 800))
	r := rand.New(rand.NewPCG(1, 2))
	for y := range 800 {
		for x := range 1280 {
			c := color.RGBA{0x2a, 0x6e, 0x3f, 0xff}
			if x >= 100 && x < 900 && y >= 80 && y < 600 {
				c = color.RGBA{0x1c, 0x2a, 0x80, 0xff}
				if y%16 < 10 && x < 100+(y*37)%700 && r.IntN(3) == 0 {
					c = color.RGBA{0xff, 0xff, 0xff, 0xff}
				}
			}
			img.SetRGBA(x, y, c)
		}
	}
	var buf bytes.Buffer
	_ = png.Encode(&buf, img)
	value, _ := json.Marshal(api.ComputerResult{Image: &api.ComputerImage{MediaType: "image/png", Data: base64.StdEncoding.EncodeToString(buf.Bytes())},
		Width: 1280, Height: 800, DisplayWidth: 1280, DisplayHeight: 800})
	args, _ := json.Marshal(api.ComputerArgs{Action: api.ComputerScreenshot})
	ok := true
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	evs := make([]api.Event, 0, n)
	for call := int64(1); len(evs) < n; call++ {
		at := t0 + call*10
		evs = append(evs, api.Event{Type: api.EventCall, Time: at, CallSeq: call, Tool: api.ToolComputer, Args: args})
		if len(evs) < n {
			evs = append(evs, api.Event{Type: api.EventResult, Time: at + 80, CallSeq: call, Tool: api.ToolComputer, OK: &ok, Value: value})
		}
	}
	return evs, buf.Len()
}

// BenchmarkSessionPage measures how fast the web UI's session page opens
// for a session with a long transcript (OUTPOST_BENCH_EVENTS, default
// 10,000 events): the server's time from request to the last byte of the
// HTML, over OUTPOST_BENCH_PAGE_LOADS loads (default 50), on a warm server.
//
// The server runs in this process (server.New) on loopback. The session is
// created through the API; its events are written through the same SQLite
// store the server uses (store.AppendEvents, in batches of 1000), which is
// how the server itself records them, only without a remote producing them
// one by one, which would take minutes.
//
// With OUTPOST_BENCH_SHOTS=1 the events are a computer-use session's
// screenshots (shotEvents) instead, for the page's weight.
func BenchmarkSessionPage(b *testing.B) {
	n := envInt("OUTPOST_BENCH_EVENTS", 10000)
	loads := envInt("OUTPOST_BENCH_PAGE_LOADS", 50)
	ctx := context.Background()
	dataDir := b.TempDir()
	sq, err := sqlite.Open(ctx, filepath.Join(dataDir, "outpost.db"))
	if err != nil {
		b.Fatal(err)
	}
	srv := servertest.Start(b, server.Options{DataDir: dataDir, AdminToken: adminToken, Store: sq})
	admin := srv.Client
	if _, err := admin.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "pages", Platform: api.PlatformLinux}); err != nil {
		b.Fatal(err)
	}
	s, err := admin.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: "pages", Title: "ten thousand events",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}})
	if err != nil {
		b.Fatal(err)
	}
	id := s.Metadata.SessionID
	start := time.Now()
	evs := transcriptEvents(n)
	if envInt("OUTPOST_BENCH_SHOTS", 0) > 0 {
		var pngSize int
		evs, pngSize = shotEvents(n)
		b.Logf("each screenshot: a %d KiB PNG", pngSize/1024)
	}
	for i := 0; i < len(evs); i += 1000 {
		if err := sq.AppendEvents(ctx, id, evs[i:min(i+1000, len(evs))]); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("wrote %d events in %s", n, time.Since(start).Round(time.Millisecond))

	hc := &http.Client{}
	load := func(path string) (time.Duration, int, string) {
		req, _ := http.NewRequest("GET", srv.URL()+path, nil)
		req.AddCookie(&http.Cookie{Name: "outpost_token", Value: adminToken})
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(t0)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return d, len(body), string(body)
	}
	page := "/ui/sessions/" + id
	_, size, body := load(page) // warm up, and check what the page shows
	// Each event shown has its raw JSON, marked with its seq.
	shown := strings.Count(body, ` data-seq="`)
	// (A short transcript also shows the events of the session's creation.)
	if shown < min(n, 500) || shown > 500 || !strings.Contains(body, fmt.Sprintf(`data-seq="%d"`, n)) {
		b.Fatalf("the page shows %d events (want %d) or not the last one (%d)", shown, min(n, 500), n)
	}
	b.ResetTimer()
	for range b.N {
		var newest, earlier []time.Duration
		for range loads {
			d, _, _ := load(page)
			newest = append(newest, d)
			d, _, _ = load(fmt.Sprintf("%s?after=%d", page, n/2))
			earlier = append(earlier, d)
		}
		dn, de := summarize(newest), summarize(earlier)
		report(b, "newest-", dn, "ms")
		report(b, "earlier-", de, "ms")
		b.ReportMetric(float64(size)/1024, "page-KiB")
		b.Logf("session page with %d events (%d shown, %d KiB): newest %s; earlier page %s", n, shown, size/1024, dn, de)
	}
}
