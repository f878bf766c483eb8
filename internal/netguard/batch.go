package netguard

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
)

const (
	// flushEvery is how often decisions go to the transcript.
	flushEvery = time.Second
	// distinctBurst and distinctPerFlush budget the distinct decisions a
	// session puts on its transcript: at most distinctBurst in one flush,
	// distinctPerFlush more for each flush after. Equal decisions are
	// grouped whatever the budget; a distinct one past it is counted in
	// an overflow decision per decision and protocol (overflowRule), so
	// a session that tries thousands of random names or addresses a
	// second adds tens of events, not thousands, and every attempt is
	// still counted.
	distinctBurst    = 200
	distinctPerFlush = 20
	// reportTimeout bounds one post of a batch.
	reportTimeout = 10 * time.Second
)

// overflowRule is the rule of the decision that counts the attempts past
// the bound on distinct decisions, grouped by decision and protocol.
const overflowRule = "too many distinct destinations to list each"

// decisionKey is what makes two decisions equal for grouping: everything
// but their time, counts and bytes.
type decisionKey struct {
	allow    bool
	host     string
	addr     netip.Addr
	port     uint16
	protocol string
	rule     string
}

// Decision is one allowed or denied attempt, as the egress engine reports
// it; the fields mean what egress.Decision's do. It is a copy of that type,
// not an alias, because egress (gVisor's TUN endpoint) builds on Linux only
// and the batcher builds and is tested everywhere.
type Decision struct {
	Time              time.Time
	Allow             bool
	Host              string
	Addr              netip.Addr
	Port              uint16
	Protocol          string
	Rule              string
	BytesOut, BytesIn int64
	Count             int
}

// batcher groups decisions and posts them every flushEvery, never
// blocking the engine that adds them.
type batcher struct {
	report func(ctx context.Context, batch []api.NetworkDecision) error
	log    *slog.Logger

	mu      sync.Mutex // guards the following
	order   []decisionKey
	pending map[decisionKey]*api.NetworkDecision
	budget  int   // distinct decisions that may still be added
	folded  int64 // decisions folded into overflow ones since the last flush
	lost    int64 // decisions that failed to post, for the end's log line

	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

func newBatcher(report func(context.Context, []api.NetworkDecision) error, log *slog.Logger) *batcher {
	return &batcher{report: report, log: log, pending: map[decisionKey]*api.NetworkDecision{}, budget: distinctBurst,
		kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// add records d. It never blocks on the server.
func (b *batcher) add(d Decision) {
	if !d.Allow {
		b.log.Debug("network attempt denied", "host", d.Host, "address", addrString(d.Addr), "port", d.Port,
			"protocol", d.Protocol, "rule", d.Rule)
	}
	n := int64(max(d.Count, 1))
	k := decisionKey{allow: d.Allow, host: d.Host, addr: d.Addr, port: d.Port, protocol: d.Protocol, rule: d.Rule}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.pending[k]; p != nil {
		p.Count += n
		p.BytesOut += d.BytesOut
		p.BytesIn += d.BytesIn
		return
	}
	if b.budget <= 0 {
		k = decisionKey{allow: d.Allow, protocol: d.Protocol, rule: overflowRule}
		b.folded += n
		if p := b.pending[k]; p != nil {
			p.Count += n
			p.BytesOut += d.BytesOut
			p.BytesIn += d.BytesIn
			return
		}
		d = Decision{Time: d.Time, Allow: d.Allow, Protocol: d.Protocol, Rule: overflowRule, BytesOut: d.BytesOut, BytesIn: d.BytesIn}
	} else {
		b.budget--
	}
	decision := api.DecisionDeny
	if d.Allow {
		decision = api.DecisionAllow
	}
	var ms int64
	if !d.Time.IsZero() {
		ms = d.Time.UnixMilli()
	}
	b.pending[k] = &api.NetworkDecision{Time: ms, Decision: decision, Host: d.Host, Address: addrString(d.Addr),
		Port: int(d.Port), Protocol: d.Protocol, Rule: d.Rule, BytesOut: d.BytesOut, BytesIn: d.BytesIn, Count: n}
	b.order = append(b.order, k)
}

// take empties the pending decisions, in the order they first came, and
// refills the budget of distinct ones; folded is how many were counted in
// overflow decisions.
func (b *batcher) take() (batch []api.NetworkDecision, folded int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range b.order {
		batch = append(batch, *b.pending[k])
	}
	folded = b.folded
	b.order, b.pending, b.folded = nil, map[decisionKey]*api.NetworkDecision{}, 0
	b.budget = min(b.budget+distinctPerFlush, distinctBurst)
	return batch, folded
}

// run flushes every flushEvery until close, then once more.
func (b *batcher) run(ctx context.Context) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		t := time.NewTicker(flushEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-b.kick:
			case <-b.done:
				b.flush(context.WithoutCancel(ctx))
				return
			}
			// A flush under way as the session ends finishes (within
			// reportTimeout): its decisions were taken from pending, and
			// the last flush will not see them.
			b.flush(context.WithoutCancel(ctx))
		}
	}()
}

// flush posts what is pending, MaxNetworkDecisions at a time.
func (b *batcher) flush(ctx context.Context) {
	batch, folded := b.take()
	if folded > 0 {
		b.log.Debug("network decisions past the budget of distinct ones, counted without their destinations", "decisions", folded)
	}
	for len(batch) > 0 {
		n := min(len(batch), api.MaxNetworkDecisions)
		part := batch[:n]
		batch = batch[n:]
		if b.report == nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, reportTimeout)
		err := b.report(rctx, part)
		cancel()
		if err != nil {
			var lost int64
			for _, d := range part {
				lost += d.Count
			}
			b.mu.Lock()
			b.lost += lost
			b.mu.Unlock()
			if ctx.Err() == nil {
				b.log.Warn("cannot post network decisions to the transcript", "decisions", lost, "err", err)
			}
		}
	}
}

// close flushes what is left and stops; it returns how many decisions
// never reached the transcript.
func (b *batcher) close() int64 {
	close(b.done)
	b.wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lost
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}
