package storetest

import (
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// testFleetStats covers SessionTimes, PutWorkerSamples, WorkerSamples and
// FleetStats over a workload whose buckets are worked out by hand: queue
// peaks, running peaks (a session running from before the window), waits
// and durations, outcomes, an outpost's series against every outpost's,
// sessions outside the window left out, and samples written once per
// outpost and minute, pruned by age.
func testFleetStats(t *testing.T, s store.Store) {
	for _, o := range []store.Outpost{newOutpost("op_a", "a"), newOutpost("op_b", "b")} {
		must(t, "CreateOutpost", s.CreateOutpost(ctx(t), o))
	}
	t0 := base.Truncate(time.Hour).Add(2 * time.Hour)
	m := func(i int, d time.Duration) time.Time { return t0.Add(-time.Hour + time.Duration(i)*time.Minute + d) }
	type fixture struct {
		id, outpost, status string
		created             time.Time
		started, ended      *time.Time
	}
	for _, f := range []fixture{
		{"ses_old", "op_a", api.StatusExit, m(0, -2*time.Hour), ptr(m(0, -119*time.Minute)), ptr(m(0, -90*time.Minute))},
		{"ses_prior", "op_a", api.StatusExit, m(0, -10*time.Minute), ptr(m(0, -5*time.Minute)), ptr(m(1, 0))},
		{"ses_1", "op_a", api.StatusExit, m(0, 10*time.Second), ptr(m(2, 10*time.Second)), ptr(m(5, 0))},
		{"ses_2", "op_a", api.StatusError, m(1, 0), ptr(m(2, 40*time.Second)), ptr(m(7, 0))},
		{"ses_3", "op_a", api.StatusError, m(3, 0), nil, ptr(m(4, 0))},
		{"ses_4", "op_a", api.StatusNew, m(58, 0), nil, nil},
		{"ses_5", "op_b", api.StatusRunning, m(1, 0), ptr(m(1, 30*time.Second)), nil},
		{"ses_future", "op_a", api.StatusNew, m(60, 10*time.Second), nil, nil},
	} {
		sess := newSession(f.id, f.outpost, f.id, 0)
		sess.CreatedAt, sess.UpdatedAt = f.created, f.created
		sess.Status, sess.StartedAt, sess.EndedAt = f.status, f.started, f.ended
		create(t, s, sess)
	}

	// Samples: one per outpost and minute, the first written kept; those
	// older than the cut pruned.
	now := t0.Add(-time.Second)
	n, err := s.PutWorkerSamples(ctx(t), []store.WorkerSample{
		{OutpostID: "op_a", At: m(0, -9*24*time.Hour), Workers: 5, Capacity: 5, Busy: 5},
	}, time.Time{})
	must(t, "PutWorkerSamples old", err)
	if n != 1 {
		t.Errorf("wrote %d old samples, want 1", n)
	}
	n, err = s.PutWorkerSamples(ctx(t), []store.WorkerSample{
		{OutpostID: "op_a", At: m(0, 0), Workers: 2, Capacity: 2, Busy: 1},
		{OutpostID: "op_a", At: m(1, 0), Workers: 2, Capacity: 2, Busy: 2},
		{OutpostID: "op_b", At: m(1, 0), Workers: 1, Capacity: 4, Busy: 3},
		{OutpostID: "op_a", At: m(60, 0), Workers: 7, Capacity: 7, Busy: 7},
	}, now.Add(-store.WorkerSampleKeep))
	must(t, "PutWorkerSamples", err)
	if n != 4 {
		t.Errorf("wrote %d samples, want 4", n)
	}
	n, err = s.PutWorkerSamples(ctx(t), []store.WorkerSample{
		{OutpostID: "op_a", At: m(0, 0), Workers: 9, Capacity: 9, Busy: 9},
	}, now.Add(-store.WorkerSampleKeep))
	must(t, "PutWorkerSamples again", err)
	if n != 0 {
		t.Errorf("a second sample of a minute wrote %d, want 0", n)
	}
	all, err := s.WorkerSamples(ctx(t), "", time.Time{}, m(61, 0))
	must(t, "WorkerSamples", err)
	equal(t, "samples kept", all, []store.WorkerSample{
		{OutpostID: "op_a", At: m(0, 0), Workers: 2, Capacity: 2, Busy: 1},
		{OutpostID: "op_a", At: m(1, 0), Workers: 2, Capacity: 2, Busy: 2},
		{OutpostID: "op_b", At: m(1, 0), Workers: 1, Capacity: 4, Busy: 3},
		{OutpostID: "op_a", At: m(60, 0), Workers: 7, Capacity: 7, Busy: 7},
	})

	times, err := s.SessionTimes(ctx(t), "op_a", m(0, 0), m(60, 0))
	must(t, "SessionTimes", err)
	got := map[string]bool{}
	for _, st := range times {
		got[st.Status+"@"+st.CreatedAt.Format(time.TimeOnly)] = true
	}
	if len(times) != 5 {
		t.Errorf("SessionTimes of op_a returned %d sessions, want 5 (prior, 1, 2, 3, 4): %v", len(times), got)
	}

	q := store.StatsQuery{OutpostID: "op_a", Window: api.StatsWindows[0], Now: now}
	a, err := store.FleetStats(ctx(t), s, q)
	must(t, "FleetStats op_a", err)
	if !a.Start.Equal(m(0, 0)) || !a.End.Equal(t0) || a.StepSeconds != 60 || len(a.Buckets) != 60 {
		t.Fatalf("op_a window %s–%s step %d with %d buckets, want %s–%s step 60 with 60", a.Start, a.End, a.StepSeconds, len(a.Buckets), m(0, 0), t0)
	}
	column := func(st api.Stats, f func(api.StatsBucket) int, upto int) []int {
		var out []int
		for _, b := range st.Buckets[:upto] {
			out = append(out, f(b))
		}
		return out
	}
	queued := func(b api.StatsBucket) int { return b.Queued }
	running := func(b api.StatsBucket) int { return b.Running }
	exits := func(b api.StatsBucket) int { return b.Ended[api.StatusExit] }
	errs := func(b api.StatsBucket) int { return b.Ended[api.StatusError] }
	workers := func(b api.StatsBucket) int { return b.Workers }
	equal(t, "op_a queued", column(a, queued, 9), []int{1, 2, 2, 1, 0, 0, 0, 0, 0})
	equal(t, "op_a queued at the end", []int{a.Buckets[57].Queued, a.Buckets[58].Queued, a.Buckets[59].Queued}, []int{0, 1, 1})
	equal(t, "op_a running", column(a, running, 9), []int{1, 0, 2, 2, 2, 1, 1, 0, 0})
	equal(t, "op_a exits", column(a, exits, 9), []int{0, 1, 0, 0, 0, 1, 0, 0, 0})
	equal(t, "op_a errors", column(a, errs, 9), []int{0, 0, 0, 0, 1, 0, 0, 1, 0})
	equal(t, "op_a waits of minute 2", a.Buckets[2].Wait, api.Percentiles{N: 2, P50: 100, P90: 120, P99: 120, Max: 120})
	equal(t, "op_a durations of minute 1", a.Buckets[1].Duration, api.Percentiles{N: 1, P50: 360, P90: 360, P99: 360, Max: 360})
	equal(t, "op_a durations of minute 4 (ended while queued)", a.Buckets[4].Duration, api.Percentiles{})
	equal(t, "op_a durations of minute 7", a.Buckets[7].Duration.P50, 260.0)
	equal(t, "op_a workers", column(a, workers, 3), []int{2, 2, 0})
	equal(t, "op_a utilization", []float64{a.Buckets[0].Utilization, a.Buckets[1].Utilization, a.Buckets[2].Utilization}, []float64{0.5, 1, 0})
	equal(t, "op_a bucket 3 start", a.Buckets[3].Start, m(3, 0))

	q.OutpostID = ""
	every, err := store.FleetStats(ctx(t), s, q)
	must(t, "FleetStats of every outpost", err)
	equal(t, "every queued", column(every, queued, 5), []int{1, 3, 2, 1, 0})
	equal(t, "every running", column(every, running, 9), []int{1, 1, 3, 3, 3, 2, 2, 1, 1})
	equal(t, "every waits of minute 1", every.Buckets[1].Wait, api.Percentiles{N: 1, P50: 30, P90: 30, P99: 30, Max: 30})
	equal(t, "every workers", column(every, workers, 2), []int{2, 3})
	equal(t, "every utilization of minute 1", every.Buckets[1].Utilization, 0.833)

	q.Window = api.StatsWindows[2]
	week, err := store.FleetStats(ctx(t), s, q)
	must(t, "FleetStats of a week", err)
	if len(week.Buckets) != 84 || week.StepSeconds != 7200 {
		t.Errorf("a week has %d buckets of %ds, want 84 of 7200s", len(week.Buckets), week.StepSeconds)
	}
	last := week.Buckets[len(week.Buckets)-1]
	if last.Ended[api.StatusExit] != 2 || last.Ended[api.StatusError] != 2 {
		t.Errorf("the week's last bucket ended %v, want 2 exits and 2 errors (ses_old ended in the bucket before)", last.Ended)
	}
}
