package postgres

import (
	"context"
	"errors"
	"strings"
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
// use), and the statements sent, BEGIN and COMMIT aside (what PostgreSQL
// runs on its own, a foreign key's check, is not sent). The store's own
// goroutines (the late notifier) are not counted.
type roundTrips struct{ n, prepared, stmts atomic.Int64 }

type countedKey struct{}

// counted marks ctx as the one whose round trips are counted.
func counted(ctx context.Context) context.Context { return context.WithValue(ctx, countedKey{}, true) }

func (r *roundTrips) add(ctx context.Context, n *atomic.Int64) {
	if ctx.Value(countedKey{}) != nil {
		n.Add(1)
	}
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(ctx, &r.n)
	r.statement(ctx, d.SQL)
	return ctx
}

// statement counts statement q unless it begins or ends a transaction.
func (r *roundTrips) statement(ctx context.Context, q string) {
	u := strings.ToUpper(strings.TrimSpace(q))
	switch {
	case u == "COMMIT", u == "ROLLBACK", u == "BEGIN", strings.HasPrefix(u, "BEGIN ISOLATION LEVEL "):
		return
	}
	r.add(ctx, &r.stmts)
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.add(ctx, &r.n)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.statement(ctx, d.SQL)
}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
func (r *roundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	r.add(ctx, &r.prepared)
	return ctx
}
func (r *roundTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// A claim, an update that appends events, an append and a creation each
// take two round trips: BEGIN with the first reads (the session row's
// lock), then the writes with the COMMIT — the rev counter's lock, taken
// in the last batch, is never held across a round trip of its own.
//
// A fresh claim sends seven statements: two reads (the session's state,
// locked; its entry with its transcript's seq, its outpost's limit and
// desktop, whether any webhook is enabled and its tokens' oldest epoch),
// then the session's update,
// the claim's event, its connect token, the entry under its new rev and
// the change's notification. No tokens of an older epoch to delete (the
// entry was pending), no webhook delivery when no webhook is enabled; a
// claim whose epoch moves past a claimed one deletes its stale tokens.
// Any other update reads its transcript's seq with its entry.
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
		m, err := s.ClaimSession(ctx, id, now, "", func(sess store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
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

	measure := func(what string, want, wantStmts int64, f func()) {
		t.Helper()
		rt.n.Store(0)
		rt.prepared.Store(0)
		rt.stmts.Store(0)
		f()
		if n, p := rt.n.Load(), rt.prepared.Load(); n != want || p != 0 {
			t.Errorf("%s: %d round trips and %d prepares; want %d and none", what, n, p, want)
		}
		if n := rt.stmts.Load(); wantStmts > 0 && n != wantStmts {
			t.Errorf("%s: %d statements; want %d", what, n, wantStmts)
		}
	}
	measure("create", 2, 0, func() { create("s1") })
	var m store.Mutation
	measure("claim", 2, 7, func() { m = claim("s1") })
	measure("append", 2, 0, func() { appendOne("s1") })
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

	// An update that records a call and its event (the agent loop's, per
	// tool call) reads the seq with the entry: four statements.
	measure("update with a call", 2, 4, func() {
		_, err := s.UpdateSession(ctx, "s1", func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
			return store.Mutation{Calls: []store.Call{{Seq: 1, Tool: api.ToolExec, CreatedAt: now}},
				Events: []api.Event{{Time: now.UnixMilli(), Type: api.EventCall, CallSeq: 1, Tool: api.ToolExec}}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	if evs, err := s.ListEvents(ctx, "s1", 3, 0); err != nil || len(evs) != 1 || evs[0].Seq != 4 {
		t.Errorf("the update's event: %+v, %v; want seq 4", evs, err)
	}

	// The claim of a claimed entry by another (its claim lapsed, say)
	// moves the epoch on: the old epoch's tokens go.
	measure("claim over a claim", 2, 8, func() { claim("s1") })
	if n := countTokens(t, s, "s1"); n != 1 {
		t.Errorf("%d connect tokens after a second claim; want the new epoch's one", n)
	}
	// With a webhook enabled, the claim emits its delivery.
	if err := s.CreateWebhook(ctx, store.Webhook{ID: "wh", URL: "http://127.0.0.1:1/", Events: []string{api.EventSessionClaimed}, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	create("s2")
	measure("claim with a webhook", 2, 8, func() { claim("s2") })
	var deliveries int
	if err := s.pool.QueryRow(ctx, `SELECT COUNT(*) FROM webhook_deliveries WHERE webhook_id = 'wh' AND event = $1`, api.EventSessionClaimed).Scan(&deliveries); err != nil {
		t.Fatal(err)
	}
	if deliveries != 1 {
		t.Errorf("%d deliveries of the claim with a webhook enabled; want 1", deliveries)
	}
	// A claim with its claimer's token takes the token's shared lock and
	// reads it in its first batch: two statements more, no round trip.
	if err := s.CreateToken(ctx, store.Token{ID: "tk", Name: "tk", Hash: "htk", Scopes: []string{api.ScopeMachine}, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	create("s3")
	measure("claim with a token", 2, 10, func() {
		fn := claimFn("acc", &tokens)
		if _, err := s.ClaimSession(ctx, "s3", now, "tk", func(sess store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
			return fn(sess, e)
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// countTokens counts session id's connect tokens.
func countTokens(t *testing.T, s *Store, id string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(t.Context(), `SELECT COUNT(*) FROM connect_tokens WHERE session_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
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
	hold := holdRows(t, url, `SELECT 1 FROM outposts WHERE id = 'op' FOR UPDATE`)
	var tokens atomic.Int64
	claim := func(ctx context.Context, id string) (store.OutpostLoad, error) {
		var load store.OutpostLoad
		fn := claimFn("acc", &tokens)
		_, err := s.ClaimSession(ctx, id, now, "", func(sess store.Session, e store.QueueEntry, l store.OutpostLoad) (store.Mutation, error) {
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
	hold = holdRows(t, url, `SELECT 1 FROM outposts WHERE id = 'op' FOR UPDATE`)
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

// TestNextSkippedLocked: a claim-next pick passes over an entry whose
// session another transaction holds, and NextSkippedLocked says so, so
// that its empty answer is not taken for an empty queue; once the entry is
// claimed it says nothing is left.
func TestNextSkippedLocked(t *testing.T) {
	t.Parallel()
	s, url := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	now := time.Now()
	if err := s.CreateOutpost(ctx, store.Outpost{ID: "op", Name: "o", Platform: api.PlatformLinux, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if skipped, err := s.NextSkippedLocked(ctx, "op", store.NextFilter{}); err != nil || skipped {
		t.Fatalf("empty queue: NextSkippedLocked = %v, %v; want false", skipped, err)
	}
	sess := store.Session{ID: "s1", OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
	e := &store.QueueEntry{OutpostID: "op", Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending}
	if err := s.CreateSession(ctx, sess, e, nil); err != nil {
		t.Fatal(err)
	}
	hold := holdRows(t, url, `SELECT 1 FROM sessions WHERE id = 's1' FOR UPDATE`)
	var tokens atomic.Int64
	fn := claimFn("acc", &tokens)
	next := func() error {
		_, err := s.ClaimNext(ctx, "op", now, "", store.NextFilter{}, func(sess store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
			return fn(sess, e)
		})
		return err
	}
	if err := next(); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claim-next while the only entry's session is held: %v, want not found", err)
	}
	if skipped, err := s.NextSkippedLocked(ctx, "op", store.NextFilter{}); err != nil || !skipped {
		t.Fatalf("entry held elsewhere: NextSkippedLocked = %v, %v; want true", skipped, err)
	}
	if skipped, err := s.NextSkippedLocked(ctx, "op", store.NextFilter{Exclude: []string{"s1"}}); err != nil || skipped {
		t.Fatalf("the held entry excluded: NextSkippedLocked = %v, %v; want false", skipped, err)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := next(); err != nil {
		t.Fatalf("claim-next once the session is free: %v", err)
	}
	if skipped, err := s.NextSkippedLocked(ctx, "op", store.NextFilter{}); err != nil || skipped {
		t.Fatalf("the only entry claimed: NextSkippedLocked = %v, %v; want false", skipped, err)
	}
}

// holdRows opens a connection of its own to url and, in a transaction
// left open, runs lock (a SELECT … FOR UPDATE): the rows stay locked
// until the test rolls the transaction back or ends.
func holdRows(t *testing.T, url, lock string) pgx.Tx {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	hold, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, lock); err != nil {
		t.Fatal(err)
	}
	return hold
}
