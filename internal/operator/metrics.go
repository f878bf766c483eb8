package operator

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the operator's Prometheus metrics, each labelled with the
// pool ("namespace/name").
type Metrics struct {
	Reconciles        *prometheus.CounterVec
	ReconcileFailures *prometheus.CounterVec
	SessionsClaimed   *prometheus.CounterVec
	ClaimConflicts    *prometheus.CounterVec
	PodsActive        *prometheus.GaugeVec
	PodsGivenUp       *prometheus.CounterVec
	ProvisionSeconds  *prometheus.HistogramVec
	// EgressDecisions counts the egress proxy's decisions by pool and
	// decision (allow, deny).
	EgressDecisions *prometheus.CounterVec
}

// NewMetrics returns the metrics registered on reg. Metrics already
// registered there (a second operator in one process, in tests) are
// shared.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	pool := []string{"pool"}
	var errs []error
	counter := func(name, help string) *prometheus.CounterVec {
		c, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, pool))
		errs = append(errs, err)
		return c
	}
	m := &Metrics{
		Reconciles:        counter("outpost_operator_reconciles_total", "Reconciles of the pool."),
		ReconcileFailures: counter("outpost_operator_reconcile_failures_total", "Reconciles that failed or left the pool not Ready."),
		SessionsClaimed:   counter("outpost_operator_sessions_claimed_total", "Sessions the pool claimed (adoptions after a restart not counted)."),
		ClaimConflicts:    counter("outpost_operator_claim_conflicts_total", "Claims lost to another acceptor (409 or 404)."),
		PodsGivenUp:       counter("outpost_operator_pods_given_up_total", "Sessions given back to the queue after their pod failed past the restart limit."),
	}
	var err error
	m.PodsActive, err = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outpost_operator_pods_active", Help: "Session pods the pool has now.",
	}, pool))
	errs = append(errs, err)
	m.ProvisionSeconds, err = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "outpost_operator_provisioning_seconds", Help: "Time from a session's claim to its pod running.",
		Buckets: prometheus.ExponentialBuckets(0.25, 2, 12),
	}, pool))
	errs = append(errs, err)
	m.EgressDecisions, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outpost_operator_egress_decisions_total", Help: "Connections the egress proxy allowed or denied, by decision.",
	}, []string{"pool", "decision"}))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register the operator's metrics: %w", err)
	}
	return m, nil
}

// register registers c on reg, or returns the collector of the same
// description registered before.
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(T); ok {
			return existing, nil
		}
	}
	return c, err
}

// runner returns the metrics of a pool's runner.
func (m *Metrics) runner(pool string) RunnerMetrics {
	return RunnerMetrics{
		PodsActive:       m.PodsActive.WithLabelValues(pool),
		PodsGivenUp:      m.PodsGivenUp.WithLabelValues(pool),
		ProvisionSeconds: m.ProvisionSeconds.WithLabelValues(pool),
		EgressDecisions:  m.EgressDecisions.MustCurryWith(prometheus.Labels{"pool": pool}),
	}
}

// touch makes the pool's counters exist at zero, so that rates start from
// the pool's first reconcile.
func (m *Metrics) touch(pool string) {
	for _, c := range []*prometheus.CounterVec{m.ReconcileFailures, m.SessionsClaimed, m.ClaimConflicts, m.PodsGivenUp} {
		c.WithLabelValues(pool)
	}
}

// forget drops a deleted pool's series.
func (m *Metrics) forget(pool string) {
	for _, v := range []*prometheus.MetricVec{m.Reconciles.MetricVec, m.ReconcileFailures.MetricVec, m.SessionsClaimed.MetricVec,
		m.ClaimConflicts.MetricVec, m.PodsGivenUp.MetricVec, m.PodsActive.MetricVec, m.ProvisionSeconds.MetricVec} {
		v.DeleteLabelValues(pool)
	}
	m.EgressDecisions.DeletePartialMatch(prometheus.Labels{"pool": pool})
}
