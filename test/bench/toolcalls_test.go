//go:build !windows

package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// BenchmarkToolCalls drives one external session through the server's
// plain HTTP tool endpoint (POST /v1/sessions/{id}/tools/exec, what an
// outside agent and the fleet simulator's agents call): a worker runs the
// session's remote, and calls run one after another, so the figures are
// the server's and the store's per call. With OUTPOST_BENCH_PG_STATEMENTS=1
// and OUTPOST_BENCH_DATABASE=postgres it prints the statements and
// transactions of a call.
func BenchmarkToolCalls(b *testing.B) {
	n := envInt("OUTPOST_BENCH_TOOL_CALLS", 200)
	for range b.N {
		c := startCluster(b, "")
		c.startWorker(b.TempDir())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		s, err := c.admin.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: c.outpost, Title: "tool calls",
			Agent: api.Agent{Kind: api.AgentExternal}})
		if err != nil {
			b.Fatal(err)
		}
		id := s.Metadata.SessionID
		cl, err := client.New(c.url, adminToken, client.WithHTTPClient(pooledHTTP(1)))
		if err != nil {
			b.Fatal(err)
		}
		args := map[string]any{"argv": []string{"true"}}
		call := func() error {
			res, err := cl.Sessions.CallTool(ctx, id, api.ToolExec, args)
			if err != nil {
				return err
			}
			if !res.OK {
				return fmt.Errorf("exec true failed: %s", res.Output)
			}
			return nil
		}
		// Until the remote is connected the server answers 503.
		for err := call(); err != nil; err = call() {
			if !client.IsUnavailable(err) {
				b.Fatal(err)
			}
			select {
			case <-ctx.Done():
				b.Fatal("the session's remote did not connect")
			case <-time.After(50 * time.Millisecond):
			}
		}
		for range 10 { // warm-up
			if err := call(); err != nil {
				b.Fatal(err)
			}
		}
		stats := pgStats(b)
		lat := make([]time.Duration, 0, n)
		start := time.Now()
		for range n {
			t := time.Now()
			if err := call(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t))
		}
		elapsed := time.Since(start)
		stats("tool calls", n)
		d := summarize(lat)
		b.ReportMetric(float64(n)/elapsed.Seconds(), "calls/s")
		report(b, "call-", d, "ms")
		b.Logf("%d exec calls one after another in %s", n, rd(elapsed))
	}
}
