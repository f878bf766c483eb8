package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

func testListQueue(t *testing.T, s store.Store) {
	// After setup, in rev order: p1 (A pending), c1 (A claimed by acc1),
	// p2 (B pending), gone (A tombstone), c2 (A claimed by acc2).
	entries := map[string]store.QueueEntry{}
	for _, sp := range []struct{ id, outpost string }{{"p1", "A"}, {"c1", "A"}, {"p2", "B"}, {"gone", "A"}, {"c2", "A"}} {
		create(t, s, newSession(sp.id, sp.outpost, sp.id, 0))
	}
	for _, id := range []string{"p1", "p2"} {
		entries[id] = setEntry(t, s, id, func(e *store.QueueEntry) { e.Kind = api.KindResume })
	}
	entries["c1"] = setEntry(t, s, "c1", claim("acc1", at(time.Minute)))
	entries["p2"] = setEntry(t, s, "p2", func(e *store.QueueEntry) { e.UpdatedAt = at(time.Second) })
	entries["gone"] = setEntry(t, s, "gone", func(e *store.QueueEntry) { e.Deleted = true })
	entries["c2"] = setEntry(t, s, "c2", claim("acc2", at(time.Minute)))
	pick := func(ids ...string) []store.QueueEntry {
		var out []store.QueueEntry
		for _, id := range ids {
			out = append(out, entries[id])
		}
		return out
	}
	for _, tc := range []struct {
		f     store.QueueFilter
		ids   []string
		total int
	}{
		{store.QueueFilter{}, []string{"p1", "c1", "p2", "c2"}, 4},
		{store.QueueFilter{OutpostID: "A"}, []string{"p1", "c1", "c2"}, 3},
		{store.QueueFilter{Phase: api.PhasePending}, []string{"p1", "p2"}, 2},
		{store.QueueFilter{Phase: api.PhaseClaimed, OutpostID: "A"}, []string{"c1", "c2"}, 2},
		{store.QueueFilter{AcceptorID: "acc1"}, []string{"c1"}, 1},
		{store.QueueFilter{OutpostID: "nope"}, nil, 0},
		{store.QueueFilter{AfterRev: entries["c1"].Rev}, []string{"p2", "c2"}, 4},
		{store.QueueFilter{Limit: 2}, []string{"p1", "c1"}, 4},
		{store.QueueFilter{AfterRev: entries["p1"].Rev, Limit: 1}, []string{"c1"}, 4},
		{store.QueueFilter{IncludeDeleted: true}, []string{"p1", "c1", "p2", "gone", "c2"}, 4},
		{store.QueueFilter{IncludeDeleted: true, OutpostID: "A", AfterRev: entries["p2"].Rev}, []string{"gone", "c2"}, 3},
		{store.QueueFilter{AfterRev: entries["c2"].Rev}, nil, 4},
		// NoTotal pages the same rows without counting them.
		{store.QueueFilter{IncludeDeleted: true, OutpostID: "A", AfterRev: entries["p2"].Rev, NoTotal: true}, []string{"gone", "c2"}, 0},
		{store.QueueFilter{Limit: 2, NoTotal: true}, []string{"p1", "c1"}, 0},
	} {
		got, total, err := s.ListQueue(ctx(t), tc.f)
		what := fmt.Sprintf("ListQueue(%+v)", tc.f)
		must(t, what, err)
		equal(t, what, got, pick(tc.ids...))
		if total != tc.total {
			t.Errorf("%s total = %d, want %d", what, total, tc.total)
		}
	}
	gone, err := s.GetQueueEntry(ctx(t), "gone")
	must(t, "get tombstone", err)
	if !gone.Deleted {
		t.Error("tombstone not marked deleted")
	}
	rev, err := s.MaxRev(ctx(t))
	must(t, "max rev", err)
	if rev != entries["c2"].Rev {
		t.Errorf("MaxRev = %d, want %d", rev, entries["c2"].Rev)
	}
}

func testLapsedClaims(t *testing.T, s store.Store) {
	now := at(time.Hour)
	for _, id := range []string{"before", "at", "after", "pending", "deleted", "live", "was-live"} {
		create(t, s, newSession(id, "op", id, 0))
	}
	// A claim whose deadline passed holds while its remote keeps it alive,
	// and lapses at the later of the two times.
	setEntry(t, s, "live", func(e *store.QueueEntry) {
		claim("acc", now.Add(-time.Minute))(e)
		e.LiveUntil = now.Add(time.Second)
	})
	setEntry(t, s, "was-live", func(e *store.QueueEntry) {
		claim("acc", now.Add(-time.Hour))(e)
		e.LiveUntil = now.Add(-time.Millisecond)
	})
	setEntry(t, s, "before", claim("acc", now.Add(-time.Minute)))
	setEntry(t, s, "at", claim("acc", now))
	setEntry(t, s, "after", claim("acc", now.Add(time.Millisecond)))
	setEntry(t, s, "deleted", func(e *store.QueueEntry) {
		claim("acc", now.Add(-time.Minute))(e)
		e.Deleted = true
	})
	ids, err := s.LapsedClaims(ctx(t), now)
	must(t, "lapsed claims", err)
	slices.Sort(ids)
	equal(t, "lapsed claims", ids, []string{"at", "before", "was-live"})
	live, err := s.GetQueueEntry(ctx(t), "live")
	must(t, "get live", err)
	equal(t, "live until", live.LiveUntil, now.Add(time.Second))
	if !live.Held(now) || live.Held(now.Add(time.Second)) {
		t.Errorf("Held of an entry live until now+1s: at now %v, at now+1s %v; want true, false", live.Held(now), live.Held(now.Add(time.Second)))
	}
	ids, err = s.LapsedClaims(ctx(t), now.Add(time.Second))
	must(t, "lapsed claims", err)
	slices.Sort(ids)
	equal(t, "lapsed claims a second later", ids, []string{"after", "at", "before", "live", "was-live"})

	ids, err = s.LapsedClaims(ctx(t), base)
	must(t, "lapsed claims", err)
	if len(ids) != 0 {
		t.Errorf("lapsed claims at base = %v, want none", ids)
	}
}

func testActiveSessions(t *testing.T, s store.Store) {
	ids, err := s.ActiveSessions(ctx(t))
	must(t, "active sessions of empty store", err)
	if len(ids) != 0 {
		t.Errorf("active sessions of empty store = %v", ids)
	}
	for i, st := range []string{api.StatusNew, api.StatusClaimed, api.StatusRunning, api.StatusExit,
		api.StatusError, api.StatusSuspended, api.StatusResuming} {
		sess := newSession(st, "op", st, time.Duration(i)*time.Second)
		sess.Status = st
		if api.IsFinal(st) {
			ran := at(time.Duration(i) * time.Second)
			sess.StartedAt = &ran // they ran, and ended
		}
		create(t, s, sess)
	}
	ids, err = s.ActiveSessions(ctx(t))
	must(t, "active sessions", err)
	slices.Sort(ids)
	equal(t, "active sessions", ids, []string{api.StatusClaimed, api.StatusNew, api.StatusResuming,
		api.StatusRunning, api.StatusSuspended})

	// The started ones not ended in one read, oldest first, without their
	// secrets: a session back in the queue after it ran (resuming,
	// started) is among them; one that never started, or ended, is not.
	started := at(time.Minute)
	for _, id := range []string{api.StatusRunning, api.StatusSuspended} {
		if _, err := s.UpdateSession(ctx(t), id, func(cur store.Session, _ store.QueueEntry) (store.Mutation, error) {
			cur.StartedAt = &started
			return store.Mutation{Session: &cur}, nil
		}); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
	}
	sess := newSession("requeued", "op", "s", time.Hour)
	sess.Status = api.StatusResuming
	sess.Secrets = map[string]string{"TOKEN": "hush"}
	sess.Spec.Limits.MaxDurationS = 60
	sess.StartedAt = &started
	create(t, s, sess)
	list, err := s.ListStartedSessions(ctx(t))
	must(t, "list started sessions", err)
	var got []string
	for _, l := range list {
		got = append(got, l.ID)
	}
	equal(t, "listed started sessions", got, []string{api.StatusRunning, api.StatusSuspended, "requeued"})
	last := list[len(list)-1]
	if last.Secrets != nil || last.Spec.Limits.MaxDurationS != 60 || last.Status != api.StatusResuming || !last.CreatedAt.Equal(sess.CreatedAt) ||
		last.StartedAt == nil || !last.StartedAt.Equal(started) {
		t.Errorf("listed session: secrets %v, max_duration_s %d, status %s, created %v, started %v", last.Secrets, last.Spec.Limits.MaxDurationS, last.Status, last.CreatedAt, last.StartedAt)
	}
}

func testKeepAlive(t *testing.T, s store.Store) {
	now := at(time.Hour)
	for _, id := range []string{"a", "b", "moved", "pending", "deleted"} {
		create(t, s, newSession(id, "op", id, 0))
	}
	a := setEntry(t, s, "a", claim("acc", now))
	b := setEntry(t, s, "b", claim("acc", now))
	moved := setEntry(t, s, "moved", claim("acc", now))
	moved = setEntry(t, s, "moved", claim("other", now)) // a new epoch
	del := setEntry(t, s, "deleted", func(e *store.QueueEntry) {
		claim("acc", now)(e)
		e.Deleted = true
	})
	rev, err := s.MaxRev(ctx(t))
	must(t, "max rev", err)

	until := now.Add(time.Minute)
	must(t, "keep alive", s.KeepAlive(ctx(t), until,
		store.Lease{SessionID: "a", Epoch: a.Epoch},
		store.Lease{SessionID: "b", Epoch: b.Epoch},
		store.Lease{SessionID: "moved", Epoch: moved.Epoch - 1},
		store.Lease{SessionID: "pending", Epoch: 0},
		store.Lease{SessionID: "deleted", Epoch: del.Epoch},
		store.Lease{SessionID: "missing", Epoch: 1}))
	must(t, "keep alive nothing", s.KeepAlive(ctx(t), until))
	for id, want := range map[string]time.Time{"a": until, "b": until, "moved": {}, "pending": {}, "deleted": {}} {
		e, err := s.GetQueueEntry(ctx(t), id)
		must(t, "get "+id, err)
		equal(t, "live until of "+id, e.LiveUntil, want)
	}
	// It never lowers the time, and it is no change watchers hear of.
	must(t, "keep alive earlier", s.KeepAlive(ctx(t), now, store.Lease{SessionID: "a", Epoch: a.Epoch}))
	got, err := s.GetQueueEntry(ctx(t), "a")
	must(t, "get a", err)
	equal(t, "live until after an earlier keep-alive", got.LiveUntil, until)
	equal(t, "rev of a", got.Rev, a.Rev)
	after, err := s.MaxRev(ctx(t))
	must(t, "max rev", err)
	if after != rev {
		t.Errorf("MaxRev after KeepAlive = %d, want %d (unchanged)", after, rev)
	}
	ids, err := s.LapsedClaims(ctx(t), now.Add(time.Second))
	must(t, "lapsed claims", err)
	slices.Sort(ids)
	equal(t, "lapsed claims while kept alive", ids, []string{"moved"})

	// Within an epoch an entry written with an older LiveUntil (one read
	// before a KeepAlive) does not lower it.
	setEntry(t, s, "b", func(e *store.QueueEntry) { e.LiveUntil = now })
	got, err = s.GetQueueEntry(ctx(t), "b")
	must(t, "get b", err)
	equal(t, "live until after a write of an older one", got.LiveUntil, until)

	// UpdateSession sees and keeps LiveUntil; a requeue clears it.
	m, err := s.UpdateSession(ctx(t), "a", func(_ store.Session, e store.QueueEntry) (store.Mutation, error) {
		equal(t, "live until seen by UpdateSession", e.LiveUntil, until)
		e.ClaimDeadline = now.Add(time.Hour)
		return store.Mutation{Entry: &e}, nil
	})
	must(t, "renew", err)
	got, err = s.GetQueueEntry(ctx(t), "a")
	must(t, "get a", err)
	equal(t, "entry after renewal", got, *m.Entry)
	setEntry(t, s, "a", func(e *store.QueueEntry) {
		e.Phase, e.AcceptorID, e.ClaimDeadline, e.LiveUntil = api.PhasePending, "", time.Time{}, time.Time{}
		e.Epoch++
	})
	got, err = s.GetQueueEntry(ctx(t), "a")
	must(t, "get a", err)
	if !got.LiveUntil.IsZero() {
		t.Errorf("live until after requeue = %v, want zero", got.LiveUntil)
	}
}

func testClaimsOfToken(t *testing.T, s store.Store) {
	for _, id := range []string{"a1", "a2", "b1", "pending", "deleted", "next", "cleared"} {
		create(t, s, newSession(id, "op", id, 0))
	}
	byToken := func(tok string, deadline time.Time) func(e *store.QueueEntry) {
		return func(e *store.QueueEntry) {
			claim("acc", deadline)(e)
			e.ClaimTokenID = tok
		}
	}
	setEntry(t, s, "a1", byToken("tokA", at(time.Hour)))
	// A claim past its deadline is still the token's until it is requeued.
	setEntry(t, s, "a2", byToken("tokA", at(-time.Hour)))
	setEntry(t, s, "b1", byToken("tokB", at(time.Hour)))
	setEntry(t, s, "pending", func(e *store.QueueEntry) { e.ClaimTokenID = "tokA" })
	setEntry(t, s, "deleted", func(e *store.QueueEntry) {
		byToken("tokA", at(time.Hour))(e)
		e.Deleted = true
	})
	setEntry(t, s, "cleared", byToken("tokA", at(time.Hour)))
	got := setEntry(t, s, "cleared", func(e *store.QueueEntry) {
		e.Phase, e.AcceptorID, e.ClaimTokenID = api.PhasePending, "", ""
	})
	equal(t, "cleared claim token", got.ClaimTokenID, "")
	// ClaimSession and ClaimNext write it too.
	_, err := s.ClaimSession(ctx(t), "next", base, "", func(_ store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
		byToken("tokA", at(time.Hour))(&e)
		return store.Mutation{Entry: &e}, nil
	})
	must(t, "ClaimSession", err)

	a1, err := s.GetQueueEntry(ctx(t), "a1")
	must(t, "get a1", err)
	equal(t, "a1 claim token", a1.ClaimTokenID, "tokA")
	cleared, err := s.GetQueueEntry(ctx(t), "cleared")
	must(t, "get cleared", err)
	equal(t, "cleared claim token, read back", cleared.ClaimTokenID, "")
	rows, _, err := s.ListQueue(ctx(t), store.QueueFilter{OutpostID: "op"})
	must(t, "ListQueue", err)
	for _, e := range rows {
		if e.SessionID == "b1" {
			equal(t, "listed b1 claim token", e.ClaimTokenID, "tokB")
		}
	}

	ids, err := s.ClaimsOfToken(ctx(t), "tokA")
	must(t, "claims of tokA", err)
	slices.Sort(ids)
	equal(t, "claims of tokA", ids, []string{"a1", "a2", "next"})
	ids, err = s.ClaimsOfToken(ctx(t), "tokB")
	must(t, "claims of tokB", err)
	equal(t, "claims of tokB", ids, []string{"b1"})
	for _, tok := range []string{"", "tokZ"} {
		ids, err = s.ClaimsOfToken(ctx(t), tok)
		must(t, "claims of "+tok, err)
		if len(ids) != 0 {
			t.Errorf("claims of %q = %v, want none", tok, ids)
		}
	}

	// ClaimNext writes it as the claim's transaction says.
	create(t, s, newSession("c1", "op2", "c1", 0))
	_, err = s.ClaimNext(ctx(t), "op2", base, "", store.NextFilter{}, func(_ store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
		byToken("tokC", at(time.Hour))(&e)
		return store.Mutation{Entry: &e}, nil
	})
	must(t, "ClaimNext", err)
	ids, err = s.ClaimsOfToken(ctx(t), "tokC")
	must(t, "claims of tokC", err)
	equal(t, "claims of tokC", ids, []string{"c1"})
}
