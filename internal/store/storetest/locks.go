package storetest

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
)

// lockWait is how long a lock request that must be refused is given.
const lockWait = 100 * time.Millisecond

// lockWithin takes name's lock within lockWait, or reports that it could
// not (a context deadline, which is what the store must return).
func lockWithin(t *testing.T, s store.Store, name string, shared bool) (func(), bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), lockWait)
	defer cancel()
	unlock, err := s.Lock(ctx, name, shared)
	if err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock %s: %v, want nil or a deadline", name, err)
		}
		return nil, false
	}
	t.Cleanup(unlock)
	return unlock, true
}

// mustLock takes name's lock, failing t if it is not granted at once. A
// test that fails holding it releases it before the store is closed.
func mustLock(t *testing.T, s store.Store, name string, shared bool) func() {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	unlock, err := s.Lock(ctx, name, shared)
	if err != nil {
		t.Fatalf("Lock %s (shared %v): %v", name, shared, err)
	}
	t.Cleanup(unlock)
	return unlock
}

// testLocks covers Lock's exclusion: shared holders share, an exclusive
// one excludes both kinds, names are independent, an unlock lets the next
// in, and a wait that gives up leaves nothing behind (a canceled exclusive
// waiter no longer holds off shared requests).
func testLocks(t *testing.T, s store.Store) {
	r1 := mustLock(t, s, "a", true)
	r2 := mustLock(t, s, "a", true)
	if _, ok := lockWithin(t, s, "a", false); ok {
		t.Fatal("exclusive lock granted while two shared ones are held")
	}
	other := mustLock(t, s, "b", false) // another name
	other()
	r1()
	if _, ok := lockWithin(t, s, "a", false); ok {
		t.Fatal("exclusive lock granted while a shared one is held")
	}
	// The canceled exclusive waiters above must be gone: a new shared
	// request is granted while r2 still holds.
	r3 := mustLock(t, s, "a", true)
	r3()
	r2()

	w := mustLock(t, s, "a", false)
	if _, ok := lockWithin(t, s, "a", false); ok {
		t.Fatal("second exclusive lock granted")
	}
	if _, ok := lockWithin(t, s, "a", true); ok {
		t.Fatal("shared lock granted while an exclusive one is held")
	}
	got := make(chan error, 1)
	go func() {
		unlock, err := s.Lock(t.Context(), "a", true)
		if err == nil {
			unlock()
		}
		got <- err
	}()
	w()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiting shared lock after the unlock: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting shared lock was not granted after the exclusive one was released")
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Lock(ctx, "c", false); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock with a canceled context: %v, want context.Canceled", err)
	}
	mustLock(t, s, "c", false)() // nothing left held
}

// testLockCounter has 20 goroutines increment a counter under one
// exclusive lock, reading and writing it in two steps: no increment is lost.
func testLockCounter(t *testing.T, s store.Store) {
	const n, each = 20, 10
	var mu sync.Mutex // only for the race detector: the lock must make it unneeded
	counter := 0
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				unlock, err := s.Lock(t.Context(), "counter", false)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				v := counter
				mu.Unlock()
				runtime.Gosched() // widen the window a lost update needs
				mu.Lock()
				counter = v + 1
				mu.Unlock()
				unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Lock: %v", err)
	}
	if counter != n*each {
		t.Errorf("counter = %d, want %d: the lock let two holders in", counter, n*each)
	}
}
