package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// A fleet's idle claimers all see each new session on their watch and all
// ask for the next one at once: W claimers and S sessions would make W×S
// claim-next transactions, nearly all of them a pick that finds nothing.
// A NextGate lines up the claim-next calls that would pick alike and lets
// only a few of them run their transaction at a time; when one finds
// nothing to claim, every call that was already waiting when it started is
// answered the same at once, as if each had run just after that pick. A
// burst then costs about one transaction per session claimed, plus a few,
// per process.

// DefaultNextInflight is how many claim-next transactions of one key a
// NextGate runs at a time while they claim, unless told otherwise.
const DefaultNextInflight = 4

// NextGateOptions configure a NextGate.
type NextGateOptions struct {
	// Inflight bounds the claim-next transactions run at a time for
	// calls of one key while they claim; zero or negative means
	// DefaultNextInflight. A line that is new, or whose last transaction
	// found nothing to claim, runs one at a time: a single pick answers
	// the calls behind it, and a claim widens the line again.
	Inflight int
	// Shared is called once for each call answered by another call's
	// pick, which ran no transaction of its own; nil for nothing.
	Shared func()
}

// NextGate coalesces concurrent Machine.ClaimNext calls that would pick
// alike: those of one outpost with equal filters (platform, network
// policy, placement). They wait in one line, whatever their machines; an
// answer that depended on the machine (entries passed over as unfit, or a
// refusal of an entry with requirements) is shared only with calls whose
// machines meet requirements alike. Calls with an exclude list pick
// differently from one another and go straight to the Machine. It is safe
// for concurrent use.
type NextGate struct {
	mc   *Machine
	opts NextGateOptions

	mu sync.Mutex // guards the following
	// keys holds each key with calls waiting or transactions running; a
	// key with neither is removed.
	keys map[nextKey]*nextQueue
}

// NewNextGate returns a NextGate whose calls claim through mc.
func NewNextGate(mc *Machine, opts NextGateOptions) *NextGate {
	if opts.Inflight <= 0 {
		opts.Inflight = DefaultNextInflight
	}
	if opts.Shared == nil {
		opts.Shared = func() {}
	}
	return &NextGate{mc: mc, opts: opts, keys: map[nextKey]*nextQueue{}}
}

// NextRequest is one claim-next call: Machine.ClaimNext's arguments.
type NextRequest struct {
	OutpostID string
	Acceptor  string
	// TokenID is the token the claimer asked with ("" for none).
	TokenID string
	Filter  store.NextFilter
	// Machine describes the claimer's machine; nil for none.
	Machine *api.ClaimMachine
}

// nextKey is what decides which entries a claim-next's store pick may
// return: calls of equal keys pick alike but for the requirements their
// machines meet (their fit). The claimer's desktop is not in it: the
// server refuses a desktop outpost's sessions to a claimer without one
// before it asks; nor are the acceptor and token, which change what a
// claim writes, never what it picks.
type nextKey struct {
	outpost, platform  string
	restricted, placed bool
}

// key returns r's key and fit; false when r must not share (an exclude
// list).
func (r NextRequest) key() (nextKey, string, bool) {
	if len(r.Filter.Exclude) > 0 {
		return nextKey{}, "", false
	}
	k := nextKey{outpost: r.OutpostID, platform: r.Filter.Platform, restricted: r.Filter.Restricted,
		placed: r.Filter.Placed || r.Machine != nil}
	fit, err := fitOf(r.Machine)
	if err != nil {
		return nextKey{}, "", false
	}
	return k, fit, true
}

// fitOf is what of machine m requirements are checked against
// (api.Requirements.Unmet: labels, CPUs, memory, GPUs), so that machines of
// equal fits meet the same requirements; hostnames, versions and tools
// differ from machine to machine and are left out. "" for none.
func fitOf(m *api.ClaimMachine) (string, error) {
	if m == nil {
		return "", nil
	}
	type gpu struct {
		Model  string
		Memory int64
	}
	f := struct {
		Labels map[string]string // encoding/json writes a map in key order
		CPUs   int
		Memory int64
		GPUs   []gpu
	}{Labels: m.Labels}
	if c := m.Capabilities; c != nil {
		f.CPUs, f.Memory = c.CPUs, c.MemoryBytes
		for _, g := range c.GPUs {
			f.GPUs = append(f.GPUs, gpu{g.Model, g.MemoryBytes})
		}
	}
	raw, err := json.Marshal(f)
	return string(raw), err
}

// nextQueue is one key's calls in the order they came.
type nextQueue struct {
	waiting []*nextCall
	running int    // transactions under way
	seq     uint64 // the seq of the next call to come
	// wide: the last transaction to end claimed, so up to Inflight may
	// run; else one at a time.
	wide bool
}

// nextCall is one call of a key. Its fields past wake are set under the
// gate's mu before wake is closed.
type nextCall struct {
	seq  uint64
	fit  string        // its machine's (fitOf)
	wake chan struct{} // closed when its turn has come or it was answered
	// run: its own transaction may start; before is the queue's seq then,
	// so calls below it were waiting before it started.
	run    bool
	before uint64
	// answer is what another call's pick answered it (run false): nil
	// for none claimable, or that call's refusal.
	answer error
}

// ClaimNext is Machine.ClaimNext for r, through the gate: r waits behind
// the calls of its key that came before it, and runs its own transaction
// unless one that started after r came found nothing claimable (false) or
// the outpost at its max_running (ErrAtCapacity) first. A call whose ctx
// ends while it waits leaves the line and claims nothing.
func (g *NextGate) ClaimNext(ctx context.Context, r NextRequest) (Grant, bool, error) {
	k, fit, ok := r.key()
	if !ok {
		return g.mc.ClaimNext(ctx, r.OutpostID, r.Acceptor, r.TokenID, r.Filter, r.Machine)
	}
	q, c := g.enqueue(k, fit)
	select {
	case <-c.wake:
	case <-ctx.Done():
		if g.leave(k, q, c) {
			return Grant{}, false, ctx.Err()
		}
		// Its turn came, or it was answered, as ctx ended.
		if c.run {
			g.finish(k, q, c, nextEnd{kind: nextFailed}, nil)
			return Grant{}, false, ctx.Err()
		}
	}
	if !c.run {
		return Grant{}, false, c.answer
	}
	var (
		gr  Grant
		end = nextEnd{kind: nextFailed} // what a panic in the claim leaves
		err error
	)
	// Deferred, so that a panic (recovered by the HTTP server) does not
	// leave the line counting a transaction that never ends.
	defer func() { g.finish(k, q, c, end, err) }()
	gr, end, err = g.mc.claimNext(ctx, r.OutpostID, r.Acceptor, r.TokenID, r.Filter, r.Machine)
	return gr, end.kind == nextClaimed, err
}

// enqueue adds a call to k's line and starts what may start.
func (g *NextGate) enqueue(k nextKey, fit string) (*nextQueue, *nextCall) {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.keys[k]
	if q == nil {
		q = &nextQueue{}
		g.keys[k] = q
	}
	c := &nextCall{seq: q.seq, fit: fit, wake: make(chan struct{})}
	q.seq++
	q.waiting = append(q.waiting, c)
	g.startLocked(q)
	return q, c
}

// leave takes c out of k's line; false when it is no longer waiting (its
// turn came or it was answered).
func (g *NextGate) leave(k nextKey, q *nextQueue, c *nextCall) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, w := range q.waiting {
		if w == c {
			q.waiting = append(q.waiting[:i:i], q.waiting[i+1:]...)
			g.dropLocked(k, q)
			return true
		}
	}
	return false
}

// finish follows c's transaction, which ended as end with err: when it
// found nothing claimable or the outpost at capacity, the calls that were
// waiting before it started get that answer (only those of c's fit when
// the answer depended on it); then the next calls start.
func (g *NextGate) finish(k nextKey, q *nextQueue, c *nextCall, end nextEnd, err error) {
	var answer error
	share := end.kind == nextNone
	if end.kind == nextFailed && errors.Is(err, ErrAtCapacity) {
		share, answer = true, err
	}
	shared := 0
	g.mu.Lock()
	q.running--
	switch {
	case end.kind == nextClaimed:
		q.wide = true
	case share:
		// Nothing left: one at a time again. A pick that gave up (what
		// is left is held by transactions still running, most likely
		// the line's own claims) keeps the width: the calls behind it
		// then run their own picks side by side, which drains the line
		// faster than one at a time in a measured burst.
		q.wide = false
	}
	if share {
		// The line is in seq order: the calls waiting before c started
		// are its head.
		kept := q.waiting[:0]
		for i, w := range q.waiting {
			if w.seq >= c.before {
				kept = append(kept, q.waiting[i:]...)
				break
			}
			if end.fitted && w.fit != c.fit {
				kept = append(kept, w)
				continue
			}
			w.answer = answer
			close(w.wake)
			shared++
		}
		clear(q.waiting[len(kept):])
		q.waiting = kept
	}
	g.startLocked(q)
	g.dropLocked(k, q)
	g.mu.Unlock()
	for range shared {
		g.opts.Shared()
	}
}

// startLocked lets the calls at the head of q's line run their
// transactions, up to the bound.
func (g *NextGate) startLocked(q *nextQueue) {
	limit := 1
	if q.wide {
		limit = g.opts.Inflight
	}
	for q.running < limit && len(q.waiting) > 0 {
		c := q.waiting[0]
		q.waiting[0] = nil
		q.waiting = q.waiting[1:]
		c.run, c.before = true, q.seq
		q.running++
		close(c.wake)
	}
}

// dropLocked forgets k once nothing waits or runs under it.
func (g *NextGate) dropLocked(k nextKey, q *nextQueue) {
	if q.running == 0 && len(q.waiting) == 0 && g.keys[k] == q {
		delete(g.keys, k)
	}
}

// Waiting is how many calls wait in line, over every key.
func (g *NextGate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, q := range g.keys {
		n += len(q.waiting)
	}
	return n
}
