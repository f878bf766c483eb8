package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/suspend"
)

// The queue's gauges are read from the store at each scrape, so they are
// true after a restart and whichever server changed the queue.
var (
	queuePendingDesc = prometheus.NewDesc("outpost_queue_pending",
		"Sessions waiting in each outpost's queue: pending, not claimed.", []string{"outpost"}, nil)
	queueOldestDesc = prometheus.NewDesc("outpost_queue_oldest_pending_seconds",
		"How long the longest-waiting pending session of each outpost has been waiting; 0 when none is.", []string{"outpost"}, nil)
	claimsActiveDesc = prometheus.NewDesc("outpost_claims_active",
		"Claims held and not lapsed, per outpost.", []string{"outpost"}, nil)
	sessionsRunningDesc = prometheus.NewDesc("outpost_sessions_running",
		"Sessions of each outpost whose status is running.", []string{"outpost"}, nil)
	sessionsSuspendedDesc = prometheus.NewDesc("outpost_sessions_suspended",
		"Sessions of each outpost whose status is suspended.", []string{"outpost"}, nil)
	maxRunningDesc = prometheus.NewDesc("outpost_max_running",
		"Each outpost's max_running: how many of its sessions may be claimed at once; 0 for no cap.", []string{"outpost"}, nil)
	snapshotBytesDesc = prometheus.NewDesc("outpost_snapshot_bytes",
		"Bytes of workspace snapshots the server keeps, by outpost.", []string{"outpost"}, nil)
)

// fleetMetrics are the counters of the fleet controls, by outpost.
type fleetMetrics struct {
	// attempts counts failed attempts by outpost and how they failed:
	// lapsed, released (with a reason), exhausted (the last one: the
	// session ended in error).
	attempts *prometheus.CounterVec
	// suspends counts suspends that got as far as pausing the session's
	// calls for its snapshot, by outpost and outcome: suspended, too_large (over
	// the snapshot limit), failed (anything else; the session goes on
	// running either way).
	suspends *prometheus.CounterVec
	// restores counts remotes' reports on restoring a resumed session's
	// snapshot, by outpost and outcome: restored, failed.
	restores *prometheus.CounterVec
}

// Outcomes of outpost_suspends_total and outpost_snapshot_restores_total.
const (
	suspendOK       = "suspended"
	suspendTooLarge = "too_large"
	suspendFailed   = "failed"
	restoreOK       = "restored"
	restoreFailed   = "failed"
)

func newFleetMetrics(reg registerer) fleetMetrics {
	f := fleetMetrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_attempts_failed_total",
			Help: "Failed attempts of sessions (claims that ended without the session ending), by outpost and how: lapsed, released (with a reason), exhausted (the last allowed; the session ended in error).",
		}, []string{"outpost", "how"}),
		suspends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_suspends_total",
			Help: "Suspends that paused a session's calls for its workspace snapshot, by outpost and outcome: suspended, too_large (over the snapshot limit), failed.",
		}, []string{"outpost", "outcome"}),
		restores: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_snapshot_restores_total",
			Help: "Workspace snapshots restored by the remotes of resumed sessions, by outpost and outcome: restored, failed.",
		}, []string{"outpost", "outcome"}),
	}
	reg.MustRegister(f.attempts, f.suspends, f.restores)
	return f
}

// countAttempt counts the failed attempt m committed, how it failed.
func (s *Server) countAttempt(ctx context.Context, m store.Mutation, how string) {
	if m.Entry == nil || m.Session == nil || api.IsFinal(m.Session.Status) && how != "exhausted" {
		return // the session was over: not an attempt
	}
	s.metrics.fleet.attempts.WithLabelValues(s.outpostName(ctx, m.Entry.OutpostID), how).Inc()
}

// countSuspend counts a suspend of a session of outpost outpostID that
// asked its remote for a snapshot; err is how it ended.
func (s *Server) countSuspend(ctx context.Context, outpostID string, err error) {
	outcome := suspendOK
	var he *httpError
	var se *suspend.Error
	switch {
	case errors.As(err, &he) && he.status == http.StatusRequestEntityTooLarge,
		errors.As(err, &se) && se.Status == http.StatusRequestEntityTooLarge:
		outcome = suspendTooLarge
	case err != nil:
		outcome = suspendFailed
	}
	s.metrics.fleet.suspends.WithLabelValues(s.outpostName(ctx, outpostID), outcome).Inc()
}

// countRestore counts a remote's report on restoring session sessionID's
// snapshot.
func (s *Server) countRestore(ctx context.Context, sessionID string, ok bool) {
	sess, err := s.store.GetSession(ctx, sessionID)
	if err != nil {
		s.log.Warn("snapshot restores metric", "session", sessionID, "err", err)
		return
	}
	outcome := restoreOK
	if !ok {
		outcome = restoreFailed
	}
	s.metrics.fleet.restores.WithLabelValues(s.outpostName(ctx, sess.OutpostID), outcome).Inc()
}

// queueScrapeTimeout bounds the store reads of one scrape.
const queueScrapeTimeout = 5 * time.Second

// queueCollector exports each outpost's queue depth, oldest wait, active
// claims, running and suspended sessions, max_running and the bytes of
// its snapshots (from the store, so every replica reports the same): three
// indexed queries per outpost per scrape.
type queueCollector struct{ s *Server }

// Describe implements prometheus.Collector.
func (q queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queuePendingDesc
	ch <- queueOldestDesc
	ch <- claimsActiveDesc
	ch <- sessionsRunningDesc
	ch <- sessionsSuspendedDesc
	ch <- maxRunningDesc
	ch <- snapshotBytesDesc
}

// Collect implements prometheus.Collector.
func (q queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), queueScrapeTimeout)
	defer cancel()
	outposts, err := q.s.store.ListOutposts(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(queuePendingDesc, err)
		return
	}
	now := q.s.now()
	for _, o := range outposts {
		// The entries of ended sessions, listed for a while, wait for
		// nothing: OutpostCounts leaves them out.
		counts, err := q.s.store.OutpostCounts(ctx, o.ID, now)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(queuePendingDesc, err)
			return
		}
		oldest := 0.0
		if !counts.OldestPending.IsZero() {
			oldest = max(0, now.Sub(counts.OldestPending).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(queuePendingDesc, prometheus.GaugeValue, float64(counts.Pending), o.Name)
		ch <- prometheus.MustNewConstMetric(queueOldestDesc, prometheus.GaugeValue, oldest, o.Name)
		ch <- prometheus.MustNewConstMetric(claimsActiveDesc, prometheus.GaugeValue, float64(counts.Held), o.Name)
		ch <- prometheus.MustNewConstMetric(sessionsRunningDesc, prometheus.GaugeValue, float64(counts.Running), o.Name)
		ch <- prometheus.MustNewConstMetric(sessionsSuspendedDesc, prometheus.GaugeValue, float64(counts.Suspended), o.Name)
		ch <- prometheus.MustNewConstMetric(maxRunningDesc, prometheus.GaugeValue, float64(o.MaxRunning), o.Name)
		ch <- prometheus.MustNewConstMetric(snapshotBytesDesc, prometheus.GaugeValue, float64(counts.SnapshotBytes), o.Name)
	}
}

// outpostName is the name of outpost id, or id itself when it cannot be
// read.
func (s *Server) outpostName(ctx context.Context, id string) string {
	if n, ok := s.outpostNames.Load(id); ok {
		return n.(string)
	}
	o, err := s.store.GetOutpost(ctx, id)
	if err != nil {
		return id
	}
	s.outpostNames.Store(id, o.Name)
	return o.Name
}

// observeQueueWait records how long a session waited between entering
// the queue and being claimed.
func (s *Server) observeQueueWait(ctx context.Context, outpostID, kind string, wait time.Duration) {
	s.metrics.queueWait.WithLabelValues(s.outpostName(ctx, outpostID), kind).Observe(max(0, wait.Seconds()))
}
