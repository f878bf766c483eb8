package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
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
)

// queueScrapeTimeout bounds the store reads of one scrape.
const queueScrapeTimeout = 5 * time.Second

// queueCollector exports each outpost's queue depth, oldest wait and active
// claims: two indexed queries per outpost per scrape.
type queueCollector struct{ s *Server }

// Describe implements prometheus.Collector.
func (q queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queuePendingDesc
	ch <- queueOldestDesc
	ch <- claimsActiveDesc
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
		pending, total, err := q.s.store.ListQueue(ctx, store.QueueFilter{OutpostID: o.ID, Phase: api.PhasePending, Limit: 1})
		if err != nil {
			ch <- prometheus.NewInvalidMetric(queuePendingDesc, err)
			return
		}
		_, active, err := q.s.store.OutpostStats(ctx, o.ID, now)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(claimsActiveDesc, err)
			return
		}
		oldest := 0.0
		if len(pending) > 0 {
			// Oldest change first: the first pending entry is the one
			// pending longest.
			oldest = max(0, now.Sub(pending[0].UpdatedAt).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(queuePendingDesc, prometheus.GaugeValue, float64(total), o.Name)
		ch <- prometheus.MustNewConstMetric(queueOldestDesc, prometheus.GaugeValue, oldest, o.Name)
		ch <- prometheus.MustNewConstMetric(claimsActiveDesc, prometheus.GaugeValue, float64(active), o.Name)
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
