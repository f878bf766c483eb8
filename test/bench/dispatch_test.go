//go:build unix

package bench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/steptrace"
)

// BenchmarkDispatch measures how long a session waits between its creation
// and its first tool call running on an idle worker, with a real server,
// one real `outpost worker start` and the remotes it spawns.
//
// Each session's only step is `exec {"command": ": > FIFO"}`. The benchmark
// blocks opening FIFO for reading; the open returns when the session's
// shell opens it for writing, i.e. when the tool call is running (after
// the fork and exec of sh, ~0.5 ms). Its time, from this process's
// monotonic clock, minus the time POST /v1/sessions returned is the
// dispatch latency. Sessions run one at a time; after each, the benchmark
// waits until the worker released the claim, then 150 ms more so the
// worker is back to watching the queue (idle) when the next one is created.
//
// The transcript's event times (server clock, milliseconds) split each
// dispatch into: create→claim (queue watch + claim), claim→remote_connected
// (spawn of `outpost remote serve`, its start-up, dial, hello), and
// remote_connected→call recorded, call recorded→command running.
//
// OUTPOST_BENCH_SESSIONS sets the number of sessions (default 200).
func BenchmarkDispatch(b *testing.B) {
	n := envInt("OUTPOST_BENCH_SESSIONS", 200)
	const warmup = 5
	for range b.N {
		// The trace lives in the workspace, which the remotes see in
		// their sandbox too.
		ws := b.TempDir()
		trace := traceSteps(b, ws)
		c := startCluster(b, "")
		c.startWorker(ws)
		fifo := filepath.Join(ws, "dispatch.fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			b.Fatal(err)
		}
		var fromReturn, fromSend, post []time.Duration
		var segClaim, segSpawn, segRecord, segRun []time.Duration
		for i := range warmup + n {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			running := make(chan time.Time, 1)
			go func() {
				f, err := os.OpenFile(fifo, os.O_RDONLY, 0)
				at := time.Now()
				steptrace.Mark("bench.running", "")
				if err == nil {
					_, _ = io.Copy(io.Discard, f)
					f.Close()
				}
				running <- at
			}()
			steptrace.Mark("bench.post", "")
			t0 := time.Now()
			sess, err := c.script(ctx, "dispatch", execStep(": > "+fifo))
			t1 := time.Now()
			steptrace.Mark("bench.post_returned", "")
			if err != nil {
				b.Fatal(err)
			}
			var at time.Time
			select {
			case at = <-running:
			case <-ctx.Done():
				// Unblock the reader, then fail.
				if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
					f.Close()
				}
				b.Fatalf("session %d (%s): its command did not run within 60 s", i, sess.Metadata.SessionID)
			}
			id := sess.Metadata.SessionID
			if err := c.waitGone(ctx, id); err != nil {
				b.Fatal(err)
			}
			evs, err := c.admin.Sessions.Events(ctx, id, 0, 1000)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			if i < warmup {
				time.Sleep(150 * time.Millisecond)
				continue
			}
			fromReturn = append(fromReturn, at.Sub(t1))
			fromSend = append(fromSend, at.Sub(t0))
			post = append(post, t1.Sub(t0))
			var created, claimed, connected, called int64
			for _, ev := range evs.Items {
				switch {
				case ev.Type == api.EventStatus && ev.Status == api.StatusNew && created == 0:
					created = ev.Time
				case ev.Type == api.EventClaim && claimed == 0:
					claimed = ev.Time
				case ev.Type == api.EventRemoteConnected && connected == 0:
					connected = ev.Time
				case ev.Type == api.EventCall && called == 0:
					called = ev.Time
				}
			}
			msd := func(a, b int64) time.Duration { return time.Duration(b-a) * time.Millisecond }
			segClaim = append(segClaim, msd(created, claimed))
			segSpawn = append(segSpawn, msd(claimed, connected))
			segRecord = append(segRecord, msd(connected, called))
			segRun = append(segRun, at.Sub(time.UnixMilli(called)).Truncate(time.Millisecond))
			time.Sleep(150 * time.Millisecond)
		}
		d := summarize(fromReturn)
		report(b, "dispatch-", d, "ms")
		b.ReportMetric(ms(summarize(fromSend).p99), "from-send-p99-ms")
		b.Logf("machine: %s", machineInfo())
		b.Logf("dispatch (POST returned → command running): %s", d)
		b.Logf("dispatch (POST sent → command running):     %s", summarize(fromSend))
		b.Logf("POST /v1/sessions round trip:               %s", summarize(post))
		b.Logf("breakdown, ms resolution (server event times):")
		b.Logf("  created → claimed (watch + claim):         %s", summarize(segClaim))
		b.Logf("  claimed → remote_connected (spawn, hello): %s", summarize(segSpawn))
		b.Logf("  remote_connected → call recorded:          %s", summarize(segRecord))
		b.Logf("  call recorded → command running:           %s", summarize(segRun))
		goal := "MET"
		if d.p99 >= 50*time.Millisecond {
			goal = "MISSED"
		}
		if trace != "" {
			reportSteps(b, trace, "bench.post", warmup)
		}
		b.Logf("SUMMARY dispatch: p50=%s p99=%s over %d sessions (goal p99 < 50ms: %s)", rd(d.p50), rd(d.p99), d.n, goal)
	}
}
