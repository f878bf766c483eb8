package netguard

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestBatcherGroupsAndBounds: equal decisions become one with a count
// and summed bytes, in first-seen order; past the budget distinct ones
// are folded into an overflow decision that counts them; a failed post
// counts as lost; close posts what is left.
func TestBatcherGroupsAndBounds(t *testing.T) {
	var mu sync.Mutex
	var posted [][]api.NetworkDecision
	fail := false
	b := newBatcher(func(_ context.Context, batch []api.NetworkDecision) error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return errors.New("the server is down")
		}
		posted = append(posted, batch)
		return nil
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	addr := netip.MustParseAddr("10.0.0.1")
	t0 := time.UnixMilli(1_700_000_000_000)
	b.add(Decision{Time: t0, Allow: true, Host: "a.test", Addr: addr, Port: 443, Protocol: api.ProtocolTCP, Rule: "hostname a.test", BytesOut: 10, BytesIn: 100})
	b.add(Decision{Time: t0.Add(time.Second), Allow: true, Host: "a.test", Addr: addr, Port: 443, Protocol: api.ProtocolTCP, Rule: "hostname a.test", BytesOut: 5, BytesIn: 50})
	b.add(Decision{Allow: false, Addr: addr, Port: 53, Protocol: api.ProtocolUDP, Rule: "no rule allows the address", Count: 7})
	b.flush(context.Background())
	if len(posted) != 1 || len(posted[0]) != 2 {
		t.Fatalf("posted %+v, want one batch of two decisions", posted)
	}
	a, d := posted[0][0], posted[0][1]
	if a.Decision != api.DecisionAllow || a.Count != 2 || a.BytesOut != 15 || a.BytesIn != 150 || a.Time != t0.UnixMilli() || a.Address != "10.0.0.1" {
		t.Errorf("grouped allow = %+v", a)
	}
	if d.Decision != api.DecisionDeny || d.Count != 7 || d.Time != 0 || d.Port != 53 {
		t.Errorf("deny = %+v", d)
	}

	for i := range distinctBurst + 5 {
		b.add(Decision{Allow: false, Addr: addr, Port: uint16(i + 1), Protocol: api.ProtocolTCP})
	}
	batch, folded := b.take()
	if len(batch) != distinctBurst+1 || folded != 5 {
		t.Fatalf("took %d decisions and %d folded, want %d and 5", len(batch), folded, distinctBurst+1)
	}
	if o := batch[distinctBurst]; o.Rule != overflowRule || o.Count != 5 || o.Address != "" || o.Port != 0 || o.Protocol != api.ProtocolTCP {
		t.Fatalf("overflow decision = %+v", o)
	}

	mu.Lock()
	fail = true
	mu.Unlock()
	b.run(context.Background())
	b.add(Decision{Allow: false, Addr: addr, Port: 1, Protocol: api.ProtocolTCP, Count: 3})
	if lost := b.close(); lost != 3 {
		t.Fatalf("lost %d decisions, want the 3 not posted", lost)
	}
}

// TestBatcherFloodOfDistinctDecisions: session code that tries thousands
// of distinct destinations a second (random names, random addresses) puts
// a bounded number of events on the transcript, not thousands a second;
// the attempts past the bound are still counted there, grouped by
// decision and protocol, so no attempt goes unseen.
func TestBatcherFloodOfDistinctDecisions(t *testing.T) {
	var posted []api.NetworkDecision
	b := newBatcher(func(_ context.Context, batch []api.NetworkDecision) error {
		posted = append(posted, batch...)
		return nil
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	const rounds, perRound = 10, 1000
	var want int64
	for r := range rounds {
		before := len(posted)
		for i := range perRound {
			a := netip.AddrFrom4([4]byte{10, byte(r), byte(i >> 8), byte(i)})
			b.add(Decision{Addr: a, Port: 443, Protocol: api.ProtocolTCP, Rule: "no rule allows the address"})
			want++
		}
		b.add(Decision{Host: "x.test", Protocol: api.ProtocolDNS, Rule: "no rule allows the name", Count: 3})
		want += 3
		b.flush(context.Background())
		if n := len(posted) - before; n > 250 {
			t.Fatalf("flush %d posted %d events for one second of attempts; want at most 250", r, n)
		}
	}
	if len(posted) > 600 {
		t.Fatalf("%d events for %d seconds of a flood; want at most 600", len(posted), rounds)
	}
	var got int64
	folded := false
	for _, d := range posted {
		got += d.Count
		if d.Rule == overflowRule && d.Address == "" && d.Decision == api.DecisionDeny {
			folded = true
		}
	}
	t.Logf("%d attempts to distinct destinations over %d flushes: %d events", want, rounds, len(posted))
	if got != want || !folded {
		t.Fatalf("the events count %d attempts (folded: %v), want all %d with the excess folded", got, folded, want)
	}
}
