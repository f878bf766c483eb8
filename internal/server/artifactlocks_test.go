package server

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestArtifactLocksShrink(t *testing.T) {
	t.Parallel()
	var s Server
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				mu := s.artifactLock(fmt.Sprintf("session-%d-%d", g, i%50))
				mu.Lock()
				mu.Unlock() //nolint:staticcheck // an empty critical section is the point
			}
		}()
	}
	wg.Wait()
	if n := s.artifactLocks.len(); n != 0 {
		t.Fatalf("after every lock was released the map holds %d keys, want 0", n)
	}
}

func TestArtifactLockSerializesOneSession(t *testing.T) {
	t.Parallel()
	var s Server
	a := s.artifactLock("s1")
	a.Lock()

	// Another session's lock is free meanwhile.
	other := s.artifactLock("s2")
	other.Lock()
	other.Unlock()

	entered := make(chan struct{})
	released := make(chan struct{})
	go func() {
		b := s.artifactLock("s1")
		b.Lock()
		close(entered)
		<-released
		b.Unlock()
	}()
	// Once the second writer counts as waiting it is blocked on the mutex
	// the first one holds.
	waitFor(t, "the second writer to wait", func() bool {
		s.artifactLocks.mu.Lock()
		defer s.artifactLocks.mu.Unlock()
		km := s.artifactLocks.m["s1"]
		return km != nil && km.refs == 2
	})
	select {
	case <-entered:
		t.Fatal("the second writer of a session got its lock while the first held it")
	default:
	}
	a.Unlock()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the second writer did not get the lock once the first released it")
	}
	// The waiter's hold keeps the key's mutex.
	if n := s.artifactLocks.len(); n != 1 {
		t.Fatalf("while one writer holds the lock the map holds %d keys, want 1", n)
	}
	close(released)
	waitFor(t, "the map to empty", func() bool { return s.artifactLocks.len() == 0 })
}

func TestArtifactLockCounts(t *testing.T) {
	t.Parallel()
	var s Server
	// A plain counter: the race detector and the total catch a writer that
	// was not serialized.
	total := 0
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				mu := s.artifactLock("same")
				mu.Lock()
				total++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if total != 16*200 {
		t.Fatalf("total = %d, want %d", total, 16*200)
	}
	if n := s.artifactLocks.len(); n != 0 {
		t.Fatalf("the map holds %d keys, want 0", n)
	}
}
