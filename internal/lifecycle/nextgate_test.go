package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/store"
)

// heldStore counts claim-next transactions and holds each one before it
// starts until open is closed, so a test can line calls up behind them.
type heldStore struct {
	lifecycle.Store
	open    chan struct{}
	entered atomic.Int64
}

func (h *heldStore) ClaimNext(ctx context.Context, outpostID string, now time.Time, tokenID string, f store.NextFilter,
	fn func(s store.Session, e store.QueueEntry, load store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error) {
	h.entered.Add(1)
	select {
	case <-h.open:
	case <-ctx.Done():
		return store.Mutation{}, ctx.Err()
	}
	return h.Store.ClaimNext(ctx, outpostID, now, tokenID, f, fn)
}

// gateRig is a rig whose Machine's claim-next transactions are held, and
// a NextGate over it that counts shared answers.
type gateRig struct {
	*rig
	held   *heldStore
	gate   *lifecycle.NextGate
	shared atomic.Int64
}

func newGateRig(t *testing.T, maxRunning int) *gateRig {
	held := &heldStore{open: make(chan struct{})}
	r := newRig(t, maxRunning, 0, func(o *lifecycle.Options) {
		held.Store = o.Store
		o.Store = held
	})
	g := &gateRig{rig: r, held: held}
	g.gate = lifecycle.NewNextGate(r.m, lifecycle.NextGateOptions{Shared: func() { g.shared.Add(1) }})
	return g
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

type nextResult struct {
	g   lifecycle.Grant
	ok  bool
	err error
}

// TestNextGateCoalesces: 200 concurrent claim-next calls for an outpost
// with 5 pending sessions claim the 5, each once, and the other 195 are
// answered "none" after a few transactions, not 200; the gate keeps no
// key afterwards.
func TestNextGateCoalesces(t *testing.T) {
	t.Parallel()
	g := newGateRig(t, 0)
	for i := range 5 {
		g.session(t, fmt.Sprintf("s%d", i))
	}
	const n = 200
	results := make(chan nextResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			gr, ok, err := g.gate.ClaimNext(t.Context(), lifecycle.NextRequest{OutpostID: "o1", Acceptor: fmt.Sprintf("w%d", i)})
			results <- nextResult{gr, ok, err}
		})
	}
	// A new line runs one transaction at a time until one claims.
	inflight := lifecycle.DefaultNextInflight
	waitFor(t, "every call is in line or in its transaction", func() bool {
		return g.gate.Waiting() == n-1 && g.held.entered.Load() == 1
	})
	close(g.held.open)
	wg.Wait()
	close(results)
	claimed := map[string]string{}
	none := 0
	for r := range results {
		switch {
		case r.err != nil:
			t.Errorf("claim-next: %v", r.err)
		case r.ok:
			if prev, dup := claimed[r.g.Entry.SessionID]; dup {
				t.Errorf("%s claimed by %s and %s", r.g.Entry.SessionID, prev, r.g.Entry.AcceptorID)
			}
			claimed[r.g.Entry.SessionID] = r.g.Entry.AcceptorID
		default:
			none++
		}
	}
	tx := g.held.entered.Load()
	if len(claimed) != 5 || none != n-5 {
		t.Errorf("%d claimed and %d answered none, want 5 and %d", len(claimed), none, n-5)
	}
	if bound := int64(5 + 2*inflight); tx > bound {
		t.Errorf("%d claim-next transactions for %d calls, want at most %d", tx, n, bound)
	}
	if s := g.shared.Load(); s != n-tx {
		t.Errorf("%d calls answered without a transaction, want %d (%d calls, %d transactions)", s, n-tx, n, tx)
	}
	if k := g.gate.Keys(); k != 0 {
		t.Errorf("the gate holds %d keys once every call returned, want 0", k)
	}
}

// TestNextGateCancel: a call whose context ends while it waits in line
// returns at once and claims nothing; the call running still claims.
func TestNextGateCancel(t *testing.T) {
	t.Parallel()
	g := newGateRig(t, 0)
	for i := range 5 {
		g.session(t, fmt.Sprintf("s%d", i))
	}
	var wg sync.WaitGroup
	claimed := make(chan string, 1)
	wg.Go(func() {
		gr, ok, err := g.gate.ClaimNext(t.Context(), lifecycle.NextRequest{OutpostID: "o1", Acceptor: "w0"})
		if err != nil || !ok {
			t.Errorf("claim-next: %v, %v", ok, err)
		}
		claimed <- gr.Entry.SessionID
	})
	waitFor(t, "the first call is in its transaction", func() bool { return g.held.entered.Load() == 1 })
	ctx, cancel := context.WithCancel(t.Context())
	gone := make(chan error, 1)
	go func() {
		_, ok, err := g.gate.ClaimNext(ctx, lifecycle.NextRequest{OutpostID: "o1", Acceptor: "gone"})
		if ok {
			err = errors.New("it claimed")
		}
		gone <- err
	}()
	waitFor(t, "the last call waits", func() bool { return g.gate.Waiting() == 1 })
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v, want context.Canceled", err)
	}
	if w := g.gate.Waiting(); w != 0 {
		t.Fatalf("%d calls wait after the cancelled one left, want 0", w)
	}
	close(g.held.open)
	wg.Wait()
	close(claimed)
	if id := <-claimed; id != "s0" {
		t.Errorf("the first call claimed %q, want s0", id)
	}
	for _, id := range []string{"s1", "s2", "s3", "s4"} {
		if e := g.entry(t, id); e.Phase != api.PhasePending || e.AcceptorID != "" {
			t.Errorf("%s is %s by %q, want pending: the cancelled call claims nothing", id, e.Phase, e.AcceptorID)
		}
	}
	if tx := g.held.entered.Load(); tx != 1 {
		t.Errorf("%d transactions, want 1: the cancelled call runs none", tx)
	}
	if k := g.gate.Keys(); k != 0 {
		t.Errorf("the gate holds %d keys, want 0", k)
	}
}

// TestNextGateAtCapacity: calls waiting behind a pick refused at the
// outpost's max_running get that refusal without a transaction.
func TestNextGateAtCapacity(t *testing.T) {
	t.Parallel()
	g := newGateRig(t, 1)
	for i := range 3 {
		g.session(t, fmt.Sprintf("s%d", i))
	}
	if _, err := g.m.Claim(t.Context(), "s0", "holder"); err != nil {
		t.Fatal(err)
	}
	const n = 30
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, ok, err := g.gate.ClaimNext(t.Context(), lifecycle.NextRequest{OutpostID: "o1", Acceptor: fmt.Sprintf("w%d", i)})
			if ok {
				err = errors.New("it claimed")
			}
			errs <- err
		})
	}
	waitFor(t, "every call is in line", func() bool { return g.gate.Waiting() == n-1 })
	close(g.held.open)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, lifecycle.ErrAtCapacity) {
			t.Errorf("claim-next at max_running: %v, want ErrAtCapacity", err)
		}
	}
	// The first call started before the others came; the first refusal
	// after that answers every call waiting.
	if tx := g.held.entered.Load(); tx != 2 || g.shared.Load() != n-tx {
		t.Errorf("%d transactions and %d shared answers for %d calls, want 2 transactions and the rest shared", tx, g.shared.Load(), n)
	}
}

// TestNextGateKeys: calls that pick differently never share an answer: a
// call for another platform does not wait behind (nor take the "none" of)
// calls that cannot claim; a call with an exclude list bypasses the line
// and skips what it excludes.
func TestNextGateKeys(t *testing.T) {
	t.Parallel()
	g := newGateRig(t, 0)
	g.session(t, "s0")
	g.session(t, "s1")
	const mac = 6
	var wg sync.WaitGroup
	for i := range mac {
		wg.Go(func() {
			// The sessions are pinned to linux: none is claimable here.
			_, ok, err := g.gate.ClaimNext(t.Context(), lifecycle.NextRequest{OutpostID: "o1", Acceptor: fmt.Sprintf("mac%d", i),
				Filter: store.NextFilter{Platform: api.PlatformMacOS}})
			if ok || err != nil {
				t.Errorf("claim-next for macos: %v, %v; want none", ok, err)
			}
		})
	}
	waitFor(t, "the macos calls are in line", func() bool { return g.gate.Waiting() == mac-1 && g.held.entered.Load() == 1 })
	linux := make(chan nextResult, 2)
	wg.Go(func() {
		gr, ok, err := g.gate.ClaimNext(t.Context(), lifecycle.NextRequest{OutpostID: "o1", Acceptor: "linux",
			Filter: store.NextFilter{Platform: api.PlatformLinux}})
		linux <- nextResult{gr, ok, err}
	})
	waitFor(t, "the linux call runs beside the macos ones", func() bool { return g.held.entered.Load() == 2 })
	wg.Go(func() {
		gr, ok, err := g.gate.ClaimNext(t.Context(), lifecycle.NextRequest{OutpostID: "o1", Acceptor: "picky",
			Filter: store.NextFilter{Exclude: []string{"s0"}}})
		linux <- nextResult{gr, ok, err}
	})
	waitFor(t, "the call with an exclude list runs at once", func() bool { return g.held.entered.Load() == 3 })
	close(g.held.open)
	wg.Wait()
	close(linux)
	got := map[string]string{}
	for r := range linux {
		if !r.ok || r.err != nil {
			t.Fatalf("claim-next: %v, %v; want a claim", r.ok, r.err)
		}
		got[r.g.Entry.AcceptorID] = r.g.Entry.SessionID
	}
	if got["picky"] != "s1" || got["linux"] != "s0" {
		t.Errorf("claims %v, want linux s0 and picky s1 (s0 excluded)", got)
	}
	if k := g.gate.Keys(); k != 0 {
		t.Errorf("the gate holds %d keys, want 0", k)
	}
}

// machineOf is a claimer's machine: its own hostname, and cpus CPUs.
func machineOf(host string, cpus int) *api.ClaimMachine {
	return &api.ClaimMachine{Capabilities: &api.Capabilities{OS: "linux", Hostname: host, CPUs: cpus}}
}

// TestNextGateFits: with one transaction at a time, a call waits behind
// one that claims; a pick that found nothing because it passed over an
// entry its machine does not fit answers only the waiting calls whose
// machines fit alike (another hostname, the same CPUs), and a machine that
// fits claims that entry; a pick that found nothing at all answers every
// waiting call, whatever its machine.
func TestNextGateFits(t *testing.T) {
	t.Parallel()
	g := newGateRig(t, 0)
	g.gate = lifecycle.NewNextGate(g.m, lifecycle.NextGateOptions{Inflight: 1, Shared: func() { g.shared.Add(1) }})
	g.session(t, "p0")
	g.clock.Add(time.Second)
	now := g.clock.Now()
	big := store.Session{ID: "big", OutpostID: "o1", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
	if err := g.st.CreateSession(t.Context(), big, &store.QueueEntry{SessionID: "big", OutpostID: "o1", Kind: api.KindNew, Platform: api.PlatformLinux,
		Phase: api.PhasePending, SessionStatus: api.QueueSessionPending, Epoch: 1, CreatedAt: now, UpdatedAt: now,
		Requirements: &api.Requirements{CPUs: 4}}, nil); err != nil {
		t.Fatal(err)
	}

	type call struct {
		name    string
		machine *api.ClaimMachine
	}
	round := func(calls ...call) map[string]string {
		t.Helper()
		got := map[string]string{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, c := range calls {
			wg.Go(func() {
				gr, ok, err := g.gate.ClaimNext(t.Context(), lifecycle.NextRequest{OutpostID: "o1", Acceptor: c.name, Machine: c.machine})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Errorf("claim-next of %s: %v", c.name, err)
				case ok:
					got[c.name] = gr.Entry.SessionID
				}
			})
			// Each call in line before the next comes.
			waitFor(t, c.name+" is in line", func() bool { return g.gate.Waiting() == i && g.held.entered.Load() >= 1 })
		}
		close(g.held.open)
		wg.Wait()
		return got
	}
	// x claims p0; a1 passes over big (2 CPUs of 4) and finds nothing,
	// which answers a2 (another host, 2 CPUs) but not b (8 CPUs), who
	// claims big.
	got := round(call{"x", machineOf("x", 8)}, call{"a1", machineOf("a1", 2)}, call{"b", machineOf("b", 8)}, call{"a2", machineOf("a2", 2)})
	if len(got) != 2 || got["x"] != "p0" || got["b"] != "big" {
		t.Errorf("claims %v, want x p0 and b big", got)
	}
	// x 1, a1 2 (big passed over, then none), b 1: a2 ran none.
	if tx, s := g.held.entered.Load(), g.shared.Load(); tx != 4 || s != 1 {
		t.Errorf("%d transactions and %d shared answers, want 4 and 1", tx, s)
	}

	// Nothing pending now: the first pick answers everyone waiting.
	g.held.open = make(chan struct{})
	g.held.entered.Store(0)
	g.shared.Store(0)
	if _, err := g.m.Release(t.Context(), "p0", "x", "", false); err != nil {
		t.Fatal(err)
	}
	got = round(call{"x", machineOf("x", 8)}, call{"a1", machineOf("a1", 2)}, call{"b", machineOf("b", 8)}, call{"plain", machineOf("plain", 1)})
	if len(got) != 1 || got["x"] != "p0" {
		t.Errorf("claims %v, want x p0 only", got)
	}
	if tx, s := g.held.entered.Load(), g.shared.Load(); tx != 2 || s != 2 {
		t.Errorf("%d transactions and %d shared answers, want 2 and 2", tx, s)
	}
	if k := g.gate.Keys(); k != 0 {
		t.Errorf("the gate holds %d keys, want 0", k)
	}
}

// skippingStore is heldStore on a store whose picks report that they may
// have passed over an entry another transaction holds (as PostgreSQL's
// SKIP LOCKED does; internal/store/postgres's TestNextSkippedLocked shows
// the real one saying so).
type skippingStore struct{ *heldStore }

func (skippingStore) NextSkippedLocked(context.Context, string, store.NextFilter) (bool, error) {
	return true, nil
}

// TestNextGateKeepsNoneOfAPickThatSkipped: an empty pick that may have
// skipped a locked entry answers only its own call; the calls waiting
// behind it run their own transactions, so that an entry whose holder
// then lets go (a claim at capacity, unfit, or another writer) is not
// left pending with every claimer told there is nothing.
func TestNextGateKeepsNoneOfAPickThatSkipped(t *testing.T) {
	t.Parallel()
	held := &heldStore{open: make(chan struct{})}
	r := newRig(t, 0, 0, func(o *lifecycle.Options) {
		held.Store = o.Store
		o.Store = skippingStore{held}
	})
	var shared atomic.Int64
	gate := lifecycle.NewNextGate(r.m, lifecycle.NextGateOptions{Shared: func() { shared.Add(1) }})
	const n = 20
	var wg sync.WaitGroup
	var claimed atomic.Int64
	for i := range n {
		wg.Go(func() {
			_, ok, err := gate.ClaimNext(t.Context(), lifecycle.NextRequest{OutpostID: "o1", Acceptor: fmt.Sprintf("w%d", i)})
			if err != nil {
				t.Errorf("claim-next: %v", err)
			}
			if ok {
				claimed.Add(1)
			}
		})
	}
	waitFor(t, "every call is in line or in its transaction", func() bool {
		return gate.Waiting() == n-1 && held.entered.Load() == 1
	})
	close(held.open)
	wg.Wait()
	if claimed.Load() != 0 {
		t.Errorf("%d claimed from an empty queue", claimed.Load())
	}
	if got := held.entered.Load(); got != n || shared.Load() != 0 {
		t.Errorf("%d transactions and %d shared answers for %d calls, want %d and 0", got, shared.Load(), n, n)
	}
}
