package orchestrator

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the orchestrator's Prometheus metrics.
type Metrics struct {
	registry         *prometheus.Registry
	ProvisionSeconds prometheus.Histogram
	MachinesActive   prometheus.Gauge
	ClaimsHeld       prometheus.Gauge
	ClaimConflicts   prometheus.Counter
	Failures         *prometheus.CounterVec
}

// NewMetrics returns the metrics on a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		ProvisionSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "outpost_orchestrator_provision_seconds", Help: "Time from claim to a started remote.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
		}),
		MachinesActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outpost_orchestrator_machines_active", Help: "Machines provisioned and not yet torn down.",
		}),
		ClaimsHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outpost_orchestrator_claims_held", Help: "Claims this orchestrator holds.",
		}),
		ClaimConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outpost_orchestrator_claim_conflicts_total", Help: "Claims lost to another acceptor (409).",
		}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_orchestrator_failures_total", Help: "Failures by reason.",
		}, []string{"reason"}),
	}
	m.registry.MustRegister(m.ProvisionSeconds, m.MachinesActive, m.ClaimsHeld, m.ClaimConflicts, m.Failures)
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

func (m *Metrics) fail(reason string) { m.Failures.WithLabelValues(reason).Inc() }
