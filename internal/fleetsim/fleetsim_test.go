package fleetsim

import (
	"context"
	"net/http"
	"net/http/httptest"
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

func TestOptionsRefuseBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Workers: 1}, "server URL"},
		{Options{Server: "http://x", Token: "t"}, "--workers"},
		{Options{Server: "http://x", Token: "t", Workers: 2, Sessions: 3}, "more than --workers"},
		{Options{Server: "http://x", Token: "t", Workers: 2, CallRate: -1}, "negative"},
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
