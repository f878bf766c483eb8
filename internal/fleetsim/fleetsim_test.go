package fleetsim

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/deptest"
)

// TestFleetsimLinksNoTestCode: the simulator is part of the outpost
// binary, so it must not bring test harnesses into it.
func TestFleetsimLinksNoTestCode(t *testing.T) {
	t.Parallel()
	deptest.Check(t, "github.com/outpost-sh/outpost/internal/fleetsim",
		deptest.Prefix("testing", "the simulator ships in the outpost binary"),
		deptest.Prefix("net/http/httptest", "the simulator ships in the outpost binary"),
		deptest.Rule{
			Forbidden: func(p string) bool {
				rest, ok := strings.CutPrefix(p, "github.com/outpost-sh/outpost/")
				return ok && strings.Contains(rest, "test")
			},
			Why: "the simulator ships in the outpost binary, without the project's test harnesses",
		},
		deptest.Prefix("github.com/outpost-sh/outpost/internal/server", "the simulator reaches a server over HTTP only"),
		deptest.Prefix("github.com/outpost-sh/outpost/internal/store", "the simulator reaches a server over HTTP only"),
	)
}

// TestScrapeSumsReplicas reads the process collector's lines and the
// claim-next counters, with the replica label the server adds, and sums
// them over replicas.
func TestScrapeSumsReplicas(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Path != "/metrics" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		w.Write([]byte(`# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total{replica="a"} 1.5
process_cpu_seconds_total{replica="b"} 2.25
process_resident_memory_bytes{replica="a"} 1.048576e+06
process_resident_memory_bytes{replica="b"} 2097152
process_resident_memory_bytes_other 7
go_goroutines{replica="a"} 10
outpost_claim_next_transactions_total{replica="a"} 12
outpost_claim_next_transactions_total{replica="b"} 3
outpost_claim_next_coalesced_total{replica="a"} 400
`))
	}))
	defer srv.Close()
	s, err := scrape(context.Background(), srv.URL+"/metrics", "tok", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	if s.cpu != 3.75 || s.rss != 3<<20 {
		t.Fatalf("scrape = cpu %v rss %d, want 3.75 and %d", s.cpu, s.rss, 3<<20)
	}
	if s.replica != "a,b" {
		t.Errorf("scrape read the replicas %q, want a,b", s.replica)
	}
	if !s.claimNext || s.claimNextTx != 15 || s.claimNextCoalesced != 400 {
		t.Fatalf("scrape = claim-next %v: %v transactions, %v coalesced; want 15 and 400", s.claimNext, s.claimNextTx, s.claimNextCoalesced)
	}
	if _, err := scrape(context.Background(), srv.URL+"/metrics", "bad", srv.Client()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("scrape with a bad token: %v, want the 401", err)
	}
}

// TestScrapeWithoutProcessCollector says what is missing.
func TestScrapeWithoutProcessCollector(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("go_goroutines 10\n"))
	}))
	defer srv.Close()
	if _, err := scrape(context.Background(), srv.URL+"/metrics", "tok", srv.Client()); err == nil || !strings.Contains(err.Error(), "process_cpu_seconds_total") {
		t.Fatalf("scrape = %v, want an error naming the missing metric", err)
	}
}

func TestLatencyPercentiles(t *testing.T) {
	t.Parallel()
	var l latencies
	for i := 1; i <= 100; i++ {
		l.add(time.Duration(i) * time.Millisecond)
	}
	d := l.dist()
	if d.N != 100 || d.P50 != 50 || d.P90 != 90 || d.P99 != 99 || d.Max != 100 || d.Mean != 50.5 {
		t.Fatalf("dist = %+v", d)
	}
	if (&latencies{}).dist() != (Dist{}) {
		t.Fatal("an empty distribution is not zero")
	}
}

// TestLatenciesSince: each interval's distribution has the durations
// added since the last, and the count to ask from next.
func TestLatenciesSince(t *testing.T) {
	t.Parallel()
	var l latencies
	for i := 1; i <= 10; i++ {
		l.add(time.Duration(i) * time.Millisecond)
	}
	d, n := l.since(0)
	if d.N != 10 || d.Max != 10 || n != 10 {
		t.Fatalf("since(0) = %+v, %d; want all 10", d, n)
	}
	if d, n := l.since(n); d != (Dist{}) || n != 10 {
		t.Fatalf("since(10) with nothing new = %+v, %d", d, n)
	}
	l.add(500 * time.Millisecond)
	l.add(700 * time.Millisecond)
	if d, n := l.since(10); d.N != 2 || d.P50 != 500 || d.Max != 700 || n != 12 {
		t.Fatalf("since(10) = %+v, %d; want the two added after", d, n)
	}
	if d, n := l.since(50); d != (Dist{}) || n != 12 {
		t.Fatalf("since beyond the end = %+v, %d", d, n)
	}
}

// TestAllRunning: the full-rate window opens when the last requested
// session starts and closes for good when the first ends; a session that
// ends during the ramp keeps it shut.
func TestAllRunning(t *testing.T) {
	t.Parallel()
	s := &sim{opts: Options{Sessions: 2}}
	s.started()
	if s.allRunning() {
		t.Fatal("all running with one of two sessions started")
	}
	s.started()
	if !s.allRunning() {
		t.Fatal("not all running with both sessions started")
	}
	s.remoteEnded("a")
	if s.allRunning() {
		t.Fatal("still all running after a session ended")
	}
	s.started() // a session started again after one ended
	if s.allRunning() {
		t.Fatal("the window reopened after a session ended")
	}

	ramp := &sim{opts: Options{Sessions: 2}}
	ramp.started()
	ramp.remoteEnded("a") // ended before the last one started
	ramp.started()
	if ramp.allRunning() {
		t.Fatal("all running though a session ended before the last started")
	}
}

// TestPrintShowsFullRateCalls: the report's latency table has the calls
// of the full-rate window under the tool call row.
func TestPrintShowsFullRateCalls(t *testing.T) {
	t.Parallel()
	var r Report
	r.Latency.ToolCall = Dist{N: 100, P50: 5, P90: 9, P99: 480, Max: 1500}
	r.Latency.ToolCallAllRunning = Dist{N: 90, P50: 4.5, P90: 8, P99: 29.25, Max: 60}
	var b strings.Builder
	r.Print(&b)
	out := b.String()
	i, j := strings.Index(out, "  tool call "), strings.Index(out, "   all running      90     4.50     8.00    29.25    60.00")
	if i < 0 || j < i {
		t.Fatalf("the report lacks the full-rate row under the tool call row:\n%s", out)
	}

	r.Latency.ToolCallAllRunning = Dist{}
	r.Sessions.Started, r.Sessions.Requested = 7, 10
	b.Reset()
	r.Print(&b)
	if !strings.Contains(b.String(), "   all running never: 7 of 10 sessions started, never all at once") {
		t.Fatalf("a run whose sessions never all ran shows an empty row:\n%s", b.String())
	}
}

func TestOptionsRefuseBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Workers: 1}, "server URL"},
		{Options{Servers: []string{"http://x"}, Token: "t"}, "--workers"},
		{Options{Servers: []string{"http://x"}, Token: "t", Workers: 2, Sessions: 3}, "more than --workers"},
		{Options{Servers: []string{"http://x"}, Token: "t", Workers: 2, CallRate: -1}, "negative"},
		{Options{Servers: []string{"http://x", "outpost.example.com:7420"}, Token: "t", Workers: 2}, `"outpost.example.com:7420"`},
	} {
		if err := tc.o.defaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("defaults(%+v) = %v, want %q", tc.o, err, tc.want)
		}
	}
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for u, want := range map[string]bool{
		"http://127.0.0.1:7420": true, "http://localhost:1": true, "https://127.0.0.5/x": true,
		"http://[::1]:80": false, "https://outpost.example.com": false, "http://10.0.0.1:7420": false,
	} {
		if got := loopback(u); got != want {
			t.Errorf("loopback(%q) = %v, want %v", u, got, want)
		}
	}
}

// TestScrapeReadsServerCounters reads one replica's request, remote and
// tool call counters, summed over their labels, and its replica label.
func TestScrapeReadsServerCounters(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`process_cpu_seconds_total{replica="r1"} 2
process_resident_memory_bytes{replica="r1"} 1000
outpost_http_request_duration_seconds_bucket{method="GET",replica="r1",le="0.001"} 3
outpost_http_request_duration_seconds_count{method="GET",replica="r1"} 7
outpost_http_request_duration_seconds_count{method="POST",replica="r1"} 5
outpost_gateway_remotes{replica="r1"} 4
outpost_tool_calls_total{ok="true",replica="r1",tool="exec"} 30
outpost_tool_calls_total{ok="false",replica="r1",tool="exec"} 2
`))
	}))
	defer srv.Close()
	s, err := scrape(context.Background(), srv.URL, "tok", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	if s.replica != "r1" || s.requests != 12 || s.remotes != 4 || s.toolCalls != 32 {
		t.Fatalf("scrape = %+v, want replica r1, 12 requests, 4 remotes, 32 tool calls", s)
	}
}

// TestReplicaFigures: each URL's figures are the differences of its own
// samples; one that failed a reading has none.
func TestReplicaFigures(t *testing.T) {
	t.Parallel()
	urls := []string{"http://a/metrics", "http://b/metrics"}
	before := samples{urls: urls, each: []sample{{ok: true, requests: 10, toolCalls: 1}, {ok: true}}}
	idle := samples{urls: urls, each: []sample{{ok: true, cpu: 1, rss: 100}, {ok: false}}}
	busy := samples{urls: urls, each: []sample{{ok: true, cpu: 3.5, rss: 150, requests: 40, remotes: 2, toolCalls: 11, replica: "ra"}, {ok: true, replica: "rb"}}}
	got := replicaFigures(before, idle, busy)
	want := []ReplicaFigures{
		{URL: "http://a/metrics", Replica: "ra", Available: true, RSSIdle: 100, RSSBusy: 150, CPUBusyS: 2.5, Requests: 30, Remotes: 2, ToolCalls: 10},
		{URL: "http://b/metrics", Replica: "rb"},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("replicaFigures = %+v, want %+v", got, want)
	}
}

// TestMixedReplicas: a metrics URL that answered from two replicas in
// turn (a balancer's) is unreadable in every reading, with an error
// naming it and the replicas; one that answered from one replica, or
// from a server without replicas, is left as it was.
func TestMixedReplicas(t *testing.T) {
	t.Parallel()
	urls := []string{"http://lb/metrics", "http://r2/metrics", "http://single/metrics"}
	reading := func(first string) *samples {
		return &samples{urls: urls, total: sample{ok: true},
			each: []sample{{ok: true, replica: first}, {ok: true, replica: "r2"}, {ok: true}}}
	}
	all := []*samples{reading("r1"), reading("r1"), reading("r3"), reading("r1")}
	err := mixedReplicas(all...)
	if err == nil || !strings.Contains(err.Error(), "http://lb/metrics came from replicas r1, r3") || strings.Contains(err.Error(), "r2/metrics") {
		t.Fatalf("mixedReplicas = %v, want the balancer's URL named with r1, r3 and nothing else", err)
	}
	for i, m := range all {
		if m.each[0].ok || m.total.ok || !m.each[1].ok || !m.each[2].ok {
			t.Errorf("reading %d after the check: %+v, total ok %v; want the first URL and the total unreadable, the others as they were", i, m.each, m.total.ok)
		}
	}
	if err := mixedReplicas(reading("r1"), reading("r1")); err != nil {
		t.Errorf("one replica each: %v", err)
	}
}

// TestTransportsTrustTheCA: the simulator's connections trust the CA it
// is given, and without it refuse a private CA's certificate.
func TestTransportsTrustTheCA(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	trusting := newTransports([]string{srv.URL}, 1, srv.Client().Transport.(*http.Transport).TLSClientConfig)
	defer trusting.close()
	for range 2 { // each source address's transport
		resp, err := trusting.pick().Get(srv.URL)
		if err != nil {
			t.Fatalf("with the CA: %v", err)
		}
		resp.Body.Close()
	}
	bare := newTransports([]string{srv.URL}, 1, nil)
	defer bare.close()
	if _, err := bare.pick().Get(srv.URL); err == nil || !strings.Contains(trustHint(err).Error(), "--ca-file") {
		t.Fatalf("without the CA: %v, want a certificate error saying to give --ca-file", err)
	}
}

// TestPrintShowsReplicas: with several replicas the report has a line
// for each, and a replica without figures says so.
func TestPrintShowsReplicas(t *testing.T) {
	t.Parallel()
	var r Report
	r.Server.Available = true
	r.Server.Replicas = []ReplicaFigures{
		{URL: "http://a/metrics", Replica: "r1", Available: true, RSSBusy: 3 << 20, CPUBusyS: 1.5, Requests: 40, ToolCalls: 7, Remotes: 2},
		{URL: "http://b/metrics"},
	}
	var b strings.Builder
	r.Print(&b)
	for _, want := range []string{
		"replica r1: RSS 3.0 MiB busy, CPU 1.50s busy, 40 requests, 7 tool calls, 2 remotes connected",
		"replica http://b/metrics: no figures",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestClaimLatencyExcludesTheWait checks what the claim latency measures:
// a claim that waited at the server before its session was asked for is
// timed from the create request, one sent after it from itself, whichever
// of the claim's answer and the create's answer the simulator learns
// first; a session without a create of the simulator's is not timed.
func TestClaimLatencyExcludesTheWait(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s := &sim{sessions: map[string]*session{}}

	// Parked 30 s before the create; answered 4 ms after it was sent,
	// before the creator had the create's answer.
	s.claimed("a", span{at(0), at(30_004)})
	if _, early := s.registerCreated("a", at(30_000), at(30_006)); early {
		t.Error("session a: early without a welcome")
	}
	// Sent 10 ms after the create; the create's answer came first.
	s.registerCreated("b", at(40_000), at(40_003))
	s.claimed("b", span{at(40_010), at(40_012)})
	// Welcomed before the creator had the answer: early, and timed once
	// however often the answers come.
	s.claimed("c", span{at(50_000), at(50_001)})
	s.welcomed("c")
	if _, early := s.registerCreated("c", at(49_999), at(50_005)); !early {
		t.Error("session c: welcomed before its create's answer, not early")
	}
	s.claimed("c", span{at(50_000), at(50_001)})
	// Not created by the simulator, and a claim the transport never saw.
	s.claimed("d", span{at(60_000), at(60_002)})
	s.claimed("e", span{})
	// A span left from an earlier claim, answered before this session
	// was asked for, is not this session's claim.
	s.claimed("f", span{at(70_000), at(70_001)})
	s.registerCreated("f", at(80_000), at(80_002))

	got := append([]time.Duration(nil), s.lat.claim.d...)
	slices.Sort(got)
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Errorf("claim latencies %v, want %v", got, want)
	}
}

// answer is a RoundTripper that answers every request with code.
type answer int

func (a answer) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: int(a), Body: http.NoBody, Request: req}, nil
}

// TestTimedKeepsTheWinningClaim: the worker's transport keeps the span
// of a claim-next that won a session (200) for the runner, and nothing
// for one that found none (204), lost (409) or was a renewal.
func TestTimedKeepsTheWinningClaim(t *testing.T) {
	claimNext := "http://127.0.0.1:1/v1/outposts/o/queue:claim"
	for _, tc := range []struct {
		url  string
		code int
		won  bool
	}{
		{claimNext, http.StatusOK, true},
		{claimNext, http.StatusNoContent, false},
		{claimNext, http.StatusConflict, false},
		{"http://127.0.0.1:1/v1/outposts/o/queue/s1/claim", http.StatusOK, false},
	} {
		s := &sim{}
		tr := &timed{base: answer(tc.code), sim: s}
		req, _ := http.NewRequest(http.MethodPost, tc.url, nil)
		before := time.Now()
		if _, err := tr.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		w := tr.takeWon()
		if got := !w.end.IsZero(); got != tc.won {
			t.Errorf("%s answered %d: span kept %v, want %v", tc.url, tc.code, got, tc.won)
			continue
		}
		if tc.won {
			if w.start.Before(before) || w.end.Before(w.start) {
				t.Errorf("span %v–%v, want from the request (after %v) to its answer", w.start, w.end, before)
			}
			if again := tr.takeWon(); !again.end.IsZero() {
				t.Error("the span was taken twice")
			}
		}
	}
}

// TestSimulatorFigures: the simulator's busy CPU and its share a call,
// printed only when it could be read.
func TestSimulatorFigures(t *testing.T) {
	t.Parallel()
	f := simulatorFigures(1.0, 3.5, true, 500)
	if !f.Available || f.CPUBusyS != 2.5 || f.CPUPerCallMS != 5 {
		t.Fatalf("figures %+v, want 2.5 s busy, 5 ms a call", f)
	}
	if f := simulatorFigures(1, 2, true, 0); f.CPUPerCallMS != 0 {
		t.Errorf("no calls: %+v, want no share a call", f)
	}
	var r Report
	r.Simulator = f
	var b strings.Builder
	r.Print(&b)
	if want := "simulator: CPU 2.50s busy (5.000 ms per call)"; !strings.Contains(b.String(), want) {
		t.Errorf("the report lacks %q:\n%s", want, b.String())
	}
	r.Simulator = simulatorFigures(1, 2, false, 10)
	b.Reset()
	r.Print(&b)
	if strings.Contains(b.String(), "simulator:") {
		t.Errorf("a simulator line without figures:\n%s", b.String())
	}
}

// TestWelcomedTwice: a session claimed again by another worker has a
// second remote welcomed; the session counts once and nothing panics.
func TestWelcomedTwice(t *testing.T) {
	t.Parallel()
	s := &sim{opts: Options{Sessions: 1}, sessions: map[string]*session{}}
	now := time.Now()
	s.registerCreated("a", now, now)
	s.welcomed("a")
	s.welcomed("a")
	if n := s.running.Load(); n != 1 {
		t.Fatalf("%d sessions started, want 1", n)
	}
	if d := s.lat.connect.dist(); d.N != 1 {
		t.Fatalf("%d connects timed, want 1", d.N)
	}
}
