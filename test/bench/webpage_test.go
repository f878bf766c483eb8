//go:build !windows

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	if shown != min(n, 500) || !strings.Contains(body, fmt.Sprintf(`data-seq="%d"`, n)) {
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
