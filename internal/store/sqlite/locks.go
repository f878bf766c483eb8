package sqlite

import (
	"context"
	"fmt"
	"sync"
)

// namedLocks are Lock's locks: one server owns an SQLite database, so they
// live in its memory and cost no database work. A name's state exists only
// while someone holds or waits for it. The zero value is ready to use.
type namedLocks struct {
	mu sync.Mutex
	// m holds the names in use; guarded by mu, as is every field of their
	// namedLock.
	m map[string]*namedLock
}

// namedLock is the state of one name.
type namedLock struct {
	readers int  // shared holders
	writer  bool // an exclusive holder
	// writersWaiting counts exclusive waiters: while there are any, new
	// shared requests wait too, so a stream of them cannot starve one.
	writersWaiting int
	// refs counts holders and waiters; at 0 the name is dropped.
	refs int
	// wake, made by the first waiter, is closed (and forgotten) whenever
	// the lock is released or a waiter gives up.
	wake chan struct{}
}

// Lock takes name's lock, shared or exclusive, waiting until it is held
// or ctx ends.
func (s *Store) Lock(ctx context.Context, name string, shared bool) (func(), error) {
	return s.locks.lock(ctx, name, shared)
}

func (l *namedLocks) lock(ctx context.Context, name string, shared bool) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: lock %s: %w", name, err)
	}
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*namedLock{}
	}
	n := l.m[name]
	if n == nil {
		n = &namedLock{}
		l.m[name] = n
	}
	n.refs++
	waiting := false
	for {
		if shared && !n.writer && n.writersWaiting == 0 {
			n.readers++
			break
		}
		if !shared && !n.writer && n.readers == 0 {
			n.writer = true
			break
		}
		if !shared && !waiting {
			waiting = true
			n.writersWaiting++
		}
		if n.wake == nil {
			n.wake = make(chan struct{})
		}
		wake := n.wake
		l.mu.Unlock()
		select {
		case <-wake:
			l.mu.Lock()
		case <-ctx.Done():
			l.mu.Lock()
			if waiting {
				n.writersWaiting--
			}
			l.wakeLocked(name, n)
			l.mu.Unlock()
			return nil, fmt.Errorf("sqlite: lock %s: %w", name, ctx.Err())
		}
	}
	if waiting {
		n.writersWaiting--
	}
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			if shared {
				n.readers--
			} else {
				n.writer = false
			}
			l.wakeLocked(name, n)
			l.mu.Unlock()
		})
	}, nil
}

// wakeLocked drops one reference to n, wakes its waiters and forgets the
// name when nobody holds or waits for it. The caller holds mu.
func (l *namedLocks) wakeLocked(name string, n *namedLock) {
	n.refs--
	if n.refs == 0 {
		delete(l.m, name)
		return
	}
	if n.wake != nil {
		close(n.wake)
		n.wake = nil
	}
}
