package server

import (
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outpost-sh/outpost/api"
)

// describedNames lists the name of every metric the server registers,
// observed or not.
func describedNames(t *testing.T, m *metrics) []string {
	t.Helper()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for _, c := range m.registered {
		ch := make(chan *prometheus.Desc, 256)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			sub := fq.FindStringSubmatch(d.String())
			if sub == nil {
				t.Fatalf("cannot read the name of %s", d)
			}
			names = append(names, sub[1])
		}
	}
	return names
}

// TestMetricsDocumented keeps docs/metrics.md complete: every metric the
// server registers is named there (the Go runtime's and the process's
// standard collectors as go_* and process_*).
func TestMetricsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Options{})
	names := describedNames(t, ts.srv.metrics)
	if len(names) < 20 {
		t.Fatalf("only %d metrics described: %v", len(names), names)
	}
	for _, n := range names {
		want := "`" + n + "`"
		for _, group := range []string{"go_", "process_"} {
			if strings.HasPrefix(n, group) {
				want = "`" + group + "*`"
			}
		}
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/metrics.md does not list %s (as %s)", n, want)
		}
	}
}

// sample reads one sample of the server's /metrics text: the value of
// name with exactly these labels (in the exposition's order), and whether
// it is there.
func sample(t *testing.T, ts *testServer, name, labels string) (float64, bool) {
	t.Helper()
	code, _, raw := ts.fetch("GET", "/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	body := withoutReplicaLabel(string(raw))
	prefix := name + "{" + labels + "} "
	if labels == "" {
		prefix = name + " "
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f, true
		}
	}
	return 0, false
}

// TestQueueMetrics: each outpost's queue depth, oldest wait and active
// claims come from the store at each scrape, and a claim records how long
// its session waited.
func TestQueueMetrics(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	ts := startServer(t, Options{Now: func() time.Time { return time.UnixMilli(clock.Load()) }})
	ts.outpost("qa")
	ts.outpost("idle")
	first := ts.session("qa")
	clock.Add((30 * time.Second).Milliseconds())
	ts.session("qa")
	clock.Add((60 * time.Second).Milliseconds())

	gauge := func(name, outpost string) float64 {
		t.Helper()
		v, ok := sample(t, ts, name, `outpost="`+outpost+`"`)
		if !ok {
			t.Fatalf("%s has no sample for outpost %s", name, outpost)
		}
		return v
	}
	if got := gauge("outpost_queue_pending", "qa"); got != 2 {
		t.Errorf("qa pending = %v, want 2", got)
	}
	if got := gauge("outpost_queue_oldest_pending_seconds", "qa"); math.Abs(got-90) > 1 {
		t.Errorf("qa oldest pending = %v s, want 90", got)
	}
	if got := gauge("outpost_queue_pending", "idle") + gauge("outpost_queue_oldest_pending_seconds", "idle"); got != 0 {
		t.Errorf("idle outpost: pending + oldest = %v, want 0", got)
	}

	ts.claimFor(first.Metadata.SessionID, "acc-1")
	ts.claimFor(first.Metadata.SessionID, "acc-1") // a renewal waited for nothing
	if got := gauge("outpost_queue_pending", "qa"); got != 1 {
		t.Errorf("qa pending after a claim = %v, want 1", got)
	}
	if got := gauge("outpost_claims_active", "qa"); got != 1 {
		t.Errorf("qa active claims = %v, want 1", got)
	}
	if got := gauge("outpost_queue_oldest_pending_seconds", "qa"); math.Abs(got-60) > 1 {
		t.Errorf("qa oldest pending after the claim = %v s, want 60", got)
	}
	labels := `kind="` + api.KindNew + `",outpost="qa"`
	n, _ := sample(t, ts, "outpost_queue_wait_seconds_count", labels)
	sum, _ := sample(t, ts, "outpost_queue_wait_seconds_sum", labels)
	if n != 1 || math.Abs(sum-90) > 1 {
		t.Errorf("queue wait {%s}: %v samples summing %v s, want 1 of 90 s", labels, n, sum)
	}
}
