package server

import (
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// notifier wakes every waiter when something changed. Waiters re-read the
// store, so a missed wake-up cannot lose a change.
type notifier struct {
	mu sync.Mutex // guards ch
	ch chan struct{}
}

func newNotifier() *notifier { return &notifier{ch: make(chan struct{})} }

// wait returns a channel closed at the next notify.
func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ch
}

// notify wakes every current waiter.
func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.ch)
	n.ch = make(chan struct{})
}

// topics fans session events out to live followers.
type topics struct {
	mu   sync.Mutex // guards subs
	subs map[string]map[*subscriber]struct{}
}

// subscriber receives one session's events. When it falls behind by more
// than its buffer it is dropped (lagged closes) and re-reads the store.
type subscriber struct {
	ch     chan api.Event
	lagged chan struct{}
	once   sync.Once
}

func newTopics() *topics { return &topics{subs: map[string]map[*subscriber]struct{}{}} }

func (t *topics) subscribe(sessionID string) *subscriber {
	sub := &subscriber{ch: make(chan api.Event, 512), lagged: make(chan struct{})}
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

// lagGrace is how long publish waits for a full follower before it drops
// it; the dropped follower resumes from the store.
const lagGrace = 100 * time.Millisecond

// publish hands events to every follower of the session. A follower whose
// buffer stays full for lagGrace is dropped (its lagged channel closes).
func (t *topics) publish(sessionID string, events ...api.Event) {
	t.mu.Lock()
	subs := make([]*subscriber, 0, len(t.subs[sessionID]))
	for sub := range t.subs[sessionID] {
		subs = append(subs, sub)
	}
	t.mu.Unlock()
	for _, sub := range subs {
		for _, ev := range events {
			if !sub.offer(ev) {
				break
			}
		}
	}
}

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
