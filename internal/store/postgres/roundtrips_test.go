package postgres

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
)

// roundTrips counts the round trips of a pool's connections made with a
// context of counted: a statement sent alone, a batch, a statement
// prepared (pgx prepares each statement once per connection, on first
// use). The store's own goroutines (the late notifier) are not counted.
type roundTrips struct{ n, prepared atomic.Int64 }

type countedKey struct{}

// counted marks ctx as the one whose round trips are counted.
func counted(ctx context.Context) context.Context { return context.WithValue(ctx, countedKey{}, true) }

func (r *roundTrips) add(ctx context.Context, n *atomic.Int64) {
	if ctx.Value(countedKey{}) != nil {
		n.Add(1)
	}
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.add(ctx, &r.n)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.add(ctx, &r.n)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (r *roundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	r.add(ctx, &r.prepared)
	return ctx
}
func (r *roundTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// A claim, an update that appends events, an append and a creation each
// take two round trips: BEGIN with the first reads (the session row's
// lock), then the writes with the COMMIT — the rev counter's lock, taken
// in the last batch, is never held across a round trip of its own.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	var rt roundTrips
	// One connection: every statement is prepared once, in the warm-up.
	s, err := Open(t.Context(), pgtest.Shared(t).Database(t)+"&pool_max_conns=1", func(s *Store) { s.tracer = &rt })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := counted(t.Context())
	now := time.Now()
	create := func(id string) {
		t.Helper()
		sess := store.Session{ID: id, OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
		e := &store.QueueEntry{OutpostID: "op", Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending}
		if err := s.CreateSession(ctx, sess, e, []api.Event{{Time: now.UnixMilli(), Type: api.EventOutput, Text: "created\n"}}); err != nil {
			t.Fatal(err)
		}
	}
	var tokens atomic.Int64
	claim := func(id string) store.Mutation {
		t.Helper()
		fn := claimFn("acc", &tokens)
		m, err := s.ClaimSession(ctx, id, now, func(sess store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
			return fn(sess, e)
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	appendOne := func(id string) {
		t.Helper()
		if err := s.AppendEvents(ctx, id, []api.Event{{Time: now.UnixMilli(), Type: api.EventOutput, Text: "line\n"}}); err != nil {
			t.Fatal(err)
		}
	}
	// Warm-up: every statement prepared on the one connection.
	create("warm")
	claim("warm")
	appendOne("warm")

	measure := func(what string, want int64, f func()) {
		t.Helper()
		rt.n.Store(0)
		rt.prepared.Store(0)
		f()
		if n, p := rt.n.Load(), rt.prepared.Load(); n != want || p != 0 {
			t.Errorf("%s: %d round trips and %d prepares; want %d and none", what, n, p, want)
		}
	}
	measure("create", 2, func() { create("s1") })
	var m store.Mutation
	measure("claim", 2, func() { m = claim("s1") })
	measure("append", 2, func() { appendOne("s1") })

	// What the claim committed is what a reader sees: the rev it was
	// given, its event after the creation's, the session claimed.
	e, err := s.GetQueueEntry(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if e.Rev != m.Entry.Rev || e.Rev == 0 || e.Phase != api.PhaseClaimed || e.AcceptorID != "acc" {
		t.Errorf("entry after the claim: rev %d (claim said %d), phase %s, acceptor %q", e.Rev, m.Entry.Rev, e.Phase, e.AcceptorID)
	}
	sess, err := s.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if sess.Status != api.StatusClaimed {
		t.Errorf("session status %s after the claim; want %s", sess.Status, api.StatusClaimed)
	}
	evs, err := s.ListEvents(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 || evs[0].Seq != 1 || evs[1].Type != api.EventClaim || evs[1].Seq != 2 || evs[2].Seq != 3 {
		t.Errorf("events after create, claim, append: %+v", evs)
	}
}

// A claim locks its outpost's row only when the outpost has a max_running
// limit to count against: claims of an outpost without one do not wait
// for each other (or for anything holding the row), those of a limited
// outpost do.
func TestClaimLocksOutpostOnlyWhenLimited(t *testing.T) {
	t.Parallel()
	s, url := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	now := time.Now()
	if err := s.CreateOutpost(ctx, store.Outpost{ID: "op", Name: "o", Platform: api.PlatformLinux, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s1", "s2"} {
		sess := store.Session{ID: id, OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
		e := &store.QueueEntry{OutpostID: "op", Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending}
		if err := s.CreateSession(ctx, sess, e, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Another connection holds the outpost's row.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	hold, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `SELECT 1 FROM outposts WHERE id = 'op' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var tokens atomic.Int64
	claim := func(ctx context.Context, id string) (store.OutpostLoad, error) {
		var load store.OutpostLoad
		fn := claimFn("acc", &tokens)
		_, err := s.ClaimSession(ctx, id, now, func(sess store.Session, e store.QueueEntry, l store.OutpostLoad) (store.Mutation, error) {
			load = l
			return fn(sess, e)
		})
		return load, err
	}
	// No limit: the claim goes through while the row is held.
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := claim(short, "s1"); err != nil {
		t.Fatalf("claim of an outpost without a limit, its row held elsewhere: %v", err)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// A limit: the claim waits for the row, then counts s1's claim.
	if err := s.SetOutpostLimits(ctx, "op", store.OutpostLimits{MaxRunning: 5}); err != nil {
		t.Fatal(err)
	}
	if hold, err = conn.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `SELECT 1 FROM outposts WHERE id = 'op' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	brief, cancel2 := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel2()
	if _, err := claim(brief, "s2"); err == nil {
		t.Fatal("a claim of a limited outpost went through while its row was held elsewhere")
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	load, err := claim(ctx, "s2")
	if err != nil {
		t.Fatal(err)
	}
	if load != (store.OutpostLoad{MaxRunning: 5, Held: 1}) {
		t.Errorf("load seen claiming s2: %+v; want MaxRunning 5, Held 1", load)
	}
}
