package operator

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/egressproxy"
)

// egressFlushInterval is how often the proxy's decisions are posted to
// the sessions' transcripts, equal ones grouped.
const egressFlushInterval = time.Second

// EgressSessions are the sessions the operator's egress proxy serves now:
// each pool's runner adds a proxied session while it runs it, with the
// session's proxy secret and a view of its current entry, so the proxy
// decides every connection by the policy the queue watch showed last.
// Decisions go to the sessions' transcripts, grouped, once a second.
type EgressSessions struct {
	log *slog.Logger

	mu       sync.Mutex // guards the following
	sessions map[string]*egressSession
	pending  map[string]*egressBatch
	proxy    *egressproxy.Proxy
}

type egressSession struct {
	// goneAt is when the run ended: the proxy no longer serves the
	// session, but the reports of its last tunnels, closed then, are
	// still taken for a few flushes.
	goneAt time.Time
	secret string
	entry  func() api.QueueEntry
	post   func(ctx context.Context, batch []api.NetworkDecision) error
	count  *prometheus.CounterVec // by decision; nil: not counted
}

// egressBatch is a session's decisions not posted yet.
type egressBatch struct {
	post    func(ctx context.Context, batch []api.NetworkDecision) error
	order   []egressKey
	byKey   map[egressKey]*api.NetworkDecision
	dropped int64
}

// egressKey groups equal decisions.
type egressKey struct {
	decision, host, address, rule string
	port                          int
}

// NewEgressSessions returns an empty registry.
func NewEgressSessions(log *slog.Logger) *EgressSessions {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &EgressSessions{log: log, sessions: map[string]*egressSession{}, pending: map[string]*egressBatch{}}
}

// SetProxy names the proxy whose tunnels Changed rechecks.
func (es *EgressSessions) SetProxy(p *egressproxy.Proxy) {
	es.mu.Lock()
	defer es.mu.Unlock()
	es.proxy = p
}

// Lookup is the proxy's view of a session: its secret and current policy.
func (es *EgressSessions) Lookup(id string) (egressproxy.Session, bool) {
	es.mu.Lock()
	s := es.sessions[id]
	es.mu.Unlock()
	if s == nil || !s.goneAt.IsZero() {
		return egressproxy.Session{}, false
	}
	e := s.entry()
	return egressproxy.Session{Secret: s.secret, Policy: e.Spec.NetworkPolicy}, true
}

// Report takes one decision of the proxy for the session's transcript and
// metrics. It never blocks on the network.
func (es *EgressSessions) Report(id string, d api.NetworkDecision) {
	es.mu.Lock()
	defer es.mu.Unlock()
	s := es.sessions[id]
	if s == nil {
		return // gone: its transcript belongs to its next holder
	}
	if s.count != nil {
		s.count.WithLabelValues(d.Decision).Inc()
	}
	b := es.pending[id]
	if b == nil {
		b = &egressBatch{post: s.post, byKey: map[egressKey]*api.NetworkDecision{}}
		es.pending[id] = b
	}
	k := egressKey{decision: d.Decision, host: d.Host, address: d.Address, rule: d.Rule, port: d.Port}
	if cur := b.byKey[k]; cur != nil {
		cur.Count = max(cur.Count, 1) + max(d.Count, 1)
		cur.BytesIn += d.BytesIn
		cur.BytesOut += d.BytesOut
		return
	}
	if len(b.order) >= api.MaxNetworkDecisions {
		b.dropped++
		return
	}
	dc := d
	b.byKey[k] = &dc
	b.order = append(b.order, k)
}

// add registers a session the proxy serves until the returned remove.
func (es *EgressSessions) add(id, secret string, entry func() api.QueueEntry,
	post func(context.Context, []api.NetworkDecision) error, count *prometheus.CounterVec) (remove func()) {
	s := &egressSession{secret: secret, entry: entry, post: post, count: count}
	es.mu.Lock()
	es.sessions[id] = s
	es.mu.Unlock()
	return func() {
		es.mu.Lock()
		s.goneAt = time.Now()
		p := es.proxy
		es.mu.Unlock()
		if p != nil {
			p.Recheck(id) // closes what is still open
		}
	}
}

// Changed tells the proxy the session's policy changed: its open tunnels
// the new policy forbids are closed.
func (es *EgressSessions) Changed(id string) {
	es.mu.Lock()
	p := es.proxy
	es.mu.Unlock()
	if p != nil {
		p.Recheck(id)
	}
}

// Run posts the grouped decisions once a second until ctx ends, then once
// more.
func (es *EgressSessions) Run(ctx context.Context) error {
	t := time.NewTicker(egressFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
			es.flush(fctx)
			cancel()
			return nil
		case <-t.C:
			es.flush(ctx)
		}
	}
}

func (es *EgressSessions) flush(ctx context.Context) {
	es.mu.Lock()
	all := es.pending
	es.pending = map[string]*egressBatch{}
	for id, s := range es.sessions {
		if !s.goneAt.IsZero() && time.Since(s.goneAt) > 3*egressFlushInterval {
			delete(es.sessions, id)
		}
	}
	es.mu.Unlock()
	for id, b := range all {
		batch := make([]api.NetworkDecision, 0, len(b.order))
		for _, k := range b.order {
			batch = append(batch, *b.byKey[k])
		}
		if b.dropped > 0 {
			es.log.Warn("egress decisions not recorded: too many distinct ones in a second", "session", id, "dropped", b.dropped)
		}
		pctx, cancel := context.WithTimeout(ctx, reportTimeout)
		err := b.post(pctx, batch)
		cancel()
		if err != nil {
			es.log.Debug("cannot post egress decisions", "session", id, "decisions", len(batch), "err", err)
		}
	}
}

// ProxyURLKey is the key of the session's Secret holding its proxy URL,
// credential included, which the pod's proxy variables read.
const ProxyURLKey = "egress-proxy-url"

// newProxySecret returns a random proxy password, URL-safe.
func newProxySecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ProxyURL is the session's proxy URL: the pool's egress proxy with the
// session's credential.
func ProxyURL(base, sessionID, secret string) (string, error) {
	host, port, err := proxyEndpoint(base)
	if err != nil {
		return "", err
	}
	u := url.URL{Scheme: "http", User: url.UserPassword(sessionID, secret), Host: net.JoinHostPort(host, strconv.Itoa(port))}
	return u.String(), nil
}

// proxySecretOf reads the proxy password back from a proxy URL.
func proxySecretOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return ""
	}
	p, _ := u.User.Password()
	return p
}
