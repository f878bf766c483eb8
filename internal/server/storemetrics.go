package server

import "github.com/prometheus/client_golang/prometheus"

// claimGrouper is a store that runs concurrent claims in shared
// transactions (PostgreSQL's group commit) and counts them.
type claimGrouper interface {
	ClaimGroups() (groups, claims int64)
}

// registerStoreMetrics exposes what the store counts of its own work: for
// a store that groups claims, how many shared transactions it committed
// and how many claims they held, whose ratio is the mean group size.
func (s *Server) registerStoreMetrics() {
	g, ok := s.store.(claimGrouper)
	if !ok {
		return
	}
	s.metrics.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "outpost_store_claim_groups_total",
			Help: "Transactions of two or more claims the store committed together (one commit each).",
		}, func() float64 { n, _ := g.ClaimGroups(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "outpost_store_grouped_claims_total",
			Help: "Claims committed in a transaction shared with other claims.",
		}, func() float64 { _, n := g.ClaimGroups(); return float64(n) }),
	)
}
