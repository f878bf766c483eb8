package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// testTombstoneEnded: TombstoneEnded turns the listed entries of ended
// sessions (pending, live, terminated) last written before its time into
// tombstones, oldest first and at most its limit, each under a new rev in
// that order and written at its now; claimable, suspended, claimed,
// deleted and newer entries stay as they were. ClaimNext never picks an
// ended entry, and the tombstones then prune as any other.
func testTombstoneEnded(t *testing.T, s store.Store) {
	must(t, "create outpost", s.CreateOutpost(ctx(t), newOutpost("A", "a")))
	must(t, "create outpost", s.CreateOutpost(ctx(t), newOutpost("B", "b")))
	write := func(id, status string, change func(e *store.QueueEntry)) store.QueueEntry {
		t.Helper()
		m, err := s.UpdateSession(ctx(t), id, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
			sess.Status = status
			change(&e)
			return store.Mutation{Session: &sess, Entry: &e}, nil
		})
		must(t, "write "+id, err)
		return *m.Entry
	}
	ended := func(updated time.Duration) func(e *store.QueueEntry) {
		return func(e *store.QueueEntry) {
			e.SessionStatus, e.UpdatedAt = api.QueueSessionTerminated, at(updated)
		}
	}
	for _, id := range []string{"old1", "old2", "fresh", "claimable", "asleep", "held", "gone"} {
		create(t, s, newSession(id, "A", id, 0))
	}
	create(t, s, newSession("old3", "B", "old3", 0))
	// In rev order: old2 (ended at 2s), old1 (at 1s), old3 (another
	// outpost, at 3s), fresh (at 1h, past the cutoff).
	write("old2", api.StatusExit, ended(2*time.Second))
	write("old1", api.StatusError, ended(time.Second))
	write("old3", api.StatusExit, ended(3*time.Second))
	write("fresh", api.StatusExit, ended(time.Hour))
	keep := map[string]store.QueueEntry{
		"claimable": write("claimable", api.StatusNew, func(e *store.QueueEntry) { e.UpdatedAt = at(time.Second) }),
		"asleep": write("asleep", api.StatusSuspended, func(e *store.QueueEntry) {
			e.Kind, e.SessionStatus, e.UpdatedAt = api.KindResume, api.QueueSessionSuspended, at(time.Second)
		}),
		// Ended but not yet released by its holder.
		"held": write("held", api.StatusExit, func(e *store.QueueEntry) {
			claim("acc", at(time.Hour))(e)
			ended(time.Second)(e)
		}),
		"gone": write("gone", api.StatusExit, func(e *store.QueueEntry) {
			ended(time.Second)(e)
			e.Deleted = true
		}),
	}
	keep["fresh"], _ = s.GetQueueEntry(ctx(t), "fresh")

	// ClaimNext passes over every ended entry to the claimable one.
	_, err := s.ClaimNext(ctx(t), "A", base, "", store.NextFilter{}, func(_ store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
		if e.SessionID != "claimable" {
			t.Errorf("ClaimNext of A picked %s (%s), want claimable", e.SessionID, e.SessionStatus)
		}
		return store.Mutation{}, nil
	})
	must(t, "ClaimNext", err)
	if _, err := s.ClaimNext(ctx(t), "B", base, "", store.NextFilter{}, func(_ store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
		t.Errorf("ClaimNext of B picked %s (%s), an ended entry", e.SessionID, e.SessionStatus)
		return store.Mutation{}, nil
	}); err == nil {
		t.Error("ClaimNext of B, which holds only an ended entry, found one")
	}

	maxRev, err := s.MaxRev(ctx(t))
	must(t, "MaxRev", err)
	now := at(2 * time.Hour)
	got, err := s.TombstoneEnded(ctx(t), at(time.Minute), now, 2)
	must(t, "TombstoneEnded", err)
	ids := func(es []store.QueueEntry) []string {
		out := []string{}
		for _, e := range es {
			out = append(out, e.SessionID)
		}
		return out
	}
	equal(t, "first sweep (limit 2)", ids(got), []string{"old1", "old2"})
	for i, e := range got {
		if !e.Deleted || !e.UpdatedAt.Equal(now) || e.Rev != maxRev+int64(i)+1 || e.SessionStatus != api.QueueSessionTerminated {
			t.Errorf("swept entry %d = %+v, want a tombstone written at %v under rev %d", i, e, now, maxRev+int64(i)+1)
		}
		stored, err := s.GetQueueEntry(ctx(t), e.SessionID)
		must(t, "GetQueueEntry", err)
		equal(t, "stored "+e.SessionID, stored, e)
	}
	// Watchers replaying from before the sweep hear of both deletions.
	replay, _, err := s.ListQueue(ctx(t), store.QueueFilter{AfterRev: maxRev, IncludeDeleted: true})
	must(t, "ListQueue", err)
	equal(t, "replay after the sweep", ids(replay), []string{"old1", "old2"})
	live, total, err := s.ListQueue(ctx(t), store.QueueFilter{OutpostID: "A", Phase: api.PhasePending})
	must(t, "ListQueue", err)
	equal(t, "pending entries of A after the sweep", ids(live), []string{"fresh", "claimable", "asleep"})
	if total != 3 {
		t.Errorf("total of A's pending entries = %d, want 3", total)
	}

	got, err = s.TombstoneEnded(ctx(t), at(time.Minute), now, 10)
	must(t, "second TombstoneEnded", err)
	equal(t, "second sweep", ids(got), []string{"old3"})
	got, err = s.TombstoneEnded(ctx(t), at(time.Minute), now, 10)
	must(t, "third TombstoneEnded", err)
	equal(t, "third sweep", ids(got), []string{})
	for id, want := range keep {
		e, err := s.GetQueueEntry(ctx(t), id)
		must(t, "GetQueueEntry "+id, err)
		equal(t, id+" after the sweeps", e, want)
	}

	// The tombstones prune as any other once old enough.
	n, err := s.PruneQueue(ctx(t), now.Add(time.Millisecond), 100)
	must(t, "PruneQueue", err)
	if n != 4 { // old1, old2, old3 and gone
		t.Errorf("PruneQueue = %d, want 4", n)
	}
	for _, id := range []string{"old1", "old2", "old3"} {
		_, err := s.GetQueueEntry(ctx(t), id)
		wantErr(t, "GetQueueEntry "+id+" after the prune", err, store.ErrNotFound)
	}
}

// testTombstoneEndedConcurrent: sweeps running at once, as on several
// servers sharing a database, delete each ended entry exactly once, each
// under a rev of its own, and leave none behind.
func testTombstoneEndedConcurrent(t *testing.T, s store.Store) {
	must(t, "create outpost", s.CreateOutpost(ctx(t), newOutpost("A", "a")))
	const n, sweepers = 40, 4
	for i := range n {
		id := fmt.Sprintf("s%02d", i)
		create(t, s, newSession(id, "A", id, 0))
		setEntry(t, s, id, func(e *store.QueueEntry) {
			e.SessionStatus, e.UpdatedAt = api.QueueSessionTerminated, at(time.Duration(i)*time.Millisecond)
		})
	}
	var mu sync.Mutex
	swept := map[string]int{}
	revs := map[int64]bool{}
	var wg sync.WaitGroup
	for range sweepers {
		wg.Go(func() {
			for range n {
				got, err := s.TombstoneEnded(ctx(t), at(time.Minute), at(time.Hour), 3)
				if err != nil {
					t.Errorf("TombstoneEnded: %v", err)
					return
				}
				mu.Lock()
				for _, e := range got {
					swept[e.SessionID]++
					if revs[e.Rev] {
						t.Errorf("rev %d given twice", e.Rev)
					}
					revs[e.Rev] = true
				}
				mu.Unlock()
				if len(got) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	// A sweep that found the rest locked by another may have stopped
	// early; one more finds whatever is left.
	got, err := s.TombstoneEnded(ctx(t), at(time.Minute), at(time.Hour), n)
	must(t, "last TombstoneEnded", err)
	for _, e := range got {
		swept[e.SessionID]++
	}
	for i := range n {
		id := fmt.Sprintf("s%02d", i)
		if swept[id] != 1 {
			t.Errorf("%s swept %d times, want once", id, swept[id])
		}
	}
}
