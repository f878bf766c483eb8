package lifecycle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// The Machine's suspend, resume, keep-alive and sweeps against a real
// SQLite store.

const grace = time.Minute

// connect claims session id for acceptor and does what the gateway's
// hello does: the session runs and its connection holds the claim for a
// grace.
func (r *rig) connect(t *testing.T, id, acceptor string) store.QueueEntry {
	t.Helper()
	if _, err := r.m.Claim(t.Context(), id, acceptor); err != nil {
		t.Fatal(err)
	}
	now := r.clock.Now()
	m, err := r.st.UpdateSession(t.Context(), id, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		sess.Status, sess.StatusDetail, sess.StartedAt, sess.UpdatedAt = api.StatusRunning, api.DetailWorking, &now, now
		e.SessionStatus, e.LiveUntil, e.UpdatedAt = api.QueueSessionRunning, now.Add(grace), now
		return store.Mutation{Session: &sess, Entry: &e}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r.rec.take()
	return *m.Entry
}

func (r *rig) get(t *testing.T, id string) store.Session {
	t.Helper()
	sess, err := r.st.GetSession(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

func withGrace(o *lifecycle.Options) { o.ReconnectGrace = grace }

// TestMachineSuspendAndResume: a running session suspends under its
// claim's epoch and leaves the claimable queue, its holder's release
// costs no attempt, and a resume puts it back as a resume.
func TestMachineSuspendAndResume(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0, 0, withGrace)
	ctx := t.Context()
	r.session(t, "s1")
	e := r.connect(t, "s1", "w1")

	if _, err := r.m.Resume(ctx, "s1", "Resumed by a user."); !errors.Is(err, lifecycle.ErrConflict) {
		t.Fatalf("resume of a running session: %v, want ErrConflict", err)
	}
	// A snapshot taken under an older claim is not the session's state.
	if err := r.m.Suspend(ctx, "s1", e.Epoch-1, "Suspended.", api.Event{Type: api.EventSnapshot}); !errors.Is(err, lifecycle.ErrConflict) {
		t.Fatalf("suspend under a stale epoch: %v, want ErrConflict", err)
	}
	wantCalls(t, r.rec.take())

	r.clock.Add(time.Second)
	if err := r.m.Suspend(ctx, "s1", e.Epoch, "Suspended by a user.", api.Event{Type: api.EventSnapshot, Reason: "Took a snapshot."}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, r.rec.take(), "committed s1 epoch 2 events 2")
	if sess := r.get(t, "s1"); sess.Status != api.StatusSuspended || sess.Reason != "Suspended by a user." {
		t.Fatalf("session = %s %q", sess.Status, sess.Reason)
	}
	evs, err := r.st.ListEvents(ctx, "s1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-2:]
	if last[0].Type != api.EventSnapshot || last[0].Time != r.clock.Now().UnixMilli() || last[1].Status != api.StatusSuspended {
		t.Fatalf("last events = %+v, want the snapshot dated with the suspend, then the status", last)
	}
	if err := r.m.Suspend(ctx, "s1", e.Epoch, "again", api.Event{Type: api.EventSnapshot}); !errors.Is(err, lifecycle.ErrConflict) {
		t.Fatalf("second suspend: %v, want ErrConflict", err)
	}
	if _, err := r.m.Claim(ctx, "s1", "w2"); !errors.Is(err, lifecycle.ErrConflict) {
		t.Fatalf("claim of a suspended session: %v, want ErrConflict", err)
	}
	r.rec.take()

	// Its remote exits; the holder releases with a reason: no attempt, and
	// claim-next passes it over.
	if _, err := r.m.Release(ctx, "s1", "w1", "its remote exited", false); err != nil {
		t.Fatal(err)
	}
	if got := r.entry(t, "s1"); got.Phase != api.PhasePending || got.SessionStatus != api.QueueSessionSuspended || got.Attempts != 0 {
		t.Fatalf("released entry = %+v", got)
	}
	if _, ok, err := r.m.ClaimNext(ctx, "o1", "w2", "", store.NextFilter{}, nil); ok || err != nil {
		t.Fatalf("claim-next of a suspended session: %v, %v", ok, err)
	}
	r.rec.take()

	sess, err := r.m.Resume(ctx, "s1", "Resumed by a user.")
	if err != nil || sess.Status != api.StatusResuming {
		t.Fatalf("resume = %s, %v", sess.Status, err)
	}
	wantCalls(t, r.rec.take(), "committed s1 epoch 3 events 1")
	g, ok, err := r.m.ClaimNext(ctx, "o1", "w2", "", store.NextFilter{}, nil)
	if err != nil || !ok || g.Entry.SessionID != "s1" || g.Entry.Kind != api.KindResume {
		t.Fatalf("claim-next after the resume = %+v, %v, %v; want s1 as a resume", g.Entry, ok, err)
	}
}

// TestMachineSweepLapsed: a lapsed claim goes back to the queue; one kept
// alive holds; one whose remote is attached here is kept alive instead of
// requeued.
func TestMachineSweepLapsed(t *testing.T) {
	t.Parallel()
	attached := map[string]int64{}
	r := newRig(t, 0, 0, withGrace, func(o *lifecycle.Options) {
		o.Hooks.Attached = func(id string) (int64, bool) {
			epoch, ok := attached[id]
			return epoch, ok
		}
	})
	ctx := t.Context()
	for _, id := range []string{"alive", "attached", "gone"} {
		r.session(t, id)
		if _, err := r.m.Claim(ctx, id, "w1"); err != nil {
			t.Fatal(err)
		}
	}
	attached["attached"] = r.entry(t, "attached").Epoch
	r.rec.take()

	r.clock.Add(ttl / 2)
	if err := r.m.KeepAlive(ctx, store.Lease{SessionID: "alive", Epoch: r.entry(t, "alive").Epoch},
		store.Lease{SessionID: "gone", Epoch: 1}); err != nil { // an old epoch's lease keeps nothing
		t.Fatal(err)
	}
	if err := r.m.KeepAlive(ctx); err != nil {
		t.Fatal(err)
	}
	r.clock.Add(ttl / 2)
	r.m.SweepLapsed(ctx)
	wantCalls(t, r.rec.take(), "claims lapsed", "committed gone epoch 3 events 2", "attempt gone lapsed")

	if e := r.entry(t, "alive"); !e.Held(r.clock.Now()) || !e.LiveUntil.Equal(r.clock.Now().Add(grace-ttl/2)) {
		t.Errorf("kept-alive entry = %+v, want held until a grace after its keep-alive", e)
	}
	if e := r.entry(t, "attached"); !e.Held(r.clock.Now()) || !e.LiveUntil.Equal(r.clock.Now().Add(grace)) {
		t.Errorf("attached entry = %+v, want held a grace from the sweep", e)
	}
	if e := r.entry(t, "gone"); e.Phase != api.PhasePending || e.Attempts != 1 {
		t.Errorf("lapsed entry = %+v, want pending after one attempt", e)
	}
	// Nothing more to do.
	r.m.SweepLapsed(ctx)
	wantCalls(t, r.rec.take())
}

// TestMachineEnforceLimits: a session past limits.max_duration_s ends,
// followed by what follows an end; the others are left alone.
func TestMachineEnforceLimits(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0, 0, withGrace)
	ctx := t.Context()
	r.sessionOf(t, "short", api.Limits{MaxDurationS: 60})
	r.sessionOf(t, "long", api.Limits{MaxDurationS: 120})
	r.sessionOf(t, "waiting", api.Limits{MaxDurationS: 60}) // never started
	r.session(t, "unlimited")
	for _, id := range []string{"short", "long", "unlimited"} {
		r.connect(t, id, "w1")
	}
	r.clock.Add(59 * time.Second)
	r.m.EnforceLimits(ctx)
	wantCalls(t, r.rec.take())

	r.clock.Add(time.Second)
	r.m.EnforceLimits(ctx)
	wantCalls(t, r.rec.take(), "committed short epoch 2 events 2", "ended short exit", "after end short")
	if sess := r.get(t, "short"); sess.Status != api.StatusExit || sess.StatusDetail != api.DetailUsageLimitExceeded ||
		sess.Reason != "The session reached its limit of 60 s (limits.max_duration_s)." {
		t.Errorf("session past its limit = %s/%s %q", sess.Status, sess.StatusDetail, sess.Reason)
	}
	for _, id := range []string{"long", "waiting", "unlimited"} {
		if sess := r.get(t, id); api.IsFinal(sess.Status) {
			t.Errorf("%s ended: %q", id, sess.Reason)
		}
	}
	// An ended session is not ended again.
	r.m.EnforceLimits(ctx)
	wantCalls(t, r.rec.take())
}

// TestMachineSweepEnded: an ended session's entry stays listed for the
// retention, then becomes a tombstone, published.
func TestMachineSweepEnded(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0, 0) // EndedRetention: a minute
	ctx := t.Context()
	r.session(t, "s1")
	r.session(t, "s2")
	after, err := r.m.End(ctx, "s1", api.StatusExit, api.DetailUserRequest, "Ended by a user.")
	if err != nil {
		t.Fatal(err)
	}
	after()
	r.rec.take()
	r.clock.Add(time.Minute - time.Millisecond)
	r.m.SweepEnded(ctx)
	wantCalls(t, r.rec.take())
	if e := r.entry(t, "s1"); e.Deleted || e.SessionStatus != api.QueueSessionTerminated {
		t.Fatalf("entry within the retention = %+v, want it listed, terminated", e)
	}
	r.clock.Add(2 * time.Millisecond)
	r.m.SweepEnded(ctx)
	calls := r.rec.take()
	if len(calls) != 1 || calls[0][:len("committed s1 epoch")] != "committed s1 epoch" {
		t.Fatalf("hooks %q, want s1's tombstone committed", calls)
	}
	if e := r.entry(t, "s1"); !e.Deleted {
		t.Fatalf("entry past the retention = %+v, want a tombstone", e)
	}
	if e := r.entry(t, "s2"); e.Deleted {
		t.Fatal("the sweep took the entry of a session that had not ended")
	}
}

// TestMachineRun: the sweeps run on their own until the context ends.
func TestMachineRun(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0, 0, func(o *lifecycle.Options) {
		o.SweepInterval = 5 * time.Millisecond
		o.EndedRetention = 20 * time.Millisecond
	})
	r.session(t, "lapsing")
	r.sessionOf(t, "limited", api.Limits{MaxDurationS: 1})
	r.session(t, "ended")
	if _, err := r.m.Claim(t.Context(), "lapsing", "w1"); err != nil {
		t.Fatal(err)
	}
	r.connect(t, "limited", "w1")
	after, err := r.m.End(t.Context(), "ended", api.StatusExit, api.DetailUserRequest, "Ended by a user.")
	if err != nil {
		t.Fatal(err)
	}
	after()
	r.clock.Add(ttl)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.m.Run(ctx)
	}()
	waitfor.True(t, "the sweeps requeue the lapsed claim, end the session past its limit and sweep the ended entry", func() bool {
		return r.entry(t, "lapsing").Phase == api.PhasePending && api.IsFinal(r.get(t, "limited").Status) && r.entry(t, "ended").Deleted
	})
	cancel()
	waitfor.True(t, "Run returns once its context ends", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
}
