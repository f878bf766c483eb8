//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/fleetsim"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/waitfor"
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
	rep := checkFleetReport(t, out, 50, 10)
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
	rep := checkFleetReport(t, out, 50, 10)
	if rep.Errors.Total != 0 || rep.Calls.Failed != 0 {
		t.Errorf("errors %d, failed calls %d: %v", rep.Errors.Total, rep.Calls.Failed, rep.Errors.First)
	}
}

// checkFleetReport checks the report of a run of workers and sessions
// making a call a second with 4 KiB of output for 5 seconds.
func checkFleetReport(t *testing.T, out string, workers int, sessions int64) *fleetsim.Report {
	t.Helper()
	var rep fleetsim.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bench fleet --json printed %q: %v", out, err)
	}
	if rep.Workers.Requested != workers || rep.Workers.Watching != int64(workers) {
		t.Errorf("workers: %+v, want all %d watching", rep.Workers, workers)
	}
	if s := rep.Sessions; s.Created != sessions || s.Started != sessions || s.Ended != sessions {
		t.Errorf("sessions: %+v, want %d created, started and ended", s, sessions)
	}
	k := rep.Calls
	// Each session at a call a second for five seconds makes about 5.
	if k.Answered < 2*sessions {
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
	// Every session ran for most of the run: most calls were sent while
	// all of them ran, but not the first sessions' calls of the ramp.
	if a := rep.Latency.ToolCallAllRunning; a.N == 0 || a.N >= rep.Latency.ToolCall.N || a.Max > rep.Latency.ToolCall.Max {
		t.Errorf("calls while all sessions ran: %+v, of %+v", a, rep.Latency.ToolCall)
	}
	if int64(rep.Latency.Claim.N) != sessions || int64(rep.Latency.Dispatch.N) != sessions {
		t.Errorf("%d claims and %d dispatches measured, want one per session", rep.Latency.Claim.N, rep.Latency.Dispatch.N)
	}
	if s := rep.Server; !s.Available || s.RSSBefore <= 0 || s.RSSBusy <= 0 || s.CPUBusyS <= 0 || s.CPUPerCallMS <= 0 {
		t.Errorf("server figures: %+v, want memory and CPU read from /metrics", s)
	}
	if rep.Throughput.CallsPerS <= 0 {
		t.Errorf("throughput: %+v", rep.Throughput)
	}
	// Each idle worker keeps one claim-next waiting at the server: the
	// workers' first waits, and about one per session (its claim, then
	// the winner's next wait), not one per worker and session.
	if n, bound := rep.Server.ClaimNextRequests, int64(workers)+3*sessions; n < 0 || n > bound {
		t.Errorf("%d claim-next requests for %d sessions among %d workers, want at most %d", n, sessions, workers, bound)
	}
	t.Logf("%d claim-next requests for %d sessions among %d workers", rep.Server.ClaimNextRequests, sessions, workers)
	return &rep
}

// TestBenchFleetReplicas runs `outpost bench fleet --local --replicas 2`
// on PostgreSQL: two server processes on one database, the fleet spread
// over both. Every call runs exactly once, and each replica served
// requests; the run removes its outpost and machine tokens at the end.
func TestBenchFleetReplicas(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{})
	args := []string{"bench", "fleet", "--local", "--replicas", "2", "--database", pg.Database(t),
		"--workers", "30", "--sessions", "6", "--followers", "3", "--create-rate", "20/s", "--call-rate", "1/s",
		"--output", "4KiB", "--frame", "1KiB", "--duration", "10s", "--idle", "1s", "--json"}
	// Ten seconds, not five: on a loaded machine a session claimed late
	// through one replica may have its first call run through the other
	// after five.
	out := run(t, []string{"HOME=" + t.TempDir()}, args...)
	rep := checkFleetReport(t, out, 30, 6)
	if rep.Errors.Total != 0 || rep.Calls.Failed != 0 {
		t.Errorf("errors %d, failed calls %d: %v", rep.Errors.Total, rep.Calls.Failed, rep.Errors.First)
	}
	servers := strings.Split(rep.Config.Server, ",")
	if len(servers) != 2 || servers[0] == servers[1] {
		t.Fatalf("the report names the servers %q, want two replicas", rep.Config.Server)
	}
	if len(rep.Server.Replicas) != 2 {
		t.Fatalf("figures of %d replicas, want 2: %+v", len(rep.Server.Replicas), rep.Server.Replicas)
	}
	t.Logf("replicas: %+v", rep.Server.Replicas)
	var remotes, rss int64
	for i, r := range rep.Server.Replicas {
		if !r.Available || r.URL != servers[i]+"/metrics" || r.Replica != fmt.Sprintf("fleetsim-r%d", i+1) {
			t.Errorf("replica %d: %+v, want the figures of fleetsim-r%d at %s", i, r, i+1, servers[i])
		}
		// 15 workers heartbeat and watch through each replica, and the
		// creator, the agents and the followers alternate between them.
		if r.Requests < 15 || r.RSSBusy <= 0 {
			t.Errorf("replica %s served %d requests with RSS %d: want both to have served", r.Replica, r.Requests, r.RSSBusy)
		}
		remotes += r.Remotes
		rss += r.RSSBusy
	}
	// Each claimed session's remote is connected at the end of the busy
	// phase, through the replica whose gateway its claim named.
	if remotes != rep.Workers.Claims {
		t.Errorf("%d remotes connected to the replicas' gateways, want one for each of the %d sessions claimed", remotes, rep.Workers.Claims)
	}
	if rss != rep.Server.RSSBusy {
		t.Errorf("server RSS %d, want the replicas' sum %d", rep.Server.RSSBusy, rss)
	}
	if c := rep.Cleanup; c.OutpostDeleted != rep.Outpost || c.TokensRevoked != 1 || c.TokensMinted != 1 || len(c.Errors) > 0 {
		t.Errorf("cleanup: %+v, want outpost %s deleted and its token revoked", c, rep.Outpost)
	}
}

// benchFleetSmall is a short run against a server given by --server.
var benchFleetSmall = []string{"bench", "fleet", "--workers", "6", "--sessions", "2", "--create-rate", "20/s",
	"--call-rate", "2/s", "--output", "1KiB", "--duration", "2s", "--idle", "-1s", "--json"}

// fleetLeftovers lists the outposts and the live (unrevoked) tokens named
// fleetsim-… on the server, as an admin sees them.
func fleetLeftovers(t *testing.T, c *cluster) (outposts, tokens []string) {
	t.Helper()
	cl, err := client.New(c.url, c.admin, client.WithHTTPClient(c.client()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ol, err := cl.Outposts.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ol.Items {
		if strings.HasPrefix(o.Spec.Name, "fleetsim-") {
			outposts = append(outposts, o.Spec.Name)
		}
	}
	tl, err := cl.Tokens.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range tl.Items {
		if strings.HasPrefix(tok.Name, "fleetsim-") && tok.RevokedAt == nil {
			tokens = append(tokens, tok.Name)
		}
	}
	return outposts, tokens
}

// TestBenchFleetCleansUp: against --server, a run removes the outpost it
// created and revokes the machine tokens it minted; --keep keeps both; an
// outpost given with --outpost that existed before is kept, its sessions
// ended, the tokens revoked; an interrupted run cleans up too.
func TestBenchFleetCleansUp(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	env := c.env(c.admin)

	rep := checkSmallFleet(t, run(t, env, benchFleetSmall...))
	if o, tok := fleetLeftovers(t, c); len(o) != 0 || len(tok) != 0 {
		t.Errorf("after a run: outposts %v and tokens %v are left", o, tok)
	}
	if cl := rep.Cleanup; cl.OutpostDeleted != rep.Outpost || cl.TokensRevoked != 1 {
		t.Errorf("cleanup %+v, want outpost %s deleted and 1 token revoked", cl, rep.Outpost)
	}

	rep = checkSmallFleet(t, run(t, env, append(benchFleetSmall, "--keep")...))
	o, tok := fleetLeftovers(t, c)
	if len(o) != 1 || o[0] != rep.Outpost || len(tok) != 1 || !strings.HasPrefix(tok[0], rep.Outpost+"-") {
		t.Errorf("after a run with --keep: outposts %v and tokens %v, want %s and its token", o, tok, rep.Outpost)
	}
	if !rep.Cleanup.Kept || rep.Cleanup.TokensRevoked != 0 || rep.Cleanup.OutpostDeleted != "" {
		t.Errorf("cleanup with --keep: %+v", rep.Cleanup)
	}
	if code := c.api("DELETE", "/v1/outposts/"+rep.Outpost+"?force=true", c.admin, nil, nil); code != 204 {
		t.Fatalf("delete the kept outpost: %d", code)
	}
	var toks api.TokenList
	c.api("GET", "/v1/tokens", c.admin, nil, &toks)
	for _, tk := range toks.Items {
		if strings.HasPrefix(tk.Name, "fleetsim-") && tk.RevokedAt == nil {
			c.api("DELETE", "/v1/tokens/"+tk.ID, c.admin, nil, nil)
		}
	}

	// An outpost of its own is kept, its sessions ended.
	if code := c.api("POST", "/v1/outposts", c.admin, api.CreateOutpostRequest{Name: "fleetsim-mine"}, nil); code != 201 && code != 200 {
		t.Fatalf("create outpost: %d", code)
	}
	rep = checkSmallFleet(t, run(t, env, append(benchFleetSmall, "--outpost", "fleetsim-mine")...))
	o, tok = fleetLeftovers(t, c)
	if len(o) != 1 || o[0] != "fleetsim-mine" || len(tok) != 0 {
		t.Errorf("after a run on an outpost of its own: outposts %v and tokens %v, want fleetsim-mine alone", o, tok)
	}
	if rep.Cleanup.OutpostDeleted != "" || rep.Cleanup.TokensRevoked != 1 {
		t.Errorf("cleanup on an outpost of its own: %+v", rep.Cleanup)
	}
	var q api.QueueList
	c.api("GET", "/v1/queue?outpost=fleetsim-mine", c.admin, nil, &q)
	for _, e := range q.Items {
		if s := c.session(e.Metadata.SessionID); !api.IsFinal(s.Status.Status) {
			t.Errorf("session %s is %s after the run, want ended", e.Metadata.SessionID, s.Status.Status)
		}
		waitfor.Within(t, 30*time.Second, "the claim of "+e.Metadata.SessionID+" released", func() bool {
			return c.released(e.Metadata.SessionID, c.admin)
		})
	}

	// Interrupted while sessions run: the outpost and token go all the same.
	p := start(t, "bench", env, "bench", "fleet", "--workers", "6", "--sessions", "2", "--duration", "5m", "--idle", "-1s", "--progress", "200ms", "--outpost", "fleetsim-interrupted")
	waitfor.Within(t, 60*time.Second, "the interrupted run's sessions to run", func() bool {
		return strings.Contains(p.out.String(), "2 running")
	})
	_ = p.stop(syscall.SIGINT, 40*time.Second)
	if !strings.Contains(p.out.String(), "removed outpost fleetsim-interrupted and 1 machine token") {
		t.Errorf("an interrupted run did not say what it removed:\n%s", p.out.String())
	}
	if o, tok := fleetLeftovers(t, c); len(o) != 1 || len(tok) != 0 {
		t.Errorf("after an interrupted run: outposts %v and tokens %v are left, want fleetsim-mine alone", o, tok)
	}
}

// checkSmallFleet checks a run of benchFleetSmall: its calls ran exactly once.
func checkSmallFleet(t *testing.T, out string) *fleetsim.Report {
	t.Helper()
	var rep fleetsim.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bench fleet --json printed %q: %v", out, err)
	}
	if k := rep.Calls; k.Answered == 0 || k.Lost != 0 || k.Duplicated != 0 || rep.Sessions.Ended != 2 {
		t.Errorf("calls %+v, sessions %+v: want calls answered, each run once, both sessions ended", k, rep.Sessions)
	}
	return &rep
}

// TestBenchFleetTLS runs the simulator against an https server signed by
// a private CA: without the CA it stops at once saying to give
// --ca-file; with --ca-file every client (API, watches, the gateway's
// wss://) trusts it.
func TestBenchFleetTLS(t *testing.T) {
	t.Parallel()
	c := startTLSCluster(t)
	env := withoutCA(c.env(c.admin))

	cmd := exec.Command(binary, benchFleetSmall...)
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "--ca-file") {
		t.Errorf("without the CA: %v, %s; want a failure saying to give --ca-file", err, b)
	}

	rep := checkSmallFleet(t, run(t, env, append(benchFleetSmall, "--ca-file", c.caFile)...))
	if !strings.HasPrefix(rep.Config.Server, "https://") || rep.Errors.Total != 0 || !rep.Server.Available {
		t.Errorf("over TLS: server %s, errors %v, server figures %+v", rep.Config.Server, rep.Errors.First, rep.Server)
	}
	if rep.Cleanup.OutpostDeleted != rep.Outpost {
		t.Errorf("over TLS, cleanup %+v", rep.Cleanup)
	}
}

// TestBenchFleetMetricsListen runs the simulator against a server that
// serves its metrics on --metrics-listen only, as a deployment does: its
// API address has no /metrics, and the report says where it looked;
// --metrics-url with the metrics address, as the help gives it, brings
// the server's figures.
func TestBenchFleetMetricsListen(t *testing.T) {
	t.Parallel()
	metrics := freeAddr(t)
	c := startCluster(t, "--metrics-listen", metrics)
	env := c.env(c.admin)

	rep := checkSmallFleet(t, run(t, env, benchFleetSmall...))
	if rep.Server.Available || !strings.Contains(strings.Join(rep.Errors.First, "\n"), c.url+"/metrics") {
		t.Errorf("without --metrics-url: server figures %+v, errors %v; want none, and an error naming %s/metrics", rep.Server, rep.Errors.First, c.url)
	}
	rep = checkSmallFleet(t, run(t, env, append(benchFleetSmall, "--metrics-url", "http://"+metrics)...))
	if !rep.Server.Available || rep.Server.RSSBusy <= 0 {
		t.Errorf("with --metrics-url http://%s: server figures %+v, errors %v", metrics, rep.Server, rep.Errors.First)
	}
}

// TestBenchFleetLocalInterrupted presses Ctrl-C at a terminal running
// `outpost bench fleet --local`: the interrupt reaches the whole
// foreground process group, and the server the simulator started, in a
// group of its own, keeps serving while the simulator ends its sessions;
// then the server is stopped and its data removed, the report covers the
// run so far, and the exit is not 0, saying why.
func TestBenchFleetLocalInterrupted(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "bench", "fleet", "--local", "--workers", "6", "--sessions", "2", "--create-rate", "20/s",
		"--call-rate", "2/s", "--output", "1KiB", "--duration", "60s", "--idle", "-1s", "--progress", "1s", "--json")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the terminal's foreground group
	var stdout strings.Builder
	stderr := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	waitfor.Within(t, 60*time.Second, "the sessions to be driven", func() bool { return strings.Contains(stderr.String(), " 2 running") })
	line := stderr.String()
	_, rest, _ := strings.Cut(line, "fleetsim: local server at ")
	url, rest, _ := strings.Cut(rest, ", data in ")
	dir, _, _ := strings.Cut(rest, "\n")
	if url == "" || dir == "" {
		t.Fatalf("no server line on stderr:\n%s", line)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if err == nil || !strings.Contains(stderr.String(), "stopped by a signal") {
		t.Errorf("interrupted: %v; want a failure saying it was stopped by a signal:\n%s", err, stderr.String())
	}
	rep := checkSmallFleet(t, stdout.String())
	if rep.Errors.Total != 0 {
		t.Errorf("the server went away under the simulator: %d errors, %v", rep.Errors.Total, rep.Errors.First)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the local server's data dir %s is still there: %v", dir, err)
	}
	if c, err := client.New(url, ""); err == nil && c.Ready(t.Context()) == nil {
		t.Errorf("the local server at %s still answers", url)
	}
}
