package api

import (
	"fmt"
	"time"
)

// StatsPath serves the fleet's series: GET /v1/stats?window=&outpost=.
const StatsPath = "/v1/stats"

// StatsWindow is a span the fleet's series cover, with the width of one
// bucket: the last hour by the minute, the last day by the quarter hour,
// the last week by two hours.
type StatsWindow struct {
	// Name is how the query spells it: "1h", "24h", "7d".
	Name string `json:"name"`
	// Span and Step are durations (nanoseconds in JSON, as time.Duration
	// marshals); Stats carries the step as step_seconds.
	Span time.Duration `json:"span"`
	Step time.Duration `json:"step"`
}

// StatsWindows are the windows GET /v1/stats serves, the default first.
var StatsWindows = []StatsWindow{
	{Name: "1h", Span: time.Hour, Step: time.Minute},
	{Name: "24h", Span: 24 * time.Hour, Step: 15 * time.Minute},
	{Name: "7d", Span: 7 * 24 * time.Hour, Step: 2 * time.Hour},
}

// ParseStatsWindow finds a window by name; "" is the first.
func ParseStatsWindow(name string) (StatsWindow, error) {
	if name == "" {
		return StatsWindows[0], nil
	}
	for _, w := range StatsWindows {
		if w.Name == name {
			return w, nil
		}
	}
	return StatsWindow{}, fmt.Errorf("window %q is not one of 1h, 24h, 7d", name)
}

// Outcomes a session ends with, as Stats counts them: its final status.
var StatsOutcomes = []string{StatusExit, StatusError}

// Stats is the fleet's activity over a window, per bucket: GET /v1/stats.
// A bucket covers [Start, Start+StepSeconds); the last one holds now.
type Stats struct {
	// Outpost is the outpost's name; "" when the series cover every
	// outpost the caller may see.
	Outpost string `json:"outpost,omitempty"`
	// Window is the window's name ("1h", "24h", "7d").
	Window      string    `json:"window"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	StepSeconds int       `json:"step_seconds"`
	// MaxRunning is the cap on running sessions: the outpost's, or the sum
	// of every outpost's; 0 when there is none (an outpost without a cap
	// makes the sum uncapped).
	MaxRunning int `json:"max_running"`
	// Buckets are in time order.
	Buckets []StatsBucket `json:"buckets"`
}

// StatsBucket is one bucket of Stats.
type StatsBucket struct {
	Start time.Time `json:"start"`
	// Queued is the most sessions waiting at once in the bucket: created
	// and neither started nor ended.
	Queued int `json:"queued"`
	// Running is the most sessions running at once in the bucket: started
	// and not ended (a suspended session counts: its place is held).
	Running int `json:"running"`
	// Wait is the time from creation to start of the sessions that
	// started in the bucket.
	Wait Percentiles `json:"wait_seconds"`
	// Ended counts the sessions that ended in the bucket, by outcome
	// (StatsOutcomes).
	Ended map[string]int `json:"ended"`
	// Duration is the time from start to end of the sessions that ended
	// in the bucket after they started.
	Duration Percentiles `json:"duration_seconds"`
	// Workers is the most live acceptors sampled in the bucket (one
	// sample a minute); Capacity their sessions at once (MaxSessions).
	Workers  int `json:"workers"`
	Capacity int `json:"capacity"`
	// Utilization is the share of Capacity serving a session, averaged
	// over the bucket's samples, 0 to 1; 0 without samples.
	Utilization float64 `json:"utilization"`
}

// Percentiles summarise N durations, in seconds (nearest rank); all zero
// when N is 0.
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}
