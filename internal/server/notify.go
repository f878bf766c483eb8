package server

import (
	"sync"

	"github.com/outpost-sh/outpost/internal/api"
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
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.subs[sessionID], sub)
	if len(t.subs[sessionID]) == 0 {
		delete(t.subs, sessionID)
	}
}

// publish hands events to every follower of the session without blocking.
func (t *topics) publish(sessionID string, events ...api.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for sub := range t.subs[sessionID] {
		for _, ev := range events {
			select {
			case sub.ch <- ev:
			default:
				sub.once.Do(func() { close(sub.lagged) })
			}
		}
	}
}
