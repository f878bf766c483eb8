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

// testOutpostLimits checks an outpost's max_running, max_attempts and
// max_snapshot_bytes: written by CreateOutpost, changed by
// SetOutpostLimits. A snapshot limit past 32 bits round-trips.
func testOutpostLimits(t *testing.T, s store.Store) {
	o := newOutpost("op-lim", "limited")
	o.MaxRunning, o.MaxAttempts, o.MaxSnapshotBytes = 3, 5, 20<<30
	must(t, "create outpost", s.CreateOutpost(ctx(t), o))
	got, err := s.GetOutpost(ctx(t), "limited")
	must(t, "get outpost", err)
	equal(t, "outpost", got, o)
	must(t, "set limits", s.SetOutpostLimits(ctx(t), o.ID, store.OutpostLimits{MaxRunning: 7, MaxAttempts: 0, MaxSnapshotBytes: 1 << 20}))
	o.MaxRunning, o.MaxAttempts, o.MaxSnapshotBytes = 7, 0, 1<<20
	all, err := s.ListOutposts(ctx(t))
	must(t, "list outposts", err)
	equal(t, "listed outposts", all, []store.Outpost{o})
	must(t, "clear the snapshot limit", s.SetOutpostLimits(ctx(t), o.ID, store.OutpostLimits{MaxRunning: 7}))
	got, err = s.GetOutpost(ctx(t), o.ID)
	must(t, "get outpost by id", err)
	o.MaxSnapshotBytes = 0
	equal(t, "outpost with the server's snapshot limit", got, o)
	wantErr(t, "set limits of a missing outpost", s.SetOutpostLimits(ctx(t), "nope", store.OutpostLimits{}), store.ErrNotFound)
}

// testQueuePriority checks the claim order: ListQueue with ByPriority
// orders by priority, highest first, then by creation; without it, by rev.
// Priority, attempts and their reasons round-trip.
func testQueuePriority(t *testing.T, s store.Store) {
	must(t, "create outpost", s.CreateOutpost(ctx(t), newOutpost("op", "o")))
	for i, p := range []int{0, 5, -1, 5, 0, 9} {
		sess := newSession(fmt.Sprintf("s%d", i), "op", "t", time.Duration(i)*time.Second)
		e := newEntry(sess)
		e.Priority, e.MaxAttempts = p, 3
		must(t, "create "+sess.ID, s.CreateSession(ctx(t), sess, e, nil))
	}
	// A change later in the rev order does not move an entry in the
	// claim order.
	setEntry(t, s, "s0", func(e *store.QueueEntry) {
		e.Attempts, e.AttemptReasons = 1, []string{"The machine died."}
		e.UpdatedAt = at(time.Minute)
	})
	ids := func(f store.QueueFilter) []string {
		t.Helper()
		rows, _, err := s.ListQueue(ctx(t), f)
		must(t, "list queue", err)
		var out []string
		for _, e := range rows {
			out = append(out, e.SessionID)
		}
		return out
	}
	equal(t, "claim order", ids(store.QueueFilter{OutpostID: "op", Phase: api.PhasePending, ByPriority: true}),
		[]string{"s5", "s1", "s3", "s0", "s4", "s2"})
	equal(t, "claim order, first 2", ids(store.QueueFilter{OutpostID: "op", ByPriority: true, Limit: 2}), []string{"s5", "s1"})
	equal(t, "rev order", ids(store.QueueFilter{OutpostID: "op"}), []string{"s1", "s2", "s3", "s4", "s5", "s0"})
	e, err := s.GetQueueEntry(ctx(t), "s0")
	must(t, "get s0", err)
	if e.Priority != 0 || e.Attempts != 1 || e.MaxAttempts != 3 || len(e.AttemptReasons) != 1 || e.AttemptReasons[0] != "The machine died." {
		t.Errorf("s0 = priority %d attempts %d/%d reasons %q; want 0, 1/3, [The machine died.]", e.Priority, e.Attempts, e.MaxAttempts, e.AttemptReasons)
	}
	e, err = s.GetQueueEntry(ctx(t), "s5")
	must(t, "get s5", err)
	if e.Priority != 9 || e.Attempts != 0 || e.AttemptReasons != nil {
		t.Errorf("s5 = priority %d attempts %d reasons %q; want 9, 0, none", e.Priority, e.Attempts, e.AttemptReasons)
	}
}

// testClaimLoad checks what ClaimSession tells fn: the outpost's
// max_running and its other held claims (lapsed ones, tombstones and other
// outposts' not counted).
func testClaimLoad(t *testing.T, s store.Store) {
	o := newOutpost("op", "o")
	o.MaxRunning = 2
	must(t, "create outpost", s.CreateOutpost(ctx(t), o))
	must(t, "create other outpost", s.CreateOutpost(ctx(t), newOutpost("op2", "o2")))
	for i := range 5 {
		create(t, s, newSession(fmt.Sprintf("s%d", i), "op", "t", time.Duration(i)*time.Second))
	}
	create(t, s, newSession("x", "op2", "t", 0))
	setEntry(t, s, "s0", claim("a", at(time.Hour)))    // held
	setEntry(t, s, "s1", claim("b", at(-time.Minute))) // lapsed
	setEntry(t, s, "s2", func(e *store.QueueEntry) {   // a tombstone
		claim("c", at(time.Hour))(e)
		e.Deleted = true
	})
	setEntry(t, s, "x", claim("d", at(time.Hour))) // another outpost
	load := func(id string) store.OutpostLoad {
		t.Helper()
		var got store.OutpostLoad
		_, err := s.ClaimSession(ctx(t), id, base, "", func(_ store.Session, _ store.QueueEntry, l store.OutpostLoad) (store.Mutation, error) {
			got = l
			return store.Mutation{}, nil
		})
		must(t, "ClaimSession "+id, err)
		return got
	}
	equal(t, "load seen claiming s3", load("s3"), store.OutpostLoad{MaxRunning: 2, Held: 1})
	equal(t, "load seen renewing s0 (itself not counted)", load("s0"), store.OutpostLoad{MaxRunning: 2, Held: 0})
	equal(t, "load on an outpost without a cap", load("x"), store.OutpostLoad{})
	_, err := s.ClaimSession(ctx(t), "nope", base, "", func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error) {
		return store.Mutation{}, nil
	})
	wantErr(t, "ClaimSession of a missing session", err, store.ErrNotFound)
}

// testConcurrentCapacity races 50 claims of 50 entries of an outpost with
// max_running 3: exactly 3 win.
func testConcurrentCapacity(t *testing.T, s store.Store) {
	o := newOutpost("op", "o")
	o.MaxRunning = 3
	must(t, "create outpost", s.CreateOutpost(ctx(t), o))
	const n = 50
	for i := range n {
		create(t, s, newSession(fmt.Sprintf("s%d", i), "op", "t", time.Duration(i)*time.Millisecond))
	}
	errFull := errors.New("at capacity")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.ClaimSession(ctx(t), fmt.Sprintf("s%d", i), base, "", func(_ store.Session, e store.QueueEntry, l store.OutpostLoad) (store.Mutation, error) {
				if e.Phase != api.PhasePending {
					return store.Mutation{}, errTaken
				}
				if l.MaxRunning > 0 && l.Held >= l.MaxRunning {
					return store.Mutation{}, errFull
				}
				claim(fmt.Sprintf("acc-%d", i), at(time.Hour))(&e)
				return store.Mutation{Entry: &e}, nil
			})
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, errFull):
			t.Errorf("claim %d: %v", i, err)
		}
	}
	if won != 3 {
		t.Errorf("%d claims won, want exactly 3 (max_running)", won)
	}
	c, err := s.OutpostCounts(ctx(t), "op", base)
	must(t, "outpost counts", err)
	equal(t, "pending and held", [2]int{c.Pending, c.Held}, [2]int{n - 3, 3})
}

// testOutpostCounts checks OutpostCounts: pending entries (not those of
// ended sessions) and when the oldest entered the queue, held claims, and
// running and suspended sessions, and the bytes of their snapshots.
func testOutpostCounts(t *testing.T, s store.Store) {
	must(t, "create outpost", s.CreateOutpost(ctx(t), newOutpost("op", "o")))
	for i, status := range []string{api.StatusRunning, api.StatusRunning, api.StatusSuspended, api.StatusNew, api.StatusError} {
		sess := newSession(fmt.Sprintf("s%d", i), "op", "t", time.Duration(i)*time.Second)
		sess.Status = status
		create(t, s, sess)
	}
	setEntry(t, s, "s0", claim("a", at(time.Hour)))
	setEntry(t, s, "s1", claim("b", at(-time.Hour))) // lapsed: not held
	// An ended session's entry kept listed is not pending, however old.
	ended := newSession("s5", "op", "t", -time.Second)
	ended.Status = api.StatusExit
	create(t, s, ended)
	setEntry(t, s, "s5", func(e *store.QueueEntry) { e.SessionStatus = api.QueueSessionTerminated })
	// Snapshot bytes: the sum over the outpost's sessions, another
	// outpost's not counted, a replaced snapshot counted once.
	must(t, "create outpost", s.CreateOutpost(ctx(t), newOutpost("other", "x")))
	create(t, s, newSession("x0", "other", "t", 0))
	for _, sn := range []store.Snapshot{
		{SessionID: "s2", BlobKey: "k1", Size: 100, SHA256: "a", CreatedAt: base},
		{SessionID: "s2", BlobKey: "k2", Size: 150, SHA256: "b", CreatedAt: base},
		{SessionID: "s0", BlobKey: "k3", Size: 7, SHA256: "c", CreatedAt: base},
		{SessionID: "x0", BlobKey: "k4", Size: 1000, SHA256: "d", CreatedAt: base},
	} {
		if _, err := s.PutSnapshot(ctx(t), sn); err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("put snapshot: %v", err)
		}
	}
	c, err := s.OutpostCounts(ctx(t), "op", base)
	must(t, "outpost counts", err)
	equal(t, "counts", c, store.OutpostCounts{Pending: 3, OldestPending: at(2 * time.Second), Held: 1, Running: 2, Suspended: 1, SnapshotBytes: 157})
	must(t, "delete snapshot", s.DeleteSnapshot(ctx(t), "s2", "k2"))
	c, err = s.OutpostCounts(ctx(t), "op", base)
	must(t, "outpost counts", err)
	if c.SnapshotBytes != 7 {
		t.Fatalf("snapshot bytes after a delete = %d, want 7", c.SnapshotBytes)
	}
}
