package storetest

import (
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// testPruneQueue: PruneQueue deletes the tombstones of ended sessions
// written before its time, oldest first and up to its limit, and raises
// QueueHorizon to the highest rev it deleted; tombstones of sessions not
// over, newer tombstones and live entries stay.
func testPruneQueue(t *testing.T, s store.Store) {
	end := func(id string, status string, updated time.Duration, deleted bool) store.QueueEntry {
		t.Helper()
		m, err := s.UpdateSession(t.Context(), id, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
			sess.Status = status
			e.Deleted, e.UpdatedAt = deleted, at(updated)
			return store.Mutation{Session: &sess, Entry: &e}, nil
		})
		must(t, "end "+id, err)
		return *m.Entry
	}
	for _, id := range []string{"old1", "old2", "fresh", "paused", "live"} {
		create(t, s, newSession(id, "A", id, 0))
	}
	create(t, s, newSession("otherB", "B", "otherB", 0))
	oldB := end("otherB", api.StatusExit, 3*time.Second, true)
	// In rev order: old2 (tombstone at 2s), old1 (at 1s), fresh (at 1h),
	// paused (not over, at 1s), live (not deleted, ended, at 1s).
	old2 := end("old2", api.StatusExit, 2*time.Second, true)
	old1 := end("old1", api.StatusError, time.Second, true)
	end("fresh", api.StatusExit, time.Hour, true)
	end("paused", api.StatusSuspended, time.Second, true)
	end("live", api.StatusExit, time.Second, false)

	h, err := s.QueueHorizon(ctx(t), "A")
	must(t, "QueueHorizon", err)
	if h != 0 {
		t.Errorf("QueueHorizon before any prune = %d, want 0", h)
	}
	n, err := s.PruneQueue(ctx(t), at(time.Minute), 1)
	must(t, "PruneQueue", err)
	if n != 1 {
		t.Errorf("PruneQueue(limit 1) = %d, want 1", n)
	}
	// The oldest tombstone goes first, though its rev is the higher.
	if _, err := s.GetQueueEntry(ctx(t), "old1"); err == nil {
		t.Error("old1's tombstone is still there after the first prune")
	}
	if _, err := s.GetQueueEntry(ctx(t), "old2"); err != nil {
		t.Errorf("old2 after the first prune: %v", err)
	}
	h, err = s.QueueHorizon(ctx(t), "A")
	must(t, "QueueHorizon", err)
	if h != old1.Rev {
		t.Errorf("QueueHorizon = %d, want old1's rev %d", h, old1.Rev)
	}
	n, err = s.PruneQueue(ctx(t), at(time.Minute), 10)
	must(t, "PruneQueue", err)
	if n != 2 {
		t.Errorf("second PruneQueue = %d, want 2 (old2, otherB)", n)
	}
	for _, id := range []string{"old1", "old2"} {
		_, err := s.GetQueueEntry(ctx(t), id)
		wantErr(t, "GetQueueEntry "+id, err, store.ErrNotFound)
	}
	for _, id := range []string{"fresh", "paused", "live"} {
		if _, err := s.GetQueueEntry(ctx(t), id); err != nil {
			t.Errorf("GetQueueEntry %s after the prunes: %v", id, err)
		}
	}
	// Each outpost has its own horizon; "" asks for the highest.
	for _, tc := range []struct {
		outpost string
		want    int64
	}{{"A", max(old1.Rev, old2.Rev)}, {"B", oldB.Rev}, {"", max(old1.Rev, old2.Rev, oldB.Rev)}, {"C", 0}} {
		h, err := s.QueueHorizon(ctx(t), tc.outpost)
		must(t, "QueueHorizon", err)
		if h != tc.want {
			t.Errorf("QueueHorizon(%q) = %d, want %d", tc.outpost, h, tc.want)
		}
	}
	n, err = s.PruneQueue(ctx(t), at(time.Minute), 10)
	must(t, "PruneQueue", err)
	if n != 0 {
		t.Errorf("third PruneQueue = %d, want 0", n)
	}
	// The session whose tombstone went can still be updated (its entry
	// is gone, as for a session never queued).
	if _, err := s.UpdateSession(ctx(t), "old1", func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if e.OutpostID != "" || e.Rev != 0 {
			t.Errorf("old1's entry after its prune = %+v, want none", e)
		}
		return store.Mutation{}, nil
	}); err != nil {
		t.Errorf("UpdateSession old1 after its prune: %v", err)
	}
}
