package storetest

import (
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// testNetworkPolicy checks the three network policies: an outpost's
// (CreateOutpost, SetOutpostLimits), a session's own (CreateSession, and
// UpdateSession's state) and an entry's effective one (written with the
// entry, a change of it a new rev); nil round-trips as nil everywhere.
func testNetworkPolicy(t *testing.T, s store.Store) {
	op := &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{
		{Hostname: "*.example.test"}, {IPv4: "10.1.0.0/16", Ports: []int{80, 443}}, {IPv6: "fd00::/8"}}}
	own := &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "a.example.test", Ports: []int{443}}}}

	o := newOutpost("op-net", "net")
	o.NetworkPolicy = op
	must(t, "create outpost", s.CreateOutpost(ctx(t), o))
	got, err := s.GetOutpost(ctx(t), o.ID)
	must(t, "get outpost", err)
	equal(t, "outpost", got, o)
	must(t, "clear the outpost's policy", s.SetOutpostLimits(ctx(t), o.ID, store.OutpostLimits{}))
	got, err = s.GetOutpost(ctx(t), o.ID)
	must(t, "get outpost", err)
	equal(t, "outpost policy after clearing", got.NetworkPolicy, nil)
	must(t, "set the outpost's policy", s.SetOutpostLimits(ctx(t), o.ID, store.OutpostLimits{NetworkPolicy: op}))
	all, err := s.ListOutposts(ctx(t))
	must(t, "list outposts", err)
	equal(t, "listed outpost policy", all[0].NetworkPolicy, op)

	// A session following its outpost's policy, and one with its own.
	plain := newSession("s-follow", o.ID, "follows", 0)
	e := newEntry(plain)
	e.NetworkPolicy = op
	must(t, "create s-follow", s.CreateSession(ctx(t), plain, e, nil))
	mine := newSession("s-own", o.ID, "own", 1)
	mine.NetworkPolicy = own
	e2 := newEntry(mine)
	e2.NetworkPolicy = own
	must(t, "create s-own", s.CreateSession(ctx(t), mine, e2, nil))

	gs, err := s.GetSession(ctx(t), "s-follow")
	must(t, "get s-follow", err)
	equal(t, "s-follow's own policy", gs.NetworkPolicy, nil)
	gs, err = s.GetSession(ctx(t), "s-own")
	must(t, "get s-own", err)
	equal(t, "s-own's own policy", gs.NetworkPolicy, own)
	ge, err := s.GetQueueEntry(ctx(t), "s-follow")
	must(t, "get s-follow's entry", err)
	equal(t, "s-follow's effective policy", ge.NetworkPolicy, op)
	listed, _, err := s.ListQueue(ctx(t), store.QueueFilter{OutpostID: o.ID})
	must(t, "list queue", err)
	equal(t, "listed effective policies", []*api.NetworkPolicy{listed[0].NetworkPolicy, listed[1].NetworkPolicy}, []*api.NetworkPolicy{op, own})

	// UpdateSession writes the session's own policy and the entry's
	// effective one in one step, under a new rev; a session change that
	// leaves the policy alone keeps it.
	before := ge.Rev
	m, err := s.UpdateSession(ctx(t), "s-follow", func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		equal(t, "policy fn reads", sess.NetworkPolicy, nil)
		sess.NetworkPolicy, e.NetworkPolicy = own, own
		return store.Mutation{Session: &sess, Entry: &e}, nil
	})
	must(t, "set s-follow's policy", err)
	if m.Entry.Rev <= before {
		t.Errorf("the policy change kept rev %d (was %d)", m.Entry.Rev, before)
	}
	_, err = s.UpdateSession(ctx(t), "s-follow", func(sess store.Session, _ store.QueueEntry) (store.Mutation, error) {
		equal(t, "policy fn reads after the change", sess.NetworkPolicy, own)
		sess.Reason = "something else"
		return store.Mutation{Session: &sess}, nil
	})
	must(t, "change s-follow's reason", err)
	gs, err = s.GetSession(ctx(t), "s-follow")
	must(t, "get s-follow", err)
	equal(t, "s-follow's own policy after the change", gs.NetworkPolicy, own)
	ge, err = s.GetQueueEntry(ctx(t), "s-follow")
	must(t, "get s-follow's entry", err)
	equal(t, "s-follow's effective policy after the change", ge.NetworkPolicy, own)
	// And clears them.
	setEntry(t, s, "s-own", func(e *store.QueueEntry) { e.NetworkPolicy = nil })
	ge, err = s.GetQueueEntry(ctx(t), "s-own")
	must(t, "get s-own's entry", err)
	equal(t, "s-own's cleared effective policy", ge.NetworkPolicy, nil)
}
