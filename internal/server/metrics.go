package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outpost-sh/outpost/internal/webhooks"
)

// metrics are the control plane's Prometheus metrics, on its own registry.
// docs/metrics.md describes each one; a test keeps it complete.
type metrics struct {
	registry *prometheus.Registry
	// registered lists every collector on registry, so that every metric
	// can be described, observed or not (MustRegister adds to it).
	registered []prometheus.Collector

	requestDuration *prometheus.HistogramVec
	sessionsCreated prometheus.Counter
	sessionsEnded   *prometheus.CounterVec
	claims          *prometheus.CounterVec
	remotes         prometheus.Gauge
	remotesRefused  prometheus.Counter
	toolCalls       *prometheus.CounterVec
	// queueWait is the time from a session entering the queue to its claim.
	queueWait *prometheus.HistogramVec
	// fleet are the fleet controls' (queuemetrics.go).
	fleet fleetMetrics
	// Artifact retention (retention.go).
	artifactsPruned     prometheus.Counter
	artifactBytesPruned prometheus.Counter
	// forwarded counts requests forwarded to a session's owner (forward.go).
	forwarded prometheus.Counter
	// networkConnections counts the network decisions workers report
	// (machine.go), grouped ones by their count.
	networkConnections *prometheus.CounterVec
	// webhookDeliveries counts webhook delivery attempts by outcome
	// (webhooks.go).
	webhookDeliveries *prometheus.CounterVec
	// budgetReached counts sessions stopped at a limit (budget.go).
	budgetReached *prometheus.CounterVec
	// claimNextTx counts claim-next's store transactions; claimNextShared
	// the claim-next requests answered by another's (claimnext.go).
	claimNextTx, claimNextShared prometheus.Counter
	// claimNextRequests counts claim-next requests (claimnext.go).
	claimNextRequests prometheus.Counter
	// claimTokenHits counts claims authenticated by a token verified a
	// moment before (claimtokens.go).
	claimTokenHits prometheus.Counter
	// wrapped registers on registry with the replica label.
	wrapped prometheus.Registerer
}

// newMetrics returns the metrics of the replica of that id, which every
// metric carries as its label replica.
func newMetrics(replica string) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		registry: reg,
		wrapped:  prometheus.WrapRegistererWith(prometheus.Labels{"replica": replica}, reg),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outpost_http_request_duration_seconds",
			Help:    "Duration of authenticated API requests.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"method"}),
		sessionsCreated: counter("outpost_sessions_created_total", "Sessions created."),
		sessionsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_sessions_ended_total", Help: "Sessions ended, by final status and detail.",
		}, []string{"status", "detail"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_claims_total", Help: "Claim attempts by outcome (claimed, renewed, conflict, at_capacity, lapsed, released, error).",
		}, []string{"outcome"}),
		remotes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outpost_gateway_remotes", Help: "Remotes connected to the gateway.",
		}),
		remotesRefused: counter("outpost_gateway_remotes_refused_total", "Remotes refused because another remote process was serving their session under the same claim."),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_tool_calls_total", Help: "Tool call results by tool and outcome.",
		}, []string{"tool", "ok"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "outpost_queue_wait_seconds",
			Help: "Time sessions waited in the queue, from entering it (created, or requeued as kind resume) to their claim, by outpost and kind.",
			// 50 ms to 1 h.
			Buckets: prometheus.ExponentialBucketsRange(0.05, 3600, 17),
		}, []string{"outpost", "kind"}),
		artifactsPruned:     counter("outpost_artifacts_pruned_total", "Artifacts deleted by the artifact retention policy."),
		artifactBytesPruned: counter("outpost_artifacts_pruned_bytes_total", "Bytes of artifact files deleted by the artifact retention policy."),
		forwarded:           counter("outpost_requests_forwarded_total", "Requests forwarded to the replica that owns their session."),
		networkConnections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_network_connections_total", Help: "Connections of restricted sessions allowed or denied by their network policy, by outpost and decision, as their workers report them.",
		}, []string{"outpost", "decision"}),
		webhookDeliveries: newWebhookMetric(),
		budgetReached: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_budget_reached_total", Help: "Sessions stopped (suspended or ended) because they or their outpost reached a budget limit, by outpost and kind (tokens, cost, tool_calls, outpost_hours, outpost_cost).",
		}, []string{"outpost", "kind"}),
		claimNextTx: counter("outpost_claim_next_transactions_total",
			"Store transactions of server-assigned claims (claim-next): one per pick, whether it claimed a session or found none."),
		claimNextShared: counter("outpost_claim_next_coalesced_total",
			"Server-assigned claims (claim-next) answered without a store transaction of their own: an equal request's pick that started after they came found nothing claimable, or the outpost at its max_running."),
		claimNextRequests: counter("outpost_claim_next_requests_total",
			"Server-assigned claim (claim-next) requests of an outpost the token may see, parked ones counted once."),
		claimTokenHits: counter("outpost_claim_token_reuses_total",
			"Claim requests authenticated by a machine token this server verified less than five seconds before, without a lookup of their own; the claim's transaction reads the token again."),
	}
	m.MustRegister(m.webhookDeliveries, m.requestDuration, m.sessionsCreated, m.sessionsEnded, m.claims, m.remotes, m.remotesRefused, m.toolCalls,
		m.queueWait, m.artifactsPruned, m.artifactBytesPruned, m.forwarded, m.networkConnections, m.budgetReached,
		m.claimNextTx, m.claimNextShared, m.claimNextRequests, m.claimTokenHits,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.fleet = newFleetMetrics(m)
	// Outcomes known in advance are exported from the start, as 0.
	for _, o := range []string{"claimed", "renewed", "conflict", "at_capacity", "unauthorized", "lapsed", "released", "error"} {
		m.claims.WithLabelValues(o)
	}
	for _, o := range []string{webhooks.OutcomeDelivered, webhooks.OutcomeFailed, webhooks.OutcomeGivenUp, webhooks.OutcomeDisabled} {
		m.webhookDeliveries.WithLabelValues(o)
	}
	return m
}

// counter is a counter without labels.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// MustRegister registers collectors on the registry and remembers them.
func (m *metrics) MustRegister(cs ...prometheus.Collector) {
	m.wrapped.MustRegister(cs...)
	m.registered = append(m.registered, cs...)
}

// registerer is where metrics are registered: the server's metrics.
type registerer interface {
	MustRegister(...prometheus.Collector)
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}
