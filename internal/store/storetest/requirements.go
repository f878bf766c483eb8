package storetest

import (
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// testRequirements checks that a queue entry keeps its requirements as
// written, through creation and updates, and that ClaimNext picks an entry
// with requirements only when the filter lets it (Placed).
func testRequirements(t *testing.T, s store.Store) {
	must(t, "create outpost", s.CreateOutpost(ctx(t), newOutpost("op", "o")))
	withReqs := newOutpost("op2", "o2")
	withReqs.Requirements = &api.Requirements{GPUs: 1, Labels: map[string]string{"zone": "a"}}
	must(t, "create outpost with requirements", s.CreateOutpost(ctx(t), withReqs))
	o, err := s.GetOutpost(ctx(t), "op2")
	must(t, "get outpost", err)
	if o.Requirements == nil || o.Requirements.GPUs != 1 || o.Requirements.Labels["zone"] != "a" {
		t.Fatalf("outpost requirements read back as %+v", o.Requirements)
	}
	if o, err := s.GetOutpost(ctx(t), "op"); err != nil || o.Requirements != nil {
		t.Fatalf("outpost without requirements: %+v, %v", o.Requirements, err)
	}
	want := &api.Requirements{Labels: map[string]string{"gpu": "h200"}, GPUs: 2, GPUMemoryGiB: 80, GPUModel: "*H200*", CPUs: 8, MemoryGiB: 64}
	sess := newSession("gpu", "op", "t", 0)
	e := newEntry(sess)
	e.Requirements = want
	e.Priority = 5
	must(t, "create gpu", s.CreateSession(ctx(t), sess, e, nil))
	create(t, s, newSession("plain", "op", "t", 0))

	got, err := s.GetQueueEntry(ctx(t), "gpu")
	must(t, "get gpu", err)
	r := got.Requirements
	if r == nil || r.GPUs != 2 || r.GPUMemoryGiB != 80 || r.GPUModel != "*H200*" || r.CPUs != 8 || r.MemoryGiB != 64 || r.Labels["gpu"] != "h200" {
		t.Fatalf("requirements read back as %+v, want %+v", r, want)
	}
	plain, err := s.GetQueueEntry(ctx(t), "plain")
	must(t, "get plain", err)
	if plain.Requirements != nil {
		t.Fatalf("an entry without requirements reads back %+v", plain.Requirements)
	}
	// An update keeps them.
	setEntry(t, s, "gpu", func(e *store.QueueEntry) { e.Attempts = 1 })
	got, err = s.GetQueueEntry(ctx(t), "gpu")
	must(t, "get gpu after an update", err)
	if got.Requirements == nil || got.Requirements.GPUs != 2 {
		t.Fatalf("requirements after an update: %+v", got.Requirements)
	}

	equal(t, "picks of a claimer with no machine", claimNextIDs(t, s, "op", store.NextFilter{}), []string{"plain"})
	setEntry(t, s, "plain", func(e *store.QueueEntry) { e.Phase, e.AcceptorID = api.PhasePending, "" })
	equal(t, "picks of a claimer with a machine", claimNextIDs(t, s, "op", store.NextFilter{Placed: true}), []string{"gpu", "plain"})
}
