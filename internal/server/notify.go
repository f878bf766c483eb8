package server

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// topics fans session events out to live followers.
type topics struct {
	mu   sync.Mutex // guards subs
	subs map[string]map[*subscriber]struct{}
}

// subscriber receives one session's events. When it falls behind by more
// than its buffer it is dropped (lagged closes) and re-reads the store.
//
// Events committed by another replica are not published here; the
// replica's fan-out (fanout.go) pokes the session's subscribers instead,
// telling them how far the transcript goes. A follower (follow) replays the
// store up to there; any other subscriber (the agent loop's) is dropped as
// if it lagged, so that a poke is never taken for an event and the
// subscriber reads the store before it subscribes again.
type subscriber struct {
	ch     chan api.Event
	lagged chan struct{}
	once   sync.Once

	// poked, for a follower, gets a value when a poke raised pokeSeq;
	// nil for other subscribers. Cap 1: pokes coalesce.
	poked   chan struct{}
	pokeSeq atomic.Int64
}

func newTopics() *topics { return &topics{subs: map[string]map[*subscriber]struct{}{}} }

// subscribe follows a session's events; a poke drops the subscriber (see
// subscriber).
func (t *topics) subscribe(sessionID string) *subscriber {
	return t.add(sessionID, &subscriber{ch: make(chan api.Event, 512), lagged: make(chan struct{})})
}

// follow is subscribe for a follower that takes pokes: they arrive on
// poked, and pokedUpTo says how far to replay.
func (t *topics) follow(sessionID string) *subscriber {
	return t.add(sessionID, &subscriber{ch: make(chan api.Event, 512), lagged: make(chan struct{}), poked: make(chan struct{}, 1)})
}

func (t *topics) add(sessionID string, sub *subscriber) *subscriber {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.subs[sessionID]
	if m == nil {
		m = map[*subscriber]struct{}{}
		t.subs[sessionID] = m
	}
	m[sub] = struct{}{}
	return sub
}

func (t *topics) unsubscribe(sessionID string, sub *subscriber) {
	sub.once.Do(func() { close(sub.lagged) }) // release a publisher waiting on it
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.subs[sessionID], sub)
	if len(t.subs[sessionID]) == 0 {
		delete(t.subs, sessionID)
	}
}

// subscribers returns the session's subscribers now, so that they are
// handed events without t's lock held.
func (t *topics) subscribers(sessionID string) []*subscriber {
	t.mu.Lock()
	defer t.mu.Unlock()
	subs := make([]*subscriber, 0, len(t.subs[sessionID]))
	for sub := range t.subs[sessionID] {
		subs = append(subs, sub)
	}
	return subs
}

// lagGrace is how long publish waits for a full follower before it drops
// it; the dropped follower resumes from the store.
const lagGrace = 100 * time.Millisecond

// publish hands events to every follower of the session. A follower whose
// buffer stays full for lagGrace is dropped (its lagged channel closes).
func (t *topics) publish(sessionID string, events ...api.Event) {
	subs := t.subscribers(sessionID)
	for _, sub := range subs {
		for _, ev := range events {
			if !sub.offer(ev) {
				break
			}
		}
	}
}

// pokeAll is the seq of a poke that asks to replay the whole stored
// transcript.
const pokeAll = math.MaxInt64

// poke tells the session's subscribers that its stored transcript goes up
// to seq (pokeAll: unknown, read it all): followers replay the store up to
// there, other subscribers are dropped (see subscriber).
func (t *topics) poke(sessionID string, seq int64) {
	subs := t.subscribers(sessionID)
	for _, sub := range subs {
		sub.poke(seq)
	}
}

// pokeEvery pokes every follower of every session to read the whole
// stored transcript, and with agents drops every other subscriber too:
// changes may have been missed.
func (t *topics) pokeEvery(agents bool) {
	t.mu.Lock()
	var subs []*subscriber
	for _, m := range t.subs {
		for sub := range m {
			if agents || sub.poked != nil {
				subs = append(subs, sub)
			}
		}
	}
	t.mu.Unlock()
	for _, sub := range subs {
		sub.poke(pokeAll)
	}
}

func (sub *subscriber) poke(seq int64) {
	if sub.poked == nil {
		sub.once.Do(func() { close(sub.lagged) })
		return
	}
	for {
		cur := sub.pokeSeq.Load()
		if cur >= seq || sub.pokeSeq.CompareAndSwap(cur, seq) {
			break
		}
	}
	select {
	case sub.poked <- struct{}{}:
	default:
	}
}

// pokedUpTo takes the seq the follower's pokes asked to replay up to.
func (sub *subscriber) pokedUpTo() int64 { return sub.pokeSeq.Swap(0) }

// offer delivers ev, waiting up to lagGrace for room; false when the
// subscriber is, or is now, dropped.
func (sub *subscriber) offer(ev api.Event) bool {
	select {
	case sub.ch <- ev:
		return true
	case <-sub.lagged:
		return false
	default:
	}
	timer := time.NewTimer(lagGrace)
	defer timer.Stop()
	select {
	case sub.ch <- ev:
		return true
	case <-sub.lagged:
	case <-timer.C:
		sub.once.Do(func() { close(sub.lagged) })
	}
	return false
}
