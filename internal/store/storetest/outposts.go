package storetest

import (
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

func testOutposts(t *testing.T, s store.Store) {
	a, b := newOutpost("op-a", "zeta"), newOutpost("op-b", "alpha")
	b.Platform, b.CreatedAt = api.PlatformMacOS, at(time.Hour)
	must(t, "create a", s.CreateOutpost(ctx(t), a))
	must(t, "create b", s.CreateOutpost(ctx(t), b))

	got, err := s.GetOutpost(ctx(t), "op-a")
	must(t, "get by id", err)
	equal(t, "get by id", got, a)
	got, err = s.GetOutpost(ctx(t), "alpha")
	must(t, "get by name", err)
	equal(t, "get by name", got, b)

	_, err = s.GetOutpost(ctx(t), "nope")
	wantErr(t, "get missing", err, store.ErrNotFound)
	wantErr(t, "duplicate name", s.CreateOutpost(ctx(t), newOutpost("op-c", "zeta")), store.ErrConflict)
	wantErr(t, "duplicate id", s.CreateOutpost(ctx(t), newOutpost("op-a", "other")), store.ErrConflict)

	list, err := s.ListOutposts(ctx(t))
	must(t, "list", err)
	equal(t, "list by name", list, []store.Outpost{b, a})

	must(t, "delete", s.DeleteOutpost(ctx(t), "op-b"))
	wantErr(t, "delete again", s.DeleteOutpost(ctx(t), "op-b"), store.ErrNotFound)
	_, err = s.GetOutpost(ctx(t), "op-b")
	wantErr(t, "get deleted", err, store.ErrNotFound)
	list, err = s.ListOutposts(ctx(t))
	must(t, "list", err)
	equal(t, "list after delete", list, []store.Outpost{a})
	// The deleted name is free again.
	must(t, "reuse name", s.CreateOutpost(ctx(t), newOutpost("op-d", "alpha")))
}

// testOutpostAllowedOrgIDs checks that a list of org ids, an empty list
// and no list (nil) each read back as written, through get and list.
func testOutpostAllowedOrgIDs(t *testing.T, s store.Store) {
	unset := newOutpost("op-unset", "a-unset")
	empty := newOutpost("op-empty", "b-empty")
	empty.AllowedOrgIDs = []string{}
	some := newOutpost("op-some", "c-some")
	some.AllowedOrgIDs = []string{"org-2f9990d15a5d4f139af863bdff50b3ae", "org-1", "org_x.y:z"}
	for _, o := range []store.Outpost{unset, empty, some} {
		must(t, "create "+o.Name, s.CreateOutpost(ctx(t), o))
		got, err := s.GetOutpost(ctx(t), o.ID)
		must(t, "get "+o.Name, err)
		equal(t, "get "+o.Name, got, o) // DeepEqual tells nil from empty
	}
	list, err := s.ListOutposts(ctx(t))
	must(t, "list", err)
	equal(t, "list", list, []store.Outpost{unset, empty, some})
}

func testOutpostStats(t *testing.T, s store.Store) {
	must(t, "create outpost", s.CreateOutpost(ctx(t), newOutpost("op", "op")))
	now := at(time.Hour)
	for _, id := range []string{"p1", "p2", "live", "lapsed", "gone", "gone-claimed", "kept-alive", "no-longer-alive", "ended"} {
		create(t, s, newSession(id, "op", id, 0))
	}
	create(t, s, newSession("other", "op2", "other", 0))
	setEntry(t, s, "live", claim("acc", now.Add(time.Second)))
	setEntry(t, s, "lapsed", claim("acc", now))
	setEntry(t, s, "kept-alive", func(e *store.QueueEntry) {
		claim("acc", now.Add(-time.Minute))(e)
		e.LiveUntil = now.Add(time.Second)
	})
	setEntry(t, s, "no-longer-alive", func(e *store.QueueEntry) {
		claim("acc", now.Add(-time.Minute))(e)
		e.LiveUntil = now
	})
	setEntry(t, s, "gone", func(e *store.QueueEntry) { e.Deleted = true })
	// Listed (pending) until the sweep, but no session waiting for a
	// machine: not in the queue's depth.
	setEntry(t, s, "ended", func(e *store.QueueEntry) { e.SessionStatus = api.QueueSessionTerminated })
	setEntry(t, s, "gone-claimed", func(e *store.QueueEntry) {
		claim("acc", now.Add(time.Minute))(e)
		e.Deleted = true
	})

	depth, active, err := s.OutpostStats(ctx(t), "op", now)
	must(t, "stats", err)
	if depth != 2 || active != 2 {
		t.Errorf("stats = depth %d, active %d; want 2, 2", depth, active)
	}
	depth, active, err = s.OutpostStats(ctx(t), "empty", now)
	must(t, "stats of empty", err)
	if depth != 0 || active != 0 {
		t.Errorf("stats of empty = depth %d, active %d; want 0, 0", depth, active)
	}
}
