package store

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// WorkerSampleKeep is how long the minute samples of live acceptors are
// kept: the dashboard's longest window and a day to spare.
const WorkerSampleKeep = 8 * 24 * time.Hour

// WorkerSample is what an outpost's live acceptors were at one minute.
type WorkerSample struct {
	OutpostID string
	// At is the minute sampled (truncated to the minute).
	At time.Time
	// Workers counts the live acceptors; Capacity the sessions they serve
	// at once (MaxSessions, at least 1 each); Busy those serving now
	// (ActiveSessions, or 1 for one naming its session).
	Workers, Capacity, Busy int
}

// SessionTimes are the moments of one session the fleet's series are
// made of.
type SessionTimes struct {
	OutpostID string
	Status    string
	CreatedAt time.Time
	// StartedAt is nil until the session first ran; EndedAt until it
	// ended.
	StartedAt, EndedAt *time.Time
}

// StatsQuery asks for the fleet's series.
type StatsQuery struct {
	// OutpostID is the outpost; "" for every outpost.
	OutpostID string
	Window    api.StatsWindow
	// Now ends the window: its last bucket holds Now.
	Now time.Time
}

// Bounds returns the start and end of q's window: whole buckets from the
// epoch, the last one holding Now.
func (q StatsQuery) Bounds() (start, end time.Time) {
	end = q.Now.UTC().Truncate(q.Window.Step).Add(q.Window.Step)
	return end.Add(-q.Window.Span), end
}

// BuildStats buckets sessions and samples over q's window. sessions need
// only be those created before its end and not ended before its start;
// samples those within it. Neither slice is changed.
func BuildStats(q StatsQuery, sessions []SessionTimes, samples []WorkerSample) api.Stats {
	start, end := q.Bounds()
	step := q.Window.Step
	n := int(end.Sub(start) / step)
	out := api.Stats{
		Window: q.Window.Name, Start: start, End: end,
		StepSeconds: int(step / time.Second),
		Buckets:     make([]api.StatsBucket, n),
	}
	bucketOf := func(t time.Time) int {
		if t.Before(start) || !t.Before(end) {
			return -1
		}
		return int(t.Sub(start) / step)
	}
	waits := make([][]float64, n)
	durations := make([][]float64, n)
	var queued, running []edge
	for i := range out.Buckets {
		out.Buckets[i].Start = start.Add(time.Duration(i) * step)
		out.Buckets[i].Ended = map[string]int{}
		for _, o := range api.StatsOutcomes {
			out.Buckets[i].Ended[o] = 0
		}
	}
	for _, s := range sessions {
		// Waiting lasts from creation to the start, or to the end of a
		// session that never started.
		waitEnd := s.EndedAt
		if s.StartedAt != nil {
			waitEnd = s.StartedAt
		}
		queued = appendInterval(queued, s.CreatedAt, waitEnd)
		if s.StartedAt != nil {
			running = appendInterval(running, *s.StartedAt, s.EndedAt)
			if b := bucketOf(*s.StartedAt); b >= 0 {
				waits[b] = append(waits[b], s.StartedAt.Sub(s.CreatedAt).Seconds())
			}
		}
		if s.EndedAt != nil && api.IsFinal(s.Status) {
			if b := bucketOf(*s.EndedAt); b >= 0 {
				out.Buckets[b].Ended[s.Status]++
				if s.StartedAt != nil {
					durations[b] = append(durations[b], s.EndedAt.Sub(*s.StartedAt).Seconds())
				}
			}
		}
	}
	qPeak := peaks(queued, start, step, n)
	rPeak := peaks(running, start, step, n)
	for i := range out.Buckets {
		b := &out.Buckets[i]
		b.Queued, b.Running = qPeak[i], rPeak[i]
		b.Wait = percentiles(waits[i])
		b.Duration = percentiles(durations[i])
	}

	// Samples of one minute add up across outposts; a bucket shows its
	// busiest minute and the average use of its capacity.
	type minute struct{ workers, capacity, busy int }
	perMinute := map[int64]*minute{}
	for _, s := range samples {
		if bucketOf(s.At) < 0 {
			continue
		}
		m := perMinute[s.At.UnixMilli()]
		if m == nil {
			m = &minute{}
			perMinute[s.At.UnixMilli()] = m
		}
		m.workers += s.Workers
		m.capacity += s.Capacity
		m.busy += s.Busy
	}
	capSum := make([]int, n)
	busySum := make([]int, n)
	for at, m := range perMinute {
		i := bucketOf(time.UnixMilli(at))
		b := &out.Buckets[i]
		if m.workers > b.Workers {
			b.Workers = m.workers
		}
		if m.capacity > b.Capacity {
			b.Capacity = m.capacity
		}
		capSum[i] += m.capacity
		busySum[i] += m.busy
	}
	for i := range out.Buckets {
		if capSum[i] > 0 {
			out.Buckets[i].Utilization = math.Round(float64(busySum[i])/float64(capSum[i])*1000) / 1000
		}
	}
	return out
}

// edge is a step of a count at a moment: +1 as an interval opens, -1 as
// it closes.
type edge struct {
	at    int64
	delta int
}

// appendInterval adds the interval [from, to) (to nil: still open).
func appendInterval(es []edge, from time.Time, to *time.Time) []edge {
	if to != nil && !to.After(from) {
		return es
	}
	es = append(es, edge{from.UnixMilli(), 1})
	if to != nil {
		es = append(es, edge{to.UnixMilli(), -1})
	}
	return es
}

// peaks returns, for each of n buckets of step from start, the highest
// number of the intervals es describe that are open at one moment of the
// bucket. Edges at one moment are applied together, so an interval that
// closes as another opens is not counted twice.
func peaks(es []edge, start time.Time, step time.Duration, n int) []int {
	slices.SortFunc(es, func(a, b edge) int { return cmp.Compare(a.at, b.at) })
	out := make([]int, n)
	level, i := 0, 0
	s0, st := start.UnixMilli(), step.Milliseconds()
	for b := range n {
		bStart, bEnd := s0+int64(b)*st, s0+int64(b+1)*st
		for ; i < len(es) && es[i].at <= bStart; i++ {
			level += es[i].delta
		}
		peak := level
		for i < len(es) && es[i].at < bEnd {
			at := es[i].at
			for ; i < len(es) && es[i].at == at; i++ {
				level += es[i].delta
			}
			peak = max(peak, level)
		}
		out[b] = peak
	}
	return out
}

// percentiles summarises vs by nearest rank, rounded to the millisecond.
func percentiles(vs []float64) api.Percentiles {
	if len(vs) == 0 {
		return api.Percentiles{}
	}
	vs = slices.Clone(vs)
	slices.Sort(vs)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(vs)))) - 1
		return math.Round(vs[max(i, 0)]*1000) / 1000
	}
	return api.Percentiles{N: len(vs), P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: rank(1)}
}

// FleetStats reads the sessions and samples of q's window from st and
// buckets them (BuildStats).
func FleetStats(ctx context.Context, st Store, q StatsQuery) (api.Stats, error) {
	start, end := q.Bounds()
	sessions, err := st.SessionTimes(ctx, q.OutpostID, start, end)
	if err != nil {
		return api.Stats{}, err
	}
	samples, err := st.WorkerSamples(ctx, q.OutpostID, start, end)
	if err != nil {
		return api.Stats{}, err
	}
	return BuildStats(q, sessions, samples), nil
}
