//go:build !windows

package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/remote"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
)

// roundTripWarmup calls at the start of a session are left out of the
// distributions.
const roundTripWarmup = 10

// roundTripTools are the no-op-ish tools measured, with the direct
// equivalent each is compared against.
var roundTripTools = []rtTool{
	{
		name:   "list_dir",
		step:   func(dir string) api.Step { return step(api.ToolListDir, fmt.Sprintf(`{"path":%q}`, dir)) },
		direct: func(dir string) error { _, err := os.ReadDir(dir); return err },
	},
	{
		name:   "exec_true",
		step:   func(string) api.Step { return step(api.ToolExec, `{"argv":["true"]}`) },
		direct: func(string) error { return exec.Command("true").Run() },
	},
}

// rtTool is a tool measured by the round-trip benchmarks.
type rtTool struct {
	name   string
	step   func(emptyDir string) api.Step
	direct func(emptyDir string) error
}

// roundTrip is what one session of N identical calls showed a live
// follower.
type roundTrip struct {
	cycle   dist // result k-1 seen → result k seen: one whole call
	callRes dist // call k seen → result k seen
	perCall time.Duration
	calls   int
	wall    time.Duration
}

// measureRoundTrip follows session id (created with n steps) and derives
// the per-call times from the arrival of its call and result events.
func measureRoundTrip(ctx context.Context, c *client.Client, id string, n int) (roundTrip, error) {
	f := follow(ctx, c, id, func(ev api.Event, _ time.Time) bool {
		return ev.Type == api.EventCall || ev.Type == api.EventResult || ev.Type == api.EventEnd
	})
	evs, err := f.wait(ctx)
	if err != nil {
		return roundTrip{}, err
	}
	callAt := make([]time.Time, n+1)
	resAt := make([]time.Time, n+1)
	for _, a := range evs {
		if a.ev.CallSeq < 1 || a.ev.CallSeq > int64(n) {
			continue
		}
		switch a.ev.Type {
		case api.EventCall:
			callAt[a.ev.CallSeq] = a.at
		case api.EventResult:
			if a.ev.OK == nil || !*a.ev.OK {
				return roundTrip{}, fmt.Errorf("call %d failed: %s", a.ev.CallSeq, a.ev.Error)
			}
			resAt[a.ev.CallSeq] = a.at
		}
	}
	var cycle, callRes []time.Duration
	for k := 1; k <= n; k++ {
		if callAt[k].IsZero() || resAt[k].IsZero() {
			return roundTrip{}, fmt.Errorf("call %d: no call or result event seen", k)
		}
		if k <= roundTripWarmup {
			continue
		}
		cycle = append(cycle, resAt[k].Sub(resAt[k-1]))
		callRes = append(callRes, resAt[k].Sub(callAt[k]))
	}
	wall := resAt[n].Sub(resAt[roundTripWarmup])
	return roundTrip{
		cycle: summarize(cycle), callRes: summarize(callRes), calls: n - roundTripWarmup,
		wall: wall, perCall: wall / time.Duration(n-roundTripWarmup),
	}, nil
}

// directBaseline runs fn n times in this process.
func directBaseline(n int, fn func() error) (dist, error) {
	d := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		if err := fn(); err != nil {
			return dist{}, err
		}
		d = append(d, time.Since(t))
	}
	return summarize(d), nil
}

func reportRoundTrip(b *testing.B, name string, rt roundTrip, direct dist) {
	report(b, "call-", rt.cycle, "us")
	b.ReportMetric(us(rt.perCall), "mean-call-us")
	b.ReportMetric(us(direct.p50), "direct-p50-us")
	b.ReportMetric(us(rt.cycle.p50-direct.p50), "overhead-p50-us")
	b.Logf("%s per call (result→result, as a live follower sees it): %s", name, rt.cycle)
	b.Logf("%s call event → result event:                          %s", name, rt.callRes)
	b.Logf("%s wall time %s for %d calls: %s per call", name, rd(rt.wall), rt.calls, rd(rt.perCall))
	b.Logf("%s directly in this process:                         %s", name, direct)
	goal := "MET"
	if rt.cycle.p50-direct.p50 >= time.Millisecond {
		goal = "MISSED"
	}
	b.Logf("SUMMARY %s: p50=%s p99=%s per call, direct p50=%s, overhead p50=%s (goal < 1ms: %s)",
		name, rd(rt.cycle.p50), rd(rt.cycle.p99), rd(direct.p50), rd(rt.cycle.p50-direct.p50), goal)
}

// BenchmarkToolRoundTrip measures per-call latency through the whole real
// system: a script session of N identical steps (N = 100 and 1000, or
// OUTPOST_BENCH_CALLS, at most 1000) on a real server, worker and remote. A live
// follower timestamps every call and result event; one call's time is the
// gap between the results of consecutive calls (the server records the
// call, sends it over the gateway, the remote journals and runs it, sends
// the result, the server stores it durably and records the next call).
// The first 10 calls are left out. The same tool run directly in this
// process is the baseline.
func BenchmarkToolRoundTrip(b *testing.B) {
	for _, n := range roundTripSizes() {
		for _, tool := range roundTripTools {
			benchRoundTrip(b, n, tool)
		}
	}
}

// roundTripSizes are the session lengths measured: 100 and 1000 steps, or
// OUTPOST_BENCH_CALLS (at most 1000, the server's limit).
func roundTripSizes() []int {
	if n := envInt("OUTPOST_BENCH_CALLS", 0); n > 0 {
		return []int{min(max(n, roundTripWarmup+10), 1000)}
	}
	return []int{100, 1000}
}

func benchRoundTrip(b *testing.B, n int, tool rtTool) {
	b.Run(fmt.Sprintf("%s/steps=%d", tool.name, n), func(b *testing.B) {
		for range b.N {
			c := startCluster(b, "")
			ws := b.TempDir()
			empty := filepath.Join(ws, "empty")
			if err := os.Mkdir(empty, 0o755); err != nil {
				b.Fatal(err)
			}
			direct, err := directBaseline(n, func() error { return tool.direct(empty) })
			if err != nil {
				b.Fatal(err)
			}
			c.startWorker(ws)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			steps := make([]api.Step, n)
			for i := range steps {
				steps[i] = tool.step(empty)
			}
			sess, err := c.script(ctx, "roundtrip-"+tool.name, steps...)
			if err != nil {
				b.Fatal(err)
			}
			rt, err := measureRoundTrip(ctx, c.admin, sess.Metadata.SessionID, n)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			reportRoundTrip(b, fmt.Sprintf("%s, %d-step session,", tool.name, n), rt, direct)
		}
	})
}

// timedStore wraps a store and keeps the duration of every write.
type timedStore struct {
	store.Store
	mu    sync.Mutex
	times map[string][]time.Duration
}

func (t *timedStore) note(name string, start time.Time) {
	d := time.Since(start)
	t.mu.Lock()
	t.times[name] = append(t.times[name], d)
	t.mu.Unlock()
}

func (t *timedStore) UpdateSession(ctx context.Context, id string, fn func(store.Session, store.QueueEntry) (store.Mutation, error)) (store.Mutation, error) {
	defer t.note("UpdateSession", time.Now())
	return t.Store.UpdateSession(ctx, id, fn)
}

func (t *timedStore) AppendEvents(ctx context.Context, id string, evs []api.Event) error {
	defer t.note("AppendEvents", time.Now())
	return t.Store.AppendEvents(ctx, id, evs)
}

func (t *timedStore) GetSession(ctx context.Context, id string) (store.Session, error) {
	defer t.note("GetSession", time.Now())
	return t.Store.GetSession(ctx, id)
}

func (t *timedStore) ListEvents(ctx context.Context, id string, after int64, limit int) ([]api.Event, error) {
	defer t.note("ListEvents", time.Now())
	return t.Store.ListEvents(ctx, id, after, limit)
}

func (t *timedStore) snapshot() map[string][]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string][]time.Duration, len(t.times))
	for k, v := range t.times {
		out[k] = append([]time.Duration(nil), v...)
	}
	return out
}

// BenchmarkToolRoundTripInProcess runs the same measurement as
// BenchmarkToolRoundTrip with the server (server.New) and the remote
// (remote.Serve) as goroutines of this process, so that -cpuprofile sees
// both, and with the store wrapped to time its transactions. Sub-benchmarks
// put the server's data dir and the remote's journal on disk or on tmpfs
// (/dev/shm), which shows what the fsyncs of each cost.
func BenchmarkToolRoundTripInProcess(b *testing.B) {
	for _, n := range roundTripSizes() {
		benchInProcess(b, n)
	}
}

func benchInProcess(b *testing.B, n int) {
	layouts := []struct {
		name                    string
		serverTmpfs, journTmpfs bool
	}{
		{"disk", false, false},
		{"server-tmpfs", true, false},
		{"journal-tmpfs", false, true},
		{"all-tmpfs", true, true},
	}
	for _, tool := range roundTripTools {
		for _, lay := range layouts {
			b.Run(fmt.Sprintf("%s/steps=%d/%s", tool.name, n, lay.name), func(b *testing.B) {
				if (lay.serverTmpfs || lay.journTmpfs) && !isDir("/dev/shm") {
					b.Skip("no /dev/shm")
				}
				for range b.N {
					runInProcess(b, n, tool.step, tool.direct, lay.serverTmpfs, lay.journTmpfs)
				}
			})
		}
	}
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// tempDir makes a temporary directory on tmpfs or in the default place,
// removed when b ends.
func tempDir(b *testing.B, tmpfs bool) string {
	if !tmpfs {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "outpost-bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func runInProcess(b *testing.B, n int, mkStep func(string) api.Step, direct func(string) error, serverTmpfs, journalTmpfs bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dataDir := tempDir(b, serverTmpfs)
	stateDir := tempDir(b, journalTmpfs)
	ws := b.TempDir()
	empty := filepath.Join(ws, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		b.Fatal(err)
	}
	base, err := directBaseline(n, func() error { return direct(empty) })
	if err != nil {
		b.Fatal(err)
	}

	sq, err := sqlite.Open(ctx, filepath.Join(dataDir, "outpost.db"))
	if err != nil {
		b.Fatal(err)
	}
	ts := &timedStore{Store: sq, times: map[string][]time.Duration{}}
	// Stopped at the end of this iteration, not of the benchmark: b.N
	// iterations start b.N servers.
	srv, stop, err := servertest.Serve(server.Options{DataDir: dataDir, AdminToken: adminToken, Store: ts})
	if err != nil {
		b.Fatal(err)
	}
	defer stop()

	c, err := client.New(srv.URL(), adminToken)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "bench", Platform: api.PlatformLinux}); err != nil {
		b.Fatal(err)
	}
	steps := make([]api.Step, n)
	for i := range steps {
		steps[i] = mkStep(empty)
	}
	sess, err := c.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: "bench", Title: "roundtrip",
		Agent: api.Agent{Kind: api.AgentScript, Steps: steps}})
	if err != nil {
		b.Fatal(err)
	}
	id := sess.Metadata.SessionID
	claim, err := c.Queue.Claim(ctx, id, "bench-inprocess")
	if err != nil {
		b.Fatal(err)
	}
	before := ts.snapshot()
	remoteDone := make(chan error, 1)
	go func() {
		remoteDone <- remote.Serve(ctx, remote.Options{
			GatewayURL: claim.Status.GatewayURL, ConnectToken: claim.Status.ConnectToken, SessionID: id,
			StateDir: stateDir, WorkDir: ws, Logger: discardLogger(),
			Capabilities: &api.Capabilities{OS: "linux", Arch: "amd64", Tools: []string{api.ToolExec, api.ToolListDir}},
		})
	}()
	rt, err := measureRoundTrip(ctx, c, id, n)
	if err != nil {
		b.Fatal(err)
	}
	if err := <-remoteDone; err != nil {
		b.Fatalf("remote: %v", err)
	}
	after := ts.snapshot()

	name := fmt.Sprintf("%s, %d-step session (server data %s, journal %s)", mkStep("").Tool, n, where(serverTmpfs), where(journalTmpfs))
	reportRoundTrip(b, name, rt, base)
	calls := float64(n)
	var writes time.Duration
	for _, k := range []string{"UpdateSession", "AppendEvents"} {
		d := after[k][len(before[k]):]
		var sum time.Duration
		for _, v := range d {
			sum += v
		}
		writes += sum
		b.Logf("  store %s: %.2f per call, %s", k, float64(len(d))/calls, summarize(d))
	}
	for _, k := range []string{"GetSession", "ListEvents"} {
		d := after[k][len(before[k]):]
		b.Logf("  store %s: %.2f per call, %s", k, float64(len(d))/calls, summarize(d))
	}
	b.ReportMetric(us(writes)/calls, "store-write-us/call")
	b.Logf("  store writes: %s per call on average (%.0f%% of the mean call)", rd(writes/time.Duration(n)),
		100*float64(writes)/float64(n)/float64(rt.perCall))
}

func where(tmpfs bool) string {
	if tmpfs {
		return "tmpfs"
	}
	return "disk"
}
