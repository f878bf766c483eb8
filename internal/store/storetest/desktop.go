package storetest

import (
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// testOutpostDesktop checks an outpost's desktop setting: written by
// CreateOutpost and SetOutpostLimits, read by GetOutpost and
// ListOutposts, nil round-tripping as nil.
func testOutpostDesktop(t *testing.T, s store.Store) {
	d := &api.OutpostDesktop{Enabled: true, Width: 1024, Height: 768}
	o := newOutpost("op-desk", "desk")
	o.Desktop = d
	must(t, "create outpost", s.CreateOutpost(ctx(t), o))
	got, err := s.GetOutpost(ctx(t), o.ID)
	must(t, "get outpost", err)
	equal(t, "outpost", got, o)

	must(t, "clear the desktop", s.SetOutpostLimits(ctx(t), o.ID, store.OutpostLimits{}))
	got, err = s.GetOutpost(ctx(t), o.ID)
	must(t, "get outpost", err)
	equal(t, "desktop after clearing", got.Desktop, (*api.OutpostDesktop)(nil))

	off := &api.OutpostDesktop{Width: 800, Height: 600}
	must(t, "set the desktop", s.SetOutpostLimits(ctx(t), o.ID, store.OutpostLimits{Desktop: off}))
	all, err := s.ListOutposts(ctx(t))
	must(t, "list outposts", err)
	for _, a := range all {
		if a.ID == o.ID {
			equal(t, "listed desktop", a.Desktop, off)
		}
	}

	plain := newOutpost("op-nodesk", "nodesk")
	must(t, "create outpost without a desktop", s.CreateOutpost(ctx(t), plain))
	got, err = s.GetOutpost(ctx(t), plain.ID)
	must(t, "get outpost", err)
	equal(t, "no desktop", got.Desktop, (*api.OutpostDesktop)(nil))
}
