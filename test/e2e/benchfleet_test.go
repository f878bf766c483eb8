//go:build linux

package e2e

import (
	"encoding/json"
	"testing"

	"github.com/outpost-sh/outpost/internal/fleetsim"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
)

// benchFleetArgs is a small fleet: 50 workers, 10 sessions making a call
// a second with 4 KiB of output, 5 followers, for 5 seconds.
var benchFleetArgs = []string{"bench", "fleet", "--workers", "50", "--sessions", "10", "--followers", "5",
	"--create-rate", "20/s", "--call-rate", "1/s", "--output", "4KiB", "--frame", "1KiB", "--duration", "5s", "--idle", "1s", "--json"}

// TestBenchFleetLocalSQLite runs `outpost bench fleet --local`: the
// command starts its own server on SQLite, and its remotes drop their
// gateway connections every second or so, so that calls are made across
// reconnects. The report must show every worker watching, every session
// served, each answered call run exactly once, the latencies measured and
// the server's figures read.
func TestBenchFleetLocalSQLite(t *testing.T) {
	t.Parallel()
	out := run(t, []string{"HOME=" + t.TempDir()}, append(benchFleetArgs, "--local", "--reconnect-every", "1s")...)
	rep := checkFleetReport(t, out)
	if rep.Remotes.Reconnects == 0 {
		t.Errorf("no remote reconnected with --reconnect-every 1s: %+v", rep.Remotes)
	}
}

// TestBenchFleetPostgres points `outpost bench fleet` at a server on
// PostgreSQL with --server and the admin token, as against any
// deployment. Without reconnects nothing may fail.
func TestBenchFleetPostgres(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{})
	c := startCluster(t, "--database", pg.Database(t))
	out := run(t, c.env(c.admin), benchFleetArgs...)
	rep := checkFleetReport(t, out)
	if rep.Errors.Total != 0 || rep.Calls.Failed != 0 {
		t.Errorf("errors %d, failed calls %d: %v", rep.Errors.Total, rep.Calls.Failed, rep.Errors.First)
	}
}

func checkFleetReport(t *testing.T, out string) *fleetsim.Report {
	t.Helper()
	var rep fleetsim.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bench fleet --json printed %q: %v", out, err)
	}
	if rep.Workers.Requested != 50 || rep.Workers.Watching != 50 {
		t.Errorf("workers: %+v, want all 50 watching", rep.Workers)
	}
	if s := rep.Sessions; s.Created != 10 || s.Started != 10 || s.Ended != 10 {
		t.Errorf("sessions: %+v, want 10 created, started and ended", s)
	}
	k := rep.Calls
	// Ten sessions at a call a second for five seconds make about 50.
	if k.Answered < 20 {
		t.Errorf("only %d calls answered: %+v", k.Answered, k)
	}
	if k.Lost != 0 || k.Duplicated != 0 || k.WithoutID != 0 {
		t.Errorf("calls lost %d, duplicated %d, without id %d: %+v", k.Lost, k.Duplicated, k.WithoutID, k)
	}
	if k.Issued != k.Answered+k.Failed || k.Executed != k.Answered+k.ExecutedUnanswered || k.Executions != k.Executed {
		t.Errorf("calls made and executed disagree: %+v", k)
	}
	if rep.Remotes.OutputBytes < k.Answered*4096 {
		t.Errorf("remotes sent %d bytes of output for %d calls of 4 KiB", rep.Remotes.OutputBytes, k.Answered)
	}
	for name, d := range map[string]fleetsim.Dist{
		"claim": rep.Latency.Claim, "dispatch": rep.Latency.Dispatch, "tool call": rep.Latency.ToolCall,
		"follower lag": rep.Latency.FollowerLag, "connect": rep.Latency.Connect,
	} {
		if d.N == 0 || d.P50 <= 0 || d.P99 < d.P50 || d.Max < d.P99 {
			t.Errorf("%s latency: %+v, want samples and positive, ordered percentiles", name, d)
		}
	}
	if rep.Latency.Claim.N != 10 || rep.Latency.Dispatch.N != 10 {
		t.Errorf("%d claims and %d dispatches measured, want one per session", rep.Latency.Claim.N, rep.Latency.Dispatch.N)
	}
	if s := rep.Server; !s.Available || s.RSSBefore <= 0 || s.RSSBusy <= 0 || s.CPUBusyS <= 0 || s.CPUPerCallMS <= 0 {
		t.Errorf("server figures: %+v, want memory and CPU read from /metrics", s)
	}
	if rep.Throughput.CallsPerS <= 0 {
		t.Errorf("throughput: %+v", rep.Throughput)
	}
	return &rep
}
