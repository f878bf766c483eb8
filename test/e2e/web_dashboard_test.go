//go:build linux

package e2e

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
)

// TestWebDashboard loads the fleet dashboard in Chromium over a known
// workload — ended sessions with set outcomes and times, waiting ones,
// and worker samples, written into the server's database as the server
// records them, since real ones would take hours — and compares every
// plotted value (the SVG's points and bars) and every table cell with
// the store's series, for one outpost and for the whole fleet, and a few
// with numbers worked out by hand.
func TestWebDashboard(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	shots := screenshotDir(t)
	c := startCluster(t)
	ids := map[string]string{}
	for _, name := range []string{"dash-a", "dash-b"} {
		var o api.Outpost
		if code := c.api("POST", "/v1/outposts", c.admin, api.CreateOutpostRequest{Name: name, Platform: api.PlatformLinux}, &o); code != 201 {
			t.Fatalf("create outpost %s: %d", name, code)
		}
		ids[name] = o.Metadata.OutpostID
	}
	if code := c.api("PATCH", "/v1/outposts/dash-a", c.admin, map[string]any{"max_running": 4}, nil); code != 200 {
		t.Fatalf("set max_running: %d", code)
	}

	st, err := sqlite.Open(context.Background(), filepath.Join(c.dataDir, "outpost.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Three hours ago, on a quarter hour: inside the day's window, whole
	// buckets away from its ends.
	t0 := time.Now().UTC().Truncate(15 * time.Minute).Add(-3 * time.Hour)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	type fixture struct {
		outpost, status string
		created         time.Duration
		started, ended  *time.Time
	}
	workload := []fixture{
		{"dash-a", api.StatusExit, 0, at(1 * time.Minute), at(11 * time.Minute)},
		{"dash-a", api.StatusExit, 2 * time.Minute, at(5 * time.Minute), at(8 * time.Minute)},
		{"dash-a", api.StatusError, 3 * time.Minute, at(4 * time.Minute), at(40 * time.Minute)},
		{"dash-a", api.StatusExit, 20 * time.Minute, at(50 * time.Minute), at(55 * time.Minute)},
		{"dash-a", api.StatusError, 21 * time.Minute, nil, at(25 * time.Minute)}, // ended while it waited
		{"dash-b", api.StatusExit, 30 * time.Minute, at(31 * time.Minute), at(33 * time.Minute)},
	}
	for i, f := range workload {
		created := t0.Add(f.created)
		s := store.Session{ID: fmt.Sprintf("ses_dash%02d", i), OutpostID: ids[f.outpost], Status: f.status,
			Spec:      api.SessionSpec{Outpost: f.outpost, Title: fmt.Sprintf("dash %d", i), Agent: api.Agent{Kind: api.AgentScript}},
			CreatedAt: created, UpdatedAt: created, StartedAt: f.started, EndedAt: f.ended, Reason: "set by the test"}
		e := &store.QueueEntry{SessionID: s.ID, OutpostID: s.OutpostID, Kind: api.KindNew, Platform: api.PlatformLinux,
			Phase: api.PhasePending, SessionStatus: api.QueueSessionTerminated, Deleted: true, CreatedAt: created, UpdatedAt: created}
		if err := st.CreateSession(context.Background(), s, e, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.PutWorkerSamples(context.Background(), []store.WorkerSample{
		{OutpostID: ids["dash-a"], At: t0, Workers: 3, Capacity: 3, Busy: 2},
		{OutpostID: ids["dash-a"], At: t0.Add(time.Minute), Workers: 2, Capacity: 2, Busy: 2},
		{OutpostID: ids["dash-b"], At: t0, Workers: 1, Capacity: 4, Busy: 1},
	}, time.Time{}); err != nil {
		t.Fatal(err)
	}

	signIn(t, ctx, c, c.admin)
	type drawn struct {
		Window, End string
		Cap         string
		Points      map[string]map[string][]string // chart → series → data-value by bucket
		Tables      map[string][][]string          // chart → rows of cells
		Summary     string
	}
	read := func(path string) drawn {
		t.Helper()
		do(t, ctx, "dashboard "+path, chromedp.Navigate(c.url+path), chromedp.WaitVisible(chromedp.CSS("#dashboard svg.chart")))
		return eval[drawn](t, ctx, `(() => {
			const d = document.getElementById("dashboard");
			const out = {Window: d.dataset.window, End: d.dataset.end, Points: {}, Tables: {}, Summary: document.getElementById("dash-ended").textContent};
			const cap = document.querySelector("#chart-running line.cap");
			out.Cap = cap ? cap.dataset.cap : "";
			for (const svg of document.querySelectorAll("svg.chart")) {
				const series = {};
				for (const g of svg.querySelectorAll("g.series")) {
					series[g.dataset.series] = [...g.querySelectorAll("[data-bucket]")].map(e => e.dataset.value);
				}
				out.Points[svg.dataset.chart] = series;
			}
			for (const tb of document.querySelectorAll("table[data-chart]")) {
				out.Tables[tb.dataset.chart] = [...tb.querySelectorAll("tbody tr")].map(r => [...r.children].map(c => c.textContent));
			}
			return out;
		})()`)
	}
	check := func(what string, got drawn, outpostID string) api.Stats {
		t.Helper()
		win, err := api.ParseStatsWindow(got.Window)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		end, err := time.Parse(time.RFC3339, got.End)
		if err != nil {
			t.Fatalf("%s: the page's end %q: %v", what, got.End, err)
		}
		want, err := store.FleetStats(context.Background(), st, store.StatsQuery{OutpostID: outpostID, Window: win, Now: end.Add(-time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		expect := map[string]map[string]func(b api.StatsBucket) float64{
			"queued":      {"queued": func(b api.StatsBucket) float64 { return float64(b.Queued) }},
			"wait":        {"p50": func(b api.StatsBucket) float64 { return b.Wait.P50 }, "p90": func(b api.StatsBucket) float64 { return b.Wait.P90 }},
			"ended":       {"exit": func(b api.StatsBucket) float64 { return float64(b.Ended["exit"]) }, "error": func(b api.StatsBucket) float64 { return float64(b.Ended["error"]) }},
			"running":     {"running": func(b api.StatsBucket) float64 { return float64(b.Running) }},
			"workers":     {"workers": func(b api.StatsBucket) float64 { return float64(b.Workers) }, "capacity": func(b api.StatsBucket) float64 { return float64(b.Capacity) }},
			"utilization": {"utilization": func(b api.StatsBucket) float64 { return math.Round(b.Utilization*1000) / 10 }},
			"duration": {"p50": func(b api.StatsBucket) float64 { return b.Duration.P50 }, "p90": func(b api.StatsBucket) float64 { return b.Duration.P90 },
				"p99": func(b api.StatsBucket) float64 { return b.Duration.P99 }},
		}
		order := map[string][]string{"wait": {"p50", "p90"}, "ended": {"exit", "error"}, "workers": {"workers", "capacity"}, "duration": {"p50", "p90", "p99"}}
		for chart, series := range expect {
			rows := got.Tables[chart]
			if len(rows) != len(want.Buckets) {
				t.Errorf("%s: table %s has %d rows, want %d", what, chart, len(rows), len(want.Buckets))
				continue
			}
			keys := order[chart]
			if keys == nil {
				keys = []string{chart}
			}
			for col, key := range keys {
				pts := got.Points[chart][key]
				if len(pts) != len(want.Buckets) {
					t.Errorf("%s: chart %s series %s has %d points, want %d", what, chart, key, len(pts), len(want.Buckets))
					continue
				}
				for b, bucket := range want.Buckets {
					w := series[key](bucket)
					if v, err := strconv.ParseFloat(pts[b], 64); err != nil || v != w {
						t.Errorf("%s: chart %s series %s bucket %d (%s) plots %q, the store has %v", what, chart, key, b, bucket.Start.Format(time.TimeOnly), pts[b], w)
					}
					if v, err := strconv.ParseFloat(rows[b][col+1], 64); err != nil || v != w {
						t.Errorf("%s: table %s series %s bucket %d reads %q, the store has %v", what, chart, key, b, rows[b][col+1], w)
					}
				}
			}
		}
		return want
	}

	a := read("/ui/outposts/dash-a/dashboard?window=24h")
	shot(t, ctx, shots, "dashboard-a")
	stA := check("dash-a", a, ids["dash-a"])
	// By hand: three of dash-a's sessions run at once at most (from 0:05
	// to 0:08: 1–11, 4–40, 5–8), it has three exits and two errors, its
	// cap is 4, and three workers were its most.
	peak, exits, errs, workers := 0, 0, 0, 0
	for _, b := range stA.Buckets {
		peak, workers = max(peak, b.Running), max(workers, b.Workers)
		exits += b.Ended[api.StatusExit]
		errs += b.Ended[api.StatusError]
	}
	if peak != 3 || exits != 3 || errs != 2 || workers != 3 || a.Cap != "4" {
		t.Errorf("dash-a: running peak %d, %d exits, %d errors, %d workers at most, cap %q; want 3, 3, 2, 3, \"4\"", peak, exits, errs, workers, a.Cap)
	}
	if want := "5 ("; len(a.Summary) < 3 || a.Summary[:3] != want {
		t.Errorf("dash-a's summary reads %q, want 5 sessions ended", a.Summary)
	}

	every := read("/ui/dashboard?window=24h")
	stAll := check("every outpost", every, "")
	workers = 0
	for _, b := range stAll.Buckets {
		workers = max(workers, b.Workers)
	}
	if workers != 4 || every.Cap != "" {
		t.Errorf("every outpost: %d workers at most, cap %q; want 4 (3 of dash-a and 1 of dash-b in one minute) and no cap (dash-b has none)", workers, every.Cap)
	}
	shot(t, ctx, shots, "dashboard-every")

	// The hour's window by the minute, through the nav's link and the
	// issue's /ui/fleet path.
	do(t, ctx, "dashboard from the nav", chromedp.Navigate(c.url+"/ui/sessions"), chromedp.Click(chromedp.CSS(`nav a[href="/ui/dashboard"]`)),
		chromedp.WaitVisible(chromedp.CSS("#chart-queued")))
	hour := read("/ui/fleet?outpost=dash-b")
	if hour.Window != "1h" || len(hour.Tables["queued"]) != 60 {
		t.Errorf("/ui/fleet?outpost=dash-b shows window %q with %d buckets, want 1h with 60", hour.Window, len(hour.Tables["queued"]))
	}
	check("dash-b, the last hour", hour, ids["dash-b"])
}
