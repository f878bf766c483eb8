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
// and summed bytes, in first-seen order; past maxPending distinct ones
// are dropped and counted; a failed post counts as lost; close posts
// what is left.
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

	for i := range maxPending + 5 {
		b.add(Decision{Allow: false, Addr: addr, Port: uint16(i + 1), Protocol: api.ProtocolTCP})
	}
	batch, dropped := b.take()
	if len(batch) != maxPending || dropped != 5 {
		t.Fatalf("took %d decisions and %d dropped, want %d and 5", len(batch), dropped, maxPending)
	}

	mu.Lock()
	fail = true
	mu.Unlock()
	b.run(context.Background())
	b.add(Decision{Allow: false, Addr: addr, Port: 1, Protocol: api.ProtocolTCP, Count: 3})
	if lost := b.close(); lost != 5+3 {
		t.Fatalf("lost %d decisions, want the 5 dropped and the 3 not posted", lost)
	}
}
