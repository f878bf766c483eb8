package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
)

// The Machine against a real SQLite store: each transition commits, and
// the hooks follow in order.

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// recorder keeps what the hooks were called with, in order.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

func (r *recorder) hooks() lifecycle.Hooks {
	return lifecycle.Hooks{
		Committed: func(id string, m store.Mutation) {
			epoch := int64(-1)
			if m.Entry != nil {
				epoch = m.Entry.Epoch
			}
			r.add("committed %s epoch %d events %d", id, epoch, len(m.Events))
		},
		Claims:  func(outcome string) { r.add("claims %s", outcome) },
		Waited:  func(_ context.Context, e store.QueueEntry, d time.Duration) { r.add("waited %s %s", e.SessionID, d) },
		Attempt: func(_ context.Context, m store.Mutation, how string) { r.add("attempt %s %s", m.Entry.SessionID, how) },
		Exhausted: func(_ context.Context, id string, m store.Mutation) {
			r.add("exhausted %s %s", id, m.Session.Status)
		},
		Ended: func(id, status, detail, reason string) func() {
			r.add("ended %s %s", id, status)
			return func() { r.add("after end %s", id) }
		},
	}
}

type rig struct {
	st    *sqlite.Store
	clock *clock
	rec   *recorder
	m     *lifecycle.Machine
}

const ttl = 30 * time.Second

// newRig is a Machine over a fresh SQLite store with outpost o1; with
// changes to its Options applied.
func newRig(t *testing.T, maxRunning, maxAttempts int, with ...func(*lifecycle.Options)) *rig {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "outpost.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ck := &clock{now: time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)}
	if err := st.CreateOutpost(t.Context(), store.Outpost{ID: "o1", Name: "o1", Platform: api.PlatformLinux,
		MaxRunning: maxRunning, MaxAttempts: maxAttempts, CreatedAt: ck.Now()}); err != nil {
		t.Fatal(err)
	}
	r := &rig{st: st, clock: ck, rec: &recorder{}}
	var n atomic.Int64
	opts := lifecycle.Options{Store: st, Hooks: r.rec.hooks(), Now: ck.Now, ClaimTTL: ttl, EndedRetention: time.Minute,
		NewToken: func() (string, string) {
			i := n.Add(1)
			return fmt.Sprintf("tok%d", i), fmt.Sprintf("hash%d", i)
		}}
	for _, w := range with {
		w(&opts)
	}
	r.m = lifecycle.New(opts)
	return r
}

// session creates a pending session of outpost o1.
func (r *rig) session(t *testing.T, id string) {
	t.Helper()
	r.sessionOf(t, id, api.Limits{})
}

// sessionOf creates a pending session of outpost o1 with limits.
func (r *rig) sessionOf(t *testing.T, id string, limits api.Limits) {
	t.Helper()
	now := r.clock.Now()
	sess := store.Session{ID: id, OutpostID: "o1", Spec: api.SessionSpec{Limits: limits}, Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
	e := &store.QueueEntry{SessionID: id, OutpostID: "o1", Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending,
		SessionStatus: api.QueueSessionPending, Epoch: 1, MaxAttempts: 2, CreatedAt: now, UpdatedAt: now}
	if err := r.st.CreateSession(t.Context(), sess, e, nil); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) entry(t *testing.T, id string) store.QueueEntry {
	t.Helper()
	e, err := r.st.GetQueueEntry(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func wantCalls(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("hooks:\n got %q\nwant %q", got, want)
	}
}

func TestMachineClaimRenewRelease(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0, 0)
	ctx := t.Context()
	r.session(t, "s1")
	r.clock.Add(5 * time.Second)
	g, err := r.m.Claim(ctx, "s1", "w1")
	if err != nil {
		t.Fatal(err)
	}
	if g.Renewed || g.Token != "tok1" || g.Entry.AcceptorID != "w1" || g.Entry.Epoch != 2 {
		t.Fatalf("grant = %+v", g)
	}
	wantCalls(t, r.rec.take(), "claims claimed", "waited s1 5s", "committed s1 epoch 2 events 2")
	if e := r.entry(t, "s1"); e.Phase != api.PhaseClaimed || e.AcceptorID != "w1" {
		t.Fatalf("stored entry = %+v", e)
	}

	g, err = r.m.Claim(ctx, "s1", "w1")
	if err != nil || !g.Renewed || g.Token != "tok2" || g.Entry.Epoch != 2 {
		t.Fatalf("renewal = %+v, %v", g, err)
	}
	wantCalls(t, r.rec.take(), "claims renewed", "committed s1 epoch 2 events 0")

	_, err = r.m.Claim(ctx, "s1", "w2")
	if !errors.Is(err, lifecycle.ErrConflict) {
		t.Fatalf("claim of a held entry: %v, want ErrConflict", err)
	}
	wantCalls(t, r.rec.take(), "claims conflict")

	e, err := r.m.Release(ctx, "s1", "w1", "", false)
	if err != nil || e.Phase != api.PhasePending || e.Epoch != 3 {
		t.Fatalf("release = %+v, %v", e, err)
	}
	wantCalls(t, r.rec.take(), "claims released", "committed s1 epoch 3 events 2", "attempt s1 released")

	if _, err := r.m.Release(ctx, "s1", "w1", "", false); !errors.Is(err, lifecycle.ErrConflict) {
		t.Fatalf("second release: %v, want ErrConflict", err)
	}
	wantCalls(t, r.rec.take())
}

func TestMachineLapseUntilAttemptsRunOut(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0, 0)
	ctx := t.Context()
	r.session(t, "s1")
	if _, err := r.m.Claim(ctx, "s1", "w1"); err != nil {
		t.Fatal(err)
	}
	r.rec.take()
	// Not lapsed yet: nothing happens.
	if err := r.m.Lapse(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, r.rec.take())

	r.clock.Add(ttl)
	if err := r.m.Lapse(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, r.rec.take(), "claims lapsed", "committed s1 epoch 3 events 2", "attempt s1 lapsed")
	if e := r.entry(t, "s1"); e.Phase != api.PhasePending || e.Attempts != 1 {
		t.Fatalf("entry after a lapse = %+v", e)
	}

	// The second claim lapses too, and a claim finds it before the sweep
	// does: the session's two attempts are spent, it ends, the claimer
	// gets 409 ErrEnded.
	if _, err := r.m.Claim(ctx, "s1", "w1"); err != nil {
		t.Fatal(err)
	}
	r.rec.take()
	r.clock.Add(ttl)
	_, err := r.m.Claim(ctx, "s1", "w2")
	if !errors.Is(err, lifecycle.ErrEnded) {
		t.Fatalf("claim of an exhausted session: %v, want ErrEnded", err)
	}
	wantCalls(t, r.rec.take(), "claims lapsed", "committed s1 epoch 5 events 3", "attempt s1 exhausted",
		"exhausted s1 error", "claims conflict")
	sess, err := r.st.GetSession(ctx, "s1")
	if err != nil || sess.Status != api.StatusError {
		t.Fatalf("session = %+v, %v", sess, err)
	}
}

func TestMachineEndAndDrop(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0, 0)
	ctx := t.Context()
	r.session(t, "s1")
	after, err := r.m.End(ctx, "s1", api.StatusExit, api.DetailUserRequest, "Ended by a user.")
	if err != nil {
		t.Fatal(err)
	}
	// What follows the end waits for the caller.
	wantCalls(t, r.rec.take(), "committed s1 epoch 1 events 2", "ended s1 exit")
	after()
	wantCalls(t, r.rec.take(), "after end s1")
	if e := r.entry(t, "s1"); e.SessionStatus != api.QueueSessionTerminated || e.Deleted {
		t.Fatalf("entry of the ended session = %+v, want it listed, terminated", e)
	}
	// A second end is a no-op.
	after, err = r.m.End(ctx, "s1", api.StatusError, api.DetailError, "again")
	if err != nil {
		t.Fatal(err)
	}
	after()
	wantCalls(t, r.rec.take())

	if err := r.m.Drop(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, r.rec.take(), "committed s1 epoch 2 events 0")
	if e := r.entry(t, "s1"); !e.Deleted {
		t.Fatalf("entry after Drop = %+v, want a tombstone", e)
	}
	if _, err := r.m.Claim(ctx, "s1", "w1"); err == nil {
		t.Fatal("a dropped entry was claimed")
	}
}

// TestMachineEndIn: the agent loop folds a session's end into its own
// transaction and publishes it; the Machine then does only what follows.
func TestMachineEndIn(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0, 0)
	ctx := t.Context()
	r.session(t, "s1")
	m, err := r.st.UpdateSession(ctx, "s1", func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		m := store.Mutation{Events: []api.Event{{Type: api.EventMessage, Text: "done"}}}
		r.m.EndIn(&sess, e, &m, r.clock.Now(), api.StatusExit, api.DetailFinished, "The agent is done.")
		return m, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Session.Status != api.StatusExit || m.Entry == nil || m.Entry.SessionStatus != api.QueueSessionTerminated || len(m.Events) != 3 {
		t.Fatalf("folded end = %+v", m)
	}
	after := r.m.Ended("s1", api.StatusExit, api.DetailFinished, "The agent is done.")
	wantCalls(t, r.rec.take(), "ended s1 exit")
	after()
	wantCalls(t, r.rec.take(), "after end s1")
	// Without an Ended hook there is nothing to follow, but a func to call.
	bare := lifecycle.New(lifecycle.Options{Store: r.st})
	bare.Ended("s1", api.StatusExit, "", "")()
}

func TestMachineClaimNext(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2, 0)
	ctx := t.Context()
	for i := range 3 {
		r.session(t, fmt.Sprintf("s%d", i))
		r.clock.Add(time.Second)
	}
	// Concurrent claimers get different sessions, up to max_running.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var got []string
	var atCapacity int
	for i := range 3 {
		wg.Go(func() {
			g, ok, err := r.m.ClaimNext(ctx, "o1", fmt.Sprintf("w%d", i), "", store.NextFilter{}, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, lifecycle.ErrAtCapacity):
				atCapacity++
			case err != nil || !ok:
				t.Errorf("claim-next: %v, %v", ok, err)
			default:
				got = append(got, g.Entry.SessionID)
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	if !slices.Equal(got, []string{"s0", "s1"}) || atCapacity != 1 {
		t.Fatalf("claimed %v with %d at capacity, want s0 and s1 (claim order) and one at capacity", got, atCapacity)
	}
	// Excluded sessions are passed over; none left is no error.
	if _, err := r.m.Release(ctx, "s0", r.entry(t, "s0").AcceptorID, "", false); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := r.m.ClaimNext(ctx, "o1", "w9", "", store.NextFilter{Exclude: []string{"s0", "s2"}}, nil); ok || err != nil {
		t.Fatalf("claim-next with every pending session excluded: %v, %v", ok, err)
	}
}

// TestMachineArrive: a remote's hello commits the session running and
// publishes it; a second hello under a newer claim is refused and writes
// nothing; an ended session is handed back as it stands, unpublished.
func TestMachineArrive(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0, 0, func(o *lifecycle.Options) { o.ReconnectGrace = 20 * time.Second })
	ctx := t.Context()
	r.session(t, "s1")
	g, err := r.m.Claim(ctx, "s1", "w1")
	if err != nil {
		t.Fatal(err)
	}
	r.rec.take()
	r.clock.Add(time.Second)
	sess, prev, err := r.m.Arrive(ctx, "s1", lifecycle.Arrival{Epoch: g.Entry.Epoch, AcceptorID: "w1", Owner: "r1"})
	if err != nil || sess.Status != api.StatusRunning || prev != "" {
		t.Fatalf("Arrive = %+v, %q, %v, want running", sess, prev, err)
	}
	wantCalls(t, r.rec.take(), "committed s1 epoch 2 events 2")
	if e := r.entry(t, "s1"); e.Owner != "r1" || !e.LiveUntil.Equal(r.clock.Now().Add(20*time.Second)) || e.SessionStatus != api.QueueSessionRunning {
		t.Fatalf("stored entry = %+v, want owned by r1, live a grace ahead, running", e)
	}
	if _, _, err := r.m.Arrive(ctx, "s1", lifecycle.Arrival{Epoch: g.Entry.Epoch + 1, AcceptorID: "w1", Owner: "r2"}); !errors.Is(err, lifecycle.ErrConflict) {
		t.Fatalf("Arrive under another epoch: %v, want ErrConflict", err)
	}
	wantCalls(t, r.rec.take())
	if e := r.entry(t, "s1"); e.Owner != "r1" {
		t.Fatalf("a refused arrival changed the owner to %q", e.Owner)
	}
	// A reconnect through another replica names the replica it left.
	if _, prev, err := r.m.Arrive(ctx, "s1", lifecycle.Arrival{Epoch: g.Entry.Epoch, AcceptorID: "w1", Owner: "r2"}); err != nil || prev != "r1" {
		t.Fatalf("reconnect through r2: prevOwner %q, %v, want r1", prev, err)
	}
	wantCalls(t, r.rec.take(), "committed s1 epoch 2 events 1")

	after, err := r.m.End(ctx, "s1", api.StatusExit, api.DetailUserRequest, "Ended by a user.")
	if err != nil {
		t.Fatal(err)
	}
	after()
	r.rec.take()
	sess, _, err = r.m.Arrive(ctx, "s1", lifecycle.Arrival{Epoch: g.Entry.Epoch, AcceptorID: "w1", Owner: "r1"})
	if err != nil || sess.Status != api.StatusExit || sess.Reason != "Ended by a user." {
		t.Fatalf("Arrive on an ended session = %+v, %v, want it as it stands", sess, err)
	}
	wantCalls(t, r.rec.take())
}
