package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// ClaimNext, the server-assigned claim.

// claimNextIDs claims with ClaimNext until none is left and returns the
// ids in the order they came.
func claimNextIDs(t *testing.T, s store.Store, outpost string, f store.NextFilter) []string {
	t.Helper()
	var out []string
	for range 100 {
		m, err := s.ClaimNext(ctx(t), outpost, base, "", f, func(_ store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
			claim("acc", at(time.Hour))(&e)
			return store.Mutation{Entry: &e}, nil
		})
		if errors.Is(err, store.ErrNotFound) {
			return out
		}
		must(t, "ClaimNext", err)
		out = append(out, m.Entry.SessionID)
	}
	t.Fatal("ClaimNext never ran out")
	return nil
}

// testClaimNext checks what ClaimNext picks: an outpost's pending live
// entries in claim order (priority, then created_at), neither claimed,
// deleted, suspended nor terminated, nor another outpost's; the platform
// filter keeps unpinned entries; Exclude skips; an entry with a network
// policy only when Restricted; fn's error comes back as
// is and leaves the entry alone; ErrNotFound when none is left.
func testClaimNext(t *testing.T, s store.Store) {
	must(t, "create outpost", s.CreateOutpost(ctx(t), newOutpost("op", "o")))
	must(t, "create other outpost", s.CreateOutpost(ctx(t), newOutpost("op2", "o2")))
	for i, p := range []int{0, 5, -1, 5, 0, 9, 0, 0, 0, 0} {
		sess := newSession(fmt.Sprintf("s%d", i), "op", "t", time.Duration(i)*time.Second)
		e := newEntry(sess)
		e.Priority = p
		must(t, "create "+sess.ID, s.CreateSession(ctx(t), sess, e, nil))
	}
	create(t, s, newSession("x", "op2", "t", 0))
	setEntry(t, s, "s6", claim("other", at(time.Hour)))
	setEntry(t, s, "s7", func(e *store.QueueEntry) { e.Deleted = true })
	setEntry(t, s, "s8", func(e *store.QueueEntry) { e.SessionStatus = api.QueueSessionSuspended })
	setEntry(t, s, "s9", func(e *store.QueueEntry) { e.SessionStatus = api.QueueSessionTerminated })
	setEntry(t, s, "s4", func(e *store.QueueEntry) { e.Platform = api.PlatformMacOS })
	setEntry(t, s, "s0", func(e *store.QueueEntry) { e.Platform = "" }) // pins none
	setEntry(t, s, "s3", func(e *store.QueueEntry) {
		e.NetworkPolicy = &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "a.example.test"}}}
	})

	// fn's error: returned as is, nothing written.
	errNo := errors.New("not now")
	_, err := s.ClaimNext(ctx(t), "op", base, "", store.NextFilter{}, func(_ store.Session, e store.QueueEntry, l store.OutpostLoad) (store.Mutation, error) {
		if e.SessionID != "s5" {
			t.Errorf("first pick = %s, want s5 (priority 9)", e.SessionID)
		}
		return store.Mutation{}, errNo
	})
	if !errors.Is(err, errNo) {
		t.Fatalf("ClaimNext with a failing fn = %v, want fn's error", err)
	}

	equal(t, "claim order, linux, s1 excluded, unrestricted only", claimNextIDs(t, s, "op", store.NextFilter{Platform: api.PlatformLinux, Exclude: []string{"s1"}}),
		[]string{"s5", "s0", "s2"})
	equal(t, "what is left, any platform, restricted too", claimNextIDs(t, s, "op", store.NextFilter{Restricted: true}), []string{"s1", "s3", "s4"})
	equal(t, "the other outpost", claimNextIDs(t, s, "op2", store.NextFilter{}), []string{"x"})
	_, err = s.ClaimNext(ctx(t), "nope", base, "", store.NextFilter{}, func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error) {
		t.Error("fn ran with nothing to claim")
		return store.Mutation{}, nil
	})
	wantErr(t, "ClaimNext of an outpost without entries", err, store.ErrNotFound)
}

// testClaimNextConcurrent has 20 goroutines ClaimNext 100 entries of an
// outpost with a high max_running: each entry is claimed exactly once, and
// fn sees the load ClaimSession would. fn may see an entry another claim
// took after the pick's snapshot (PostgreSQL): it refuses and picks again.
func testClaimNextConcurrent(t *testing.T, s store.Store) {
	o := newOutpost("op", "o")
	o.MaxRunning = 1000
	must(t, "create outpost", s.CreateOutpost(ctx(t), o))
	const n, claimers = 100, 20
	for i := range n {
		create(t, s, newSession(fmt.Sprintf("s%03d", i), "op", "t", time.Duration(i)*time.Millisecond))
	}
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for g := range claimers {
		wg.Go(func() {
			for {
				m, err := s.ClaimNext(ctx(t), "op", base, "", store.NextFilter{}, func(_ store.Session, e store.QueueEntry, l store.OutpostLoad) (store.Mutation, error) {
					if e.Phase != api.PhasePending {
						return store.Mutation{}, errTaken
					}
					if l.MaxRunning != 1000 {
						return store.Mutation{}, fmt.Errorf("load %+v, want MaxRunning 1000", l)
					}
					claim(fmt.Sprintf("acc-%d", g), at(time.Hour))(&e)
					return store.Mutation{Entry: &e}, nil
				})
				if errors.Is(err, store.ErrNotFound) {
					return
				}
				if errors.Is(err, errTaken) {
					// PostgreSQL: the pick's snapshot predates another
					// claim's commit; fn saw it taken. Pick again.
					continue
				}
				if err != nil {
					t.Errorf("ClaimNext: %v", err)
					return
				}
				mu.Lock()
				got[m.Entry.SessionID]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(got) != n {
		t.Errorf("%d entries claimed, want %d", len(got), n)
	}
	for id, k := range got {
		if k != 1 {
			t.Errorf("%s claimed %d times", id, k)
		}
	}
}
