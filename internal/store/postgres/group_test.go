package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
)

// allTrips counts every round trip and statement (BEGIN and COMMIT
// included) of a pool, whatever the context.
type allTrips struct{ trips, stmts atomic.Int64 }

func (a *allTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	a.trips.Add(1)
	a.stmts.Add(1)
	return ctx
}
func (a *allTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (a *allTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	a.trips.Add(1)
	return ctx
}
func (a *allTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	a.stmts.Add(1)
}
func (a *allTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

var errAtCapacity = errors.New("at capacity")

// claimOnce claims a pending entry for acc and refuses a claimed one, as
// a claim by another acceptor is refused, and one beyond the outpost's
// max_running (errAtCapacity).
func claimOnce(acc string, tokens *atomic.Int64) func(store.Session, store.QueueEntry, store.OutpostLoad) (store.Mutation, error) {
	fn := claimFn(acc, tokens)
	return func(sess store.Session, e store.QueueEntry, l store.OutpostLoad) (store.Mutation, error) {
		if e.Phase == api.PhaseClaimed {
			return store.Mutation{}, store.ErrConflict
		}
		if l.MaxRunning > 0 && l.Held >= l.MaxRunning {
			return store.Mutation{}, errAtCapacity
		}
		return fn(sess, e)
	}
}

// Concurrent claims share transactions and still hold every guarantee of
// claims alone: each session claimed by id is claimed once, by its
// claimer; of two claimers of one session exactly one wins and the other
// gets its own error while its group commits; claims by pick never pick
// the same entry and, on an outpost with max_running, count the claims
// before them in their own group, so exactly max_running are held; every
// entry written gets a rev of its own.
func TestClaimGroup(t *testing.T) {
	t.Parallel()
	var trips allTrips
	s, err := Open(t.Context(), pgtest.Shared(t).Database(t), WithClaimGroup(32), func(s *Store) { s.tracer = &trips })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	now := time.Now()
	const (
		byID, claimers = 400, 40
		limited, limit = 80, 7
		dups           = 40
	)
	for _, o := range []store.Outpost{
		{ID: "op", Name: "o", Platform: api.PlatformLinux, CreatedAt: now},
		{ID: "lim", Name: "l", Platform: api.PlatformLinux, CreatedAt: now, MaxRunning: limit},
	} {
		if err := s.CreateOutpost(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	create := func(id, outpost string) {
		sess := store.Session{ID: id, OutpostID: outpost, Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
		e := &store.QueueEntry{OutpostID: outpost, Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending}
		if err := s.CreateSession(ctx, sess, e, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range byID {
		create(fmt.Sprint("s", i), "op")
	}
	for i := range limited {
		create(fmt.Sprint("l", i), "lim")
	}
	for i := range dups {
		create(fmt.Sprint("d", i), "op")
	}

	// Every change is notified with the rev its entry committed with, in
	// commit order (revs rising).
	var mu sync.Mutex
	notified := map[string]int64{}
	var lastRev int64
	var outOfOrder []string
	listening := make(chan struct{})
	lctx, stop := context.WithCancel(ctx)
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		s.Listen(lctx, func(c store.Change) { //nolint:errcheck // ends with lctx
			if c.Resync {
				close(listening)
				return
			}
			if c.Rev == 0 {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if c.Rev <= lastRev {
				outOfOrder = append(outOfOrder, fmt.Sprintf("%s rev %d after rev %d", c.SessionID, c.Rev, lastRev))
			}
			lastRev = c.Rev
			notified[c.SessionID] = c.Rev
		})
	}()
	<-listening
	var answered sync.Map // session id → the rev its successful claim was answered with

	var tokens atomic.Int64
	trips.trips.Store(0)
	trips.stmts.Store(0)
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := range claimers {
		wg.Go(func() {
			acc := fmt.Sprint("acc-", g)
			for i := g; i < byID; i += claimers {
				m, err := s.ClaimSession(ctx, fmt.Sprint("s", i), now, "", claimOnce(acc, &tokens))
				if err != nil {
					errs <- fmt.Errorf("claim s%d: %w", i, err)
					continue
				}
				answered.Store(m.Entry.SessionID, m.Entry.Rev)
			}
		})
	}
	var dupWins [dups]atomic.Int32
	for g := range 2 {
		wg.Go(func() {
			for i := range dups {
				m, err := s.ClaimSession(ctx, fmt.Sprint("d", i), now, "", claimOnce(fmt.Sprint("dup-", g), &tokens))
				switch {
				case err == nil:
					dupWins[i].Add(1)
					answered.Store(m.Entry.SessionID, m.Entry.Rev)
				case !errors.Is(err, store.ErrConflict):
					errs <- fmt.Errorf("claim d%d: %w", i, err)
				}
			}
		})
	}
	var picked sync.Map
	var pickedN atomic.Int32
	for g := range 20 {
		wg.Go(func() {
			acc := fmt.Sprint("next-", g)
			for {
				m, err := s.ClaimNext(ctx, "lim", now, "", store.NextFilter{Platform: api.PlatformLinux}, claimOnce(acc, &tokens))
				switch {
				case errors.Is(err, errAtCapacity), errors.Is(err, store.ErrNotFound):
					return
				case errors.Is(err, store.ErrConflict):
					continue // a claim by pick raced: pick again
				case err != nil:
					errs <- fmt.Errorf("claim next: %w", err)
					return
				}
				if _, dup := picked.LoadOrStore(m.Entry.SessionID, acc); dup {
					errs <- fmt.Errorf("%s picked twice", m.Entry.SessionID)
				}
				pickedN.Add(1)
				answered.Store(m.Entry.SessionID, m.Entry.Rev)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	revs := map[int64]string{}
	entries, _, err := s.ListQueue(ctx, store.QueueFilter{})
	if err != nil {
		t.Fatal(err)
	}
	// The last change of every entry reaches the listener.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := 0
		want := 0
		for _, e := range entries {
			if _, ok := answered.Load(e.SessionID); ok {
				want++
				if notified[e.SessionID] == e.Rev {
					n++
				}
			}
		}
		mu.Unlock()
		if n == want || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-listened
	for _, o := range outOfOrder {
		t.Errorf("notified out of order: %s", o)
	}
	held := 0
	for _, e := range entries {
		if rev, ok := answered.Load(e.SessionID); ok {
			if rev.(int64) != e.Rev {
				t.Errorf("%s: the claim was answered with rev %d; the entry has %d", e.SessionID, rev, e.Rev)
			}
			if got := notified[e.SessionID]; got != e.Rev {
				t.Errorf("%s: last notified with rev %d; the entry has %d", e.SessionID, got, e.Rev)
			}
		}
		if prev, ok := revs[e.Rev]; ok {
			t.Errorf("rev %d of both %s and %s", e.Rev, prev, e.SessionID)
		}
		revs[e.Rev] = e.SessionID
		var i int
		if e.OutpostID == "lim" {
			if e.Phase == api.PhaseClaimed {
				held++
			}
			continue
		}
		if n, _ := fmt.Sscanf(e.SessionID, "s%d", &i); n == 1 {
			if want := fmt.Sprint("acc-", i%claimers); e.Phase != api.PhaseClaimed || e.AcceptorID != want {
				t.Errorf("%s: %s by %q; want claimed by %q", e.SessionID, e.Phase, e.AcceptorID, want)
			}
		}
	}
	if held != limit || pickedN.Load() != limit {
		t.Errorf("%d entries of the limited outpost claimed (%d picks answered); want %d", held, pickedN.Load(), limit)
	}
	for i := range dups {
		if n := dupWins[i].Load(); n != 1 {
			t.Errorf("d%d: %d claimers won; want 1", i, n)
		}
	}
	groups, grouped := s.ClaimGroups()
	if groups == 0 {
		t.Errorf("no claims shared a transaction")
	}
	total := byID + 2*dups + limited
	t.Logf("%d groups held %d claims (mean %.1f); about %d claim calls took %d round trips and %d statements, BEGIN and COMMIT included",
		groups, grouped, float64(grouped)/float64(max(groups, 1)), total, trips.trips.Load(), trips.stmts.Load())
}

// With updates grouped too, claims and releases of the same sessions
// interleave in shared transactions: every claim and release of a
// session is in its transcript once, numbered without gaps, and the
// entry ends as the last write left it, under the highest rev.
func TestGroupUpdates(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), pgtest.Shared(t).Database(t), WithClaimGroup(32), WithGroupUpdates(true))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	now := time.Now()
	const workers, rounds = 30, 10
	for i := range workers {
		createPending(t, s, fmt.Sprint("u", i))
	}
	var tokens atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := range workers {
		wg.Go(func() {
			id, acc := fmt.Sprint("u", g), fmt.Sprint("acc-", g)
			fn := claimFn(acc, &tokens)
			for range rounds {
				if _, err := s.ClaimSession(ctx, id, now, "", func(sess store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
					if e.Phase != api.PhasePending {
						return store.Mutation{}, fmt.Errorf("claimed while %s", e.Phase)
					}
					return fn(sess, e)
				}); err != nil {
					errs <- err
					return
				}
				if _, err := s.UpdateSession(ctx, id, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
					if e.Phase != api.PhaseClaimed || e.AcceptorID != acc {
						return store.Mutation{}, fmt.Errorf("released while %s by %q", e.Phase, e.AcceptorID)
					}
					e.Phase, e.AcceptorID = api.PhasePending, ""
					return store.Mutation{Entry: &e, Events: []api.Event{{Time: now.UnixMilli(), Type: api.EventOutput, Text: "released\n"}}}, nil
				}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range workers {
		id := fmt.Sprint("u", i)
		evs, err := s.ListEvents(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2*rounds {
			t.Errorf("%s: %d events; want %d", id, len(evs), 2*rounds)
		}
		for j, ev := range evs {
			if ev.Seq != int64(j+1) {
				t.Errorf("%s: event %d has seq %d", id, j, ev.Seq)
				break
			}
		}
		e, err := s.GetQueueEntry(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if e.Phase != api.PhasePending || e.Epoch != rounds {
			t.Errorf("%s: %s at epoch %d; want pending at %d", id, e.Phase, e.Epoch, rounds)
		}
	}
	if groups, _ := s.ClaimGroups(); groups == 0 {
		t.Errorf("no writes shared a transaction")
	}
}

// A group of n claims takes n+2 round trips: BEGIN with the session
// rows' locks; each claim's SAVEPOINT with its reads; then the writes of
// all, the entries with their revs, their notifications and the COMMIT.
// Its statements are two a claim: its SAVEPOINT and the read of its
// entry (its state came with its lock); and six for the group: the locks
// with the states, then one statement of each kind of write for all its
// claims (states, events, connect tokens, entries) and the
// notifications.
func TestGroupRoundTrips(t *testing.T) {
	t.Parallel()
	var rt roundTrips
	s, err := Open(t.Context(), pgtest.Shared(t).Database(t)+"&pool_max_conns=1", WithClaimGroup(32),
		func(s *Store) { s.tracer = &rt })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := counted(t.Context())
	now := time.Now()
	const n = 4
	for i := range 2 * n {
		sess := store.Session{ID: fmt.Sprint("s", i), OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
		e := &store.QueueEntry{OutpostID: "op", Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending}
		if err := s.CreateSession(ctx, sess, e, []api.Event{{Time: now.UnixMilli(), Type: api.EventOutput, Text: "created\n"}}); err != nil {
			t.Fatal(err)
		}
	}
	var tokens atomic.Int64
	group := func(ids ...string) []store.Mutation {
		t.Helper()
		ms, errs := runGroup(t, s, ctx, now, &tokens, ids, nil)
		for _, err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		return ms
	}
	// Warm-up: every statement prepared on the one connection.
	group("s0", "s1", "s2", "s3")
	rt.n.Store(0)
	rt.prepared.Store(0)
	rt.stmts.Store(0)
	before, _ := s.ClaimGroups()
	ms := group("s4", "s5", "s6", "s7")
	if groups, _ := s.ClaimGroups(); groups != before+1 {
		t.Fatalf("%d groups ran; want 1", groups-before)
	}
	if trips, p := rt.n.Load(), rt.prepared.Load(); trips != n+2 || p != 0 {
		t.Errorf("a group of %d claims: %d round trips and %d prepares; want %d and none", n, trips, p, n+2)
	}
	if stmts := rt.stmts.Load(); stmts != 2*n+6 {
		t.Errorf("a group of %d claims: %d statements; want %d", n, stmts, 2*n+6)
	}
	for _, m := range ms {
		e, err := s.GetQueueEntry(ctx, m.Entry.SessionID)
		if err != nil {
			t.Fatal(err)
		}
		if e.Rev != m.Entry.Rev || e.Phase != api.PhaseClaimed {
			t.Errorf("%s: %s at rev %d; the claim said rev %d", e.SessionID, e.Phase, e.Rev, m.Entry.Rev)
		}
	}
}

// runGroup claims ids in one group of s's combiner, which it makes busy
// until they all queued; edit, when set, changes the mutation of a claim
// (a connect token another has makes its writes fail).
func runGroup(t *testing.T, s *Store, ctx context.Context, now time.Time, tokens *atomic.Int64, ids []string, edit func(id string, m *store.Mutation)) ([]store.Mutation, []error) {
	t.Helper()
	out := make([]store.Mutation, len(ids))
	errs := make([]error, len(ids))
	claims := make([]func(), len(ids))
	for i, id := range ids {
		claims[i] = func() {
			fn := claimFn("acc", tokens)
			out[i], errs[i] = s.ClaimSession(ctx, id, now, "", func(sess store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
				m, err := fn(sess, e)
				if edit != nil {
					edit(id, &m)
				}
				return m, err
			})
		}
	}
	queueInGroup(t, s, claims...)
	return out, errs
}

// A claim of a group whose writes fail (a connect token another session
// has) gets its error, the claims before and after it commit: whether its
// writes, merged with the others', fail the COMMIT (the group is then
// tried again claim by claim) or, as a claim's that writes a call too,
// went with the next claim's reads (it alone is undone) or with the
// COMMIT.
func TestGroupWriteFails(t *testing.T) {
	t.Parallel()
	s := openGrouped(t)
	ctx := t.Context()
	now := time.Now()
	for i := range 13 {
		sess := store.Session{ID: fmt.Sprint("s", i), OutpostID: "op", Status: api.StatusNew, CreatedAt: now, UpdatedAt: now}
		e := &store.QueueEntry{OutpostID: "op", Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending}
		if err := s.CreateSession(ctx, sess, e, nil); err != nil {
			t.Fatal(err)
		}
	}
	var tokens atomic.Int64
	if _, errs := runGroup(t, s, ctx, now, &tokens, []string{"s0"}, func(_ string, m *store.Mutation) { m.ConnectTokens[0].Hash = "taken" }); errs[0] != nil {
		t.Fatal(errs[0])
	}
	for _, tc := range []struct {
		ids  []string
		fail string
		call bool // the failing claim writes a call too: no merge
		// grouped: the other claims commit in the group
		grouped bool
	}{
		{[]string{"s1", "s2", "s3"}, "s2", false, false},
		{[]string{"s4", "s5", "s6"}, "s6", false, false},
		{[]string{"s7", "s8", "s9"}, "s8", true, true},
		{[]string{"s10", "s11", "s12"}, "s12", true, false},
	} {
		before, err := s.GetQueueEntry(ctx, tc.fail)
		if err != nil {
			t.Fatal(err)
		}
		groups, _ := s.ClaimGroups()
		_, errs := runGroup(t, s, ctx, now, &tokens, tc.ids, func(id string, m *store.Mutation) {
			if id != tc.fail {
				return
			}
			m.ConnectTokens[0].Hash = "taken"
			if tc.call {
				m.Calls = []store.Call{{Seq: 1, Tool: "exec", CreatedAt: now}}
			}
		})
		if after, _ := s.ClaimGroups(); (after > groups) != tc.grouped {
			t.Errorf("%s failing: %d groups committed; want grouped %v", tc.fail, after-groups, tc.grouped)
		}
		for i, id := range tc.ids {
			e, err := s.GetQueueEntry(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if id == tc.fail {
				if !errors.Is(errs[i], store.ErrConflict) || e.Phase != api.PhasePending || e.Rev != before.Rev {
					t.Errorf("%s, whose token is taken: %v, %s at rev %d; want a conflict and the entry pending at rev %d",
						id, errs[i], e.Phase, e.Rev, before.Rev)
				}
				continue
			}
			if errs[i] != nil || e.Phase != api.PhaseClaimed {
				t.Errorf("%s: %v, %s; want claimed", id, errs[i], e.Phase)
			}
		}
	}
}

// Many writers of a few sessions, updates grouped with claims: each
// update adds one to its session's LastSeq, read from the state its
// transaction was given, so a state read before its lock (or before
// another write of the group) loses an increment.
func TestGroupStateUnderContention(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), pgtest.Shared(t).Database(t), WithClaimGroup(32), WithGroupUpdates(true))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	const sessions, writers, rounds = 4, 40, 25
	createPending(t, s, "c0", "c1", "c2", "c3")
	before, _ := s.ClaimGroups()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				id := fmt.Sprint("c", (w+r)%sessions)
				if _, err := s.UpdateSession(ctx, id, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
					sess.LastSeq++
					e.UpdatedAt = time.Now()
					return store.Mutation{Session: &sess, Entry: &e}, nil
				}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var sum int64
	for i := range sessions {
		sess, err := s.GetSession(ctx, fmt.Sprint("c", i))
		if err != nil {
			t.Fatal(err)
		}
		sum += sess.LastSeq
	}
	if sum != writers*rounds {
		t.Errorf("LastSeq sums to %d; want %d", sum, writers*rounds)
	}
	if groups, _ := s.ClaimGroups(); groups == before {
		t.Errorf("no writes shared a transaction")
	}
}

// queueInGroup runs claims, each queued in turn on s's combiner (made busy
// until all queued), so that they run as one group.
func queueInGroup(t *testing.T, s *Store, claims ...func()) {
	t.Helper()
	c := s.group
	c.mu.Lock()
	c.running = c.inflight
	c.mu.Unlock()
	var wg sync.WaitGroup
	for i, claim := range claims {
		wg.Go(claim)
		for {
			c.mu.Lock()
			queued := len(c.queue)
			c.mu.Unlock()
			if queued == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	c.next()
	wg.Wait()
}

// The entries of a group are written at its COMMIT, so within the group
// an entry claimed earlier still looks pending: a pick after a claim by id
// of the oldest entry, and picks after picks, each take another session,
// all in one transaction; a second claim of a session in the group runs
// alone, after it, and sees the first's claim; a pick of an outpost with
// max_running after a claim of that outpost in the group runs alone, after
// it, and counts it.
func TestGroupPicksSkipHeld(t *testing.T) {
	t.Parallel()
	s := openGrouped(t)
	ctx := t.Context()
	now := time.Now()
	if err := s.CreateOutpost(ctx, store.Outpost{ID: "lim", Name: "l", Platform: api.PlatformLinux, CreatedAt: now, MaxRunning: 2}); err != nil {
		t.Fatal(err)
	}
	create := func(id, outpost string, at time.Time) {
		sess := store.Session{ID: id, OutpostID: outpost, Status: api.StatusNew, CreatedAt: at, UpdatedAt: at}
		e := &store.QueueEntry{OutpostID: outpost, Kind: api.KindNew, Platform: api.PlatformLinux, Phase: api.PhasePending, CreatedAt: at}
		if err := s.CreateSession(ctx, sess, e, nil); err != nil {
			t.Fatal(err)
		}
	}
	const picks = 5
	for i := range picks + 1 {
		create(fmt.Sprint("p", i), "op", now.Add(time.Duration(i)*time.Millisecond))
	}
	for i := range 4 {
		create(fmt.Sprint("l", i), "lim", now.Add(time.Duration(i)*time.Millisecond))
	}
	var tokens atomic.Int64
	var mu sync.Mutex
	got := map[string][]string{} // session → who was answered with its claim
	var errs []error
	answer := func(who string, m store.Mutation, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", who, err))
			return
		}
		got[m.Entry.SessionID] = append(got[m.Entry.SessionID], who)
	}
	var claims []func()
	for _, who := range []string{"id-1", "id-2"} {
		claims = append(claims, func() {
			m, err := s.ClaimSession(ctx, "p0", now, "", claimOnce(who, &tokens))
			answer(who, m, err)
		})
	}
	for i := range picks {
		who := fmt.Sprint("pick-", i)
		claims = append(claims, func() {
			m, err := s.ClaimNext(ctx, "op", now, "", store.NextFilter{Platform: api.PlatformLinux}, claimOnce(who, &tokens))
			answer(who, m, err)
		})
	}
	for i := range 3 {
		who := fmt.Sprint("lim-", i)
		claims = append(claims, func() {
			m, err := s.ClaimNext(ctx, "lim", now, "", store.NextFilter{Platform: api.PlatformLinux}, claimOnce(who, &tokens))
			answer(who, m, err)
		})
	}
	before, grouped := s.ClaimGroups()
	queueInGroup(t, s, claims...)
	after, groupedAfter := s.ClaimGroups()
	if after != before+1 || groupedAfter-grouped < picks+2 {
		t.Errorf("%d groups of %d claims; want one of at least %d", after-before, groupedAfter-grouped, picks+2)
	}
	for i := range picks + 1 {
		id := fmt.Sprint("p", i)
		if len(got[id]) != 1 {
			t.Errorf("%s claimed by %v; want one claimer", id, got[id])
		}
	}
	limited := len(got["l0"]) + len(got["l1"]) + len(got["l2"]) + len(got["l3"])
	conflicts := 0
	for _, err := range errs {
		switch {
		case strings.HasPrefix(err.Error(), "id-") && errors.Is(err, store.ErrConflict):
			conflicts++
		case strings.HasPrefix(err.Error(), "lim-") && (errors.Is(err, errAtCapacity) || errors.Is(err, store.ErrConflict)):
			// The two picks that run alone run side by side: one may
			// lose its pick to the other.
		default:
			t.Error(err)
		}
	}
	if limited != 2 || conflicts != 1 {
		t.Errorf("%d claims of the limited outpost, %d conflicts of p0's claimers (%v); want 2 and 1", limited, conflicts, errs)
	}
	entries, _, err := s.ListQueue(ctx, store.QueueFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if len(got[e.SessionID]) > 0 && (e.Phase != api.PhaseClaimed || e.AcceptorID != got[e.SessionID][0]) {
			t.Errorf("%s: %s by %q; want claimed by %v", e.SessionID, e.Phase, e.AcceptorID, got[e.SessionID])
		}
	}
}

// openGrouped opens a store on a new database whose claims share
// transactions (groups of up to 32), closed when t ends.
func openGrouped(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), pgtest.Shared(t).Database(t), WithClaimGroup(32))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
