package gateway

import "sync"

// Notifier wakes every waiter when something changed. Waiters re-read what
// they watch, so a missed wake-up cannot lose a change.
type Notifier struct {
	mu sync.Mutex // guards ch
	ch chan struct{}
}

// NewNotifier returns a notifier with no waiters.
func NewNotifier() *Notifier { return &Notifier{ch: make(chan struct{})} }

// Wait returns a channel closed at the next Notify.
func (n *Notifier) Wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ch
}

// Notify wakes every current waiter.
func (n *Notifier) Notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.ch)
	n.ch = make(chan struct{})
}
