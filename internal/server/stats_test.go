package server

import (
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestStats follows sessions and a worker into GET /v1/stats: two queued
// sessions of alpha, one of them ended, a worker sampled; the series of
// alpha, of every outpost, and of the one outpost a limited token sees;
// and the refusals.
func TestStats(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC)}
	ts := startServer(t, Options{Now: clock.Now})
	ts.outpost("alpha")
	ts.outpost("beta")
	ts.mustDo(200, "PATCH", "/v1/outposts/alpha", ts.admin, map[string]any{"max_running": 3}, nil)
	reader := ts.token([]string{api.ScopeSessionsRead}, "")
	readerB := ts.token([]string{api.ScopeSessionsRead}, "beta")
	netAdmin := ts.token([]string{api.ScopeNetworkAdmin}, "")

	ts.session("alpha")
	gone := ts.session("alpha").Metadata.SessionID
	ts.session("beta")
	clock.add(time.Minute)
	ts.mustDo(200, "POST", "/v1/sessions/"+gone+"/terminate", ts.admin, nil, nil)
	ts.mustDo(200, "PUT", "/v1/outposts/alpha/workers/w1", ts.admin, workerInfo(""), nil)
	if err := ts.srv.sampleWorkersOnce(t.Context()); err != nil {
		t.Fatal(err)
	}

	var a api.Stats
	ts.mustDo(200, "GET", "/v1/stats?outpost=alpha&window=1h", reader, nil, &a)
	if a.Outpost != "alpha" || a.Window != "1h" || a.MaxRunning != 3 || len(a.Buckets) != 60 || a.StepSeconds != 60 {
		t.Fatalf("alpha: outpost %q window %q max_running %d, %d buckets of %ds", a.Outpost, a.Window, a.MaxRunning, len(a.Buckets), a.StepSeconds)
	}
	prev, last := a.Buckets[58], a.Buckets[59]
	if prev.Queued != 2 || last.Queued != 2 || last.Ended[api.StatusExit] != 1 || last.Workers != 1 || last.Capacity != 1 {
		t.Errorf("alpha's last buckets: %+v, %+v; want 2 queued in each, 1 exit (terminated) and 1 worker in the last", prev, last)
	}

	var every api.Stats
	ts.mustDo(200, "GET", "/v1/stats", reader, nil, &every)
	if every.Outpost != "" || every.MaxRunning != 0 || every.Buckets[58].Queued != 3 {
		t.Errorf("every outpost: outpost %q max_running %d queued %d before the end; want \"\", 0 (beta has no cap), 3",
			every.Outpost, every.MaxRunning, every.Buckets[58].Queued)
	}
	var b api.Stats
	ts.mustDo(200, "GET", "/v1/stats?window=24h", readerB, nil, &b)
	if b.Window != "24h" || len(b.Buckets) != 96 || b.Buckets[95].Queued != 1 || b.Buckets[95].Workers != 0 {
		t.Errorf("beta's token sees window %q with %d buckets, last %+v; want beta's own: 96 buckets, 1 queued, no workers", b.Window, len(b.Buckets), b.Buckets[95])
	}

	for _, tc := range []struct {
		name, path, token string
		want              int
	}{
		{"no token", "/v1/stats", "", 401},
		{"network admin only", "/v1/stats", netAdmin, 403},
		{"bad window", "/v1/stats?window=2h", reader, 400},
		{"unknown outpost", "/v1/stats?outpost=nope", reader, 404},
		{"another outpost of a limited token", "/v1/stats?outpost=alpha", readerB, 404},
		{"by machine token", "/v1/stats?window=7d", ts.token([]string{api.ScopeMachine}, ""), 200},
	} {
		if got := ts.do("GET", tc.path, tc.token, nil, nil); got != tc.want {
			t.Errorf("%s: GET %s = %d, want %d", tc.name, tc.path, got, tc.want)
		}
	}
}
