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

var errTaken = errors.New("already claimed")

// testConcurrentClaim races 50 compare-and-swap claims of one entry.
func testConcurrentClaim(t *testing.T, s store.Store) {
	create(t, s, newSession("s1", "op", "t", 0))
	const n = 50
	errs := make([]error, n)
	revs := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			m, err := s.UpdateSession(ctx(t), "s1", func(_ store.Session, e store.QueueEntry) (store.Mutation, error) {
				if e.Phase != api.PhasePending {
					return store.Mutation{}, errTaken
				}
				claim(fmt.Sprintf("acc-%d", i), at(time.Minute))(&e)
				return store.Mutation{Entry: &e, Events: []api.Event{{Type: api.EventClaim, AcceptorID: e.AcceptorID}}}, nil
			})
			errs[i] = err
			if err == nil {
				revs[i] = m.Entry.Rev
			}
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("claims %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, errTaken):
			t.Errorf("claim %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no claim won")
	}
	e, err := s.GetQueueEntry(ctx(t), "s1")
	must(t, "get entry", err)
	if e.AcceptorID != fmt.Sprintf("acc-%d", winner) || e.Epoch != 1 || e.Rev != revs[winner] {
		t.Errorf("entry after race: acceptor %q epoch %d rev %d; want acc-%d, 1, %d", e.AcceptorID, e.Epoch, e.Rev, winner, revs[winner])
	}
	evs, err := s.ListEvents(ctx(t), "s1", 0, 0)
	must(t, "events", err)
	if len(evs) != 1 {
		t.Errorf("%d claim events stored, want 1", len(evs))
	}
}

// testConcurrentUpdates checks revs stay unique under concurrent writers.
func testConcurrentUpdates(t *testing.T, s store.Store) {
	const sessions, writers, each = 5, 50, 4
	for i := range sessions {
		create(t, s, newSession(fmt.Sprint("s", i), "op", "t", 0))
	}
	revs := make(chan int64, writers*each)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for j := range each {
				id := fmt.Sprint("s", (w+j)%sessions)
				m, err := s.UpdateSession(ctx(t), id, func(_ store.Session, e store.QueueEntry) (store.Mutation, error) {
					e.Epoch++
					return store.Mutation{Entry: &e}, nil
				})
				if err != nil {
					t.Errorf("update %s: %v", id, err)
					return
				}
				revs <- m.Entry.Rev
			}
		})
	}
	wg.Wait()
	close(revs)
	seen := map[int64]bool{}
	var top int64
	for r := range revs {
		if seen[r] {
			t.Errorf("rev %d assigned twice", r)
		}
		seen[r] = true
		top = max(top, r)
	}
	rev, err := s.MaxRev(ctx(t))
	must(t, "max rev", err)
	if rev != top {
		t.Errorf("MaxRev = %d, want %d", rev, top)
	}
	var epochs int64
	for i := range sessions {
		e, err := s.GetQueueEntry(ctx(t), fmt.Sprint("s", i))
		must(t, "get entry", err)
		epochs += e.Epoch
	}
	if epochs != writers*each {
		t.Errorf("epochs sum to %d, want %d: an update was lost", epochs, writers*each)
	}
}

// testConcurrentAppendEvents checks seqs stay dense and unique.
func testConcurrentAppendEvents(t *testing.T, s store.Store) {
	create(t, s, newSession("s1", "op", "t", 0))
	const writers = 20
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			evs := []api.Event{{Time: int64(i), Type: api.EventOutput}, {Time: int64(i), Type: api.EventOutput}}
			if err := s.AppendEvents(ctx(t), "s1", evs); err != nil {
				t.Errorf("append: %v", err)
			} else if evs[1].Seq != evs[0].Seq+1 {
				t.Errorf("one append got seqs %d and %d", evs[0].Seq, evs[1].Seq)
			}
		})
	}
	wg.Wait()
	evs, err := s.ListEvents(ctx(t), "s1", 0, 0)
	must(t, "list", err)
	if len(evs) != 2*writers {
		t.Fatalf("%d events stored, want %d", len(evs), 2*writers)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
		if i%2 == 1 && ev.Time != evs[i-1].Time {
			t.Errorf("events of one append interleaved at seq %d", ev.Seq)
		}
	}
}

// testConcurrentMixedAppends races updates that append events, updates
// that only move the entry (which a store may let skip reading the
// transcript's highest seq) and plain appends on one session: every event
// gets its own seq, with none skipped, and each call's events are
// consecutive.
func testConcurrentMixedAppends(t *testing.T, s store.Store) {
	create(t, s, newSession("s1", "op", "t", 0))
	const writers, each = 12, 5
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			for j := range each {
				evs := []api.Event{{Time: int64(i*each + j), Type: api.EventOutput}, {Time: int64(i*each + j), Type: api.EventOutput}}
				var err error
				switch i % 3 {
				case 0:
					err = s.AppendEvents(ctx(t), "s1", evs)
				case 1:
					var m store.Mutation
					m, err = s.UpdateSession(ctx(t), "s1", func(_ store.Session, e store.QueueEntry) (store.Mutation, error) {
						e.Epoch++
						return store.Mutation{Entry: &e, Events: evs}, nil
					})
					evs = m.Events
				default:
					_, err = s.UpdateSession(ctx(t), "s1", func(_ store.Session, e store.QueueEntry) (store.Mutation, error) {
						e.Epoch++
						return store.Mutation{Entry: &e}, nil
					})
					evs = nil
				}
				if err != nil {
					t.Errorf("writer %d: %v", i, err)
					return
				}
				if len(evs) == 2 && evs[1].Seq != evs[0].Seq+1 {
					t.Errorf("writer %d: one call got seqs %d and %d", i, evs[0].Seq, evs[1].Seq)
				}
			}
		})
	}
	wg.Wait()
	evs, err := s.ListEvents(ctx(t), "s1", 0, 0)
	must(t, "list", err)
	// Writers 0, 3, 6, 9 append and 1, 4, 7, 10 update with events, two
	// events a call.
	if want := 2 * 2 * (writers / 3) * each; len(evs) != want {
		t.Fatalf("%d events stored, want %d", len(evs), want)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
		if i%2 == 1 && ev.Time != evs[i-1].Time {
			t.Errorf("events of one call interleaved at seq %d", ev.Seq)
		}
	}
	e, err := s.GetQueueEntry(ctx(t), "s1")
	must(t, "get entry", err)
	if want := int64(2 * (writers / 3) * each); e.Epoch != want {
		t.Errorf("epoch %d, want %d: an update was lost", e.Epoch, want)
	}
}
