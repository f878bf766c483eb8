//go:build !windows

package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// BenchmarkBurst measures how fast a fleet of real workers drains a burst:
// N one-step script sessions (OUTPOST_BENCH_BURST, default 2000) created
// as fast as 8 concurrent creators can, on one outpost served by W real
// `outpost worker start` processes of capacity 1
// (OUTPOST_BENCH_BURST_WORKERS, default 20), each running every session it
// claims in a remote it spawns.
//
// Session i's only step is `exec {"command": "echo i >> runs"}`, a file in
// the workspace of the worker that runs it (kept between sessions). Once
// every session's queue entry is gone (ended and released), the benchmark
// checks that every session ended ok (0 lost) and that the workers' runs
// files hold each i exactly once between them (0 run twice).
//
// Reported: sessions/s from the first create sent to the last session's
// end event (server clock, ms; same host), the server's CPU time per
// session (utime+stime from /proc/PID/stat over the same span, clock
// ticks), and the claim outcomes the server counted (outpost_claims_total)
// per session: conflicts are claims lost to another worker.
func BenchmarkBurst(b *testing.B) {
	n := envInt("OUTPOST_BENCH_BURST", 2000)
	workers := envInt("OUTPOST_BENCH_BURST_WORKERS", 20)
	for range b.N {
		c := startCluster(b, "")
		dirs := make([]string, workers)
		for w := range dirs {
			dirs[w] = b.TempDir()
			c.startWorker(dirs[w])
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		before, err := claimOutcomes(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		pid := c.server.cmd.Process.Pid
		cpu0, err := procCPU(pid)
		if err != nil {
			b.Fatal(err)
		}

		t0 := time.Now()
		ids, created, err := createBurst(ctx, c, n)
		if err != nil {
			b.Fatal(err)
		}
		if err := waitQueueEmpty(ctx, c); err != nil {
			b.Fatal(err)
		}
		cpu1, err := procCPU(pid)
		if err != nil {
			b.Fatal(err)
		}
		after, err := claimOutcomes(ctx, c)
		if err != nil {
			b.Fatal(err)
		}

		// 0 lost: every session ended ok; the last end is the burst's end.
		var last time.Time
		var notOK []string
		for _, id := range ids {
			s, err := c.admin.Sessions.Get(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			if s.Status.Status != api.StatusExit || s.Status.EndedAt == nil {
				notOK = append(notOK, fmt.Sprintf("%s: %s/%s %s", id, s.Status.Status, s.Status.StatusDetail, s.Status.Reason))
				continue
			}
			end, err := endTime(ctx, c, id)
			if err != nil {
				b.Fatal(err)
			}
			if end.After(last) {
				last = end
			}
		}
		if len(notOK) > 0 {
			b.Fatalf("%d of %d sessions did not end ok, e.g. %s", len(notOK), n, notOK[0])
		}
		// 0 run twice (and none run zero times).
		counts, err := countRuns(dirs, n)
		if err != nil {
			b.Fatal(err)
		}
		var twice, never int
		for _, k := range counts {
			switch {
			case k == 0:
				never++
			case k > 1:
				twice++
			}
		}
		if twice > 0 || never > 0 {
			b.Fatalf("%d sessions ran more than once and %d never", twice, never)
		}

		span := last.Sub(t0)
		rate := float64(n) / span.Seconds()
		cpuPer := time.Duration(float64(cpu1-cpu0) / float64(n))
		per := func(k string) float64 { return (after[k] - before[k]) / float64(n) }
		b.ReportMetric(rate, "sessions/s")
		b.ReportMetric(ms(cpuPer), "server-cpu-ms/session")
		b.ReportMetric(per("conflict"), "conflicts/session")
		b.Logf("machine: %s", machineInfo())
		b.Logf("%d one-step sessions, %d workers: created in %s, drained (first create → last end) in %s: %.0f sessions/s",
			n, workers, rd(created), rd(span), rate)
		b.Logf("  server CPU: %s in all, %s per session", rd(cpu1-cpu0), rd(cpuPer))
		b.Logf("  claim outcomes per session: claimed %.2f, conflict %.2f, at_capacity %.2f, renewed %.2f, released %.2f, error %.2f",
			per("claimed"), per("conflict"), per("at_capacity"), per("renewed"), per("released"), per("error"))
		b.Logf("  0 lost (all %d ended ok), 0 run twice (each step ran once)", n)
		goal := "MET"
		if rate < 300 {
			goal = "MISSED"
		}
		b.Logf("SUMMARY burst: %.0f sessions/s, %.1f ms server CPU/session, %.2f conflicts/session, %d sessions by %d workers (goal ≥ 300/s: %s)",
			rate, ms(cpuPer), per("conflict"), n, workers, goal)
	}
}

// createBurst creates n one-step script sessions, session i appending "i"
// to the file runs of its workspace, with 8 concurrent creators. It returns
// their ids and how long creating took.
func createBurst(ctx context.Context, c *cluster, n int) ([]string, time.Duration, error) {
	const creators = 8
	cl, err := client.New(c.url, adminToken, client.WithHTTPClient(pooledHTTP(creators)))
	if err != nil {
		return nil, 0, err
	}
	ids := make([]string, n)
	errs := make(chan error, creators)
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := range creators {
		wg.Go(func() {
			for i := w; i < n; i += creators {
				s, err := cl.Sessions.Create(ctx, api.CreateSessionRequest{
					Outpost: c.outpost, Title: fmt.Sprintf("burst-%d", i),
					Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep(fmt.Sprintf("echo %d >> runs", i))}},
				})
				if err != nil {
					errs <- fmt.Errorf("create session %d: %w", i, err)
					return
				}
				ids[i] = s.Metadata.SessionID
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return nil, 0, err
	default:
	}
	return ids, time.Since(t0), nil
}

// waitQueueEmpty waits until the cluster's outpost has nothing queued or
// claimed: every session ended and its claim was released (the entries of
// ended sessions, listed for the server's retention, count toward neither).
func waitQueueEmpty(ctx context.Context, c *cluster) error {
	for {
		o, err := c.admin.Outposts.Get(ctx, c.outpost)
		if err != nil {
			return fmt.Errorf("get outpost: %w", err)
		}
		if o.Status.QueueDepth == 0 && o.Status.ActiveClaims == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d sessions still queued and %d claimed: %w", o.Status.QueueDepth, o.Status.ActiveClaims, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// countRuns counts the lines "i" (0 ≤ i < n) of the runs files in dirs (a
// worker that ran no session has none).
func countRuns(dirs []string, n int) ([]int, error) {
	counts := make([]int, n)
	for _, dir := range dirs {
		f, err := os.Open(filepath.Join(dir, "runs"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			i, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
			if err != nil || i < 0 || i >= n {
				f.Close()
				return nil, fmt.Errorf("%s: unexpected line %q", f.Name(), sc.Text())
			}
			counts[i]++
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return counts, nil
}

// endTime is when a session's transcript says it ended (ms).
func endTime(ctx context.Context, c *cluster, id string) (time.Time, error) {
	evs, err := c.admin.Sessions.Events(ctx, id, 0, 1000)
	if err != nil {
		return time.Time{}, fmt.Errorf("events of %s: %w", id, err)
	}
	for _, ev := range evs.Items {
		if ev.Type == api.EventEnd {
			return time.UnixMilli(ev.Time), nil
		}
	}
	return time.Time{}, fmt.Errorf("session %s has no end event", id)
}

// counterSum reads a counter of the server at url from its /metrics, summed
// over its labels; a counter the server does not export is an error.
// Lines are "name{labels} value", without the exposition format's
// optional timestamp (the server does not write one).
func counterSum(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		rest, ok := strings.CutPrefix(l, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if i := strings.LastIndexByte(rest, ' '); i >= 0 {
			if v, err := strconv.ParseFloat(rest[i+1:], 64); err == nil {
				sum += v
				found = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("%s exports no %s", url, name)
	}
	return sum, nil
}

// claimOutcomes reads the server's outpost_claims_total by outcome.
func claimOutcomes(ctx context.Context, c *cluster) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		rest, ok := strings.CutPrefix(l, `outpost_claims_total{`)
		if !ok {
			continue
		}
		i := strings.Index(rest, `outcome="`)
		if i < 0 {
			continue
		}
		name, tail, _ := strings.Cut(rest[i+len(`outcome="`):], `"`)
		_, val, _ := strings.Cut(tail, "} ")
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err == nil {
			out[name] += v
		}
	}
	return out, sc.Err()
}
