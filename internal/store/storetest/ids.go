package storetest

import (
	"slices"
	"testing"

	"github.com/outpost-sh/outpost/internal/store"
)

// testMixedIDShapes checks ids of both shapes the server has minted — the
// older "ses_…"/"outpost_…" and today's "devin-…"/"outpost_env-…" — side
// by side in one outpost, created in the same millisecond so that only the
// ids order them: each is read back, and paging the sessions, paging the
// queue and ClaimNext each give every session exactly once.
func testMixedIDShapes(t *testing.T, s store.Store) {
	const oldOutpost, freshOutpost = "outpost_abcdefghij23", "outpost_env-abcdefghij234567"
	must(t, "create old outpost", s.CreateOutpost(ctx(t), newOutpost(oldOutpost, "legacy")))
	must(t, "create new outpost", s.CreateOutpost(ctx(t), newOutpost(freshOutpost, "fresh")))
	ids := []string{"ses_abcdefghij23", "devin-abcdefghij234567", "ses_abcdefghij24", "devin-abcdefghij234568"}
	for _, id := range ids {
		create(t, s, newSession(id, oldOutpost, "t", 0))
	}
	create(t, s, newSession("devin-abcdefghij234569", freshOutpost, "t", 0))
	for _, id := range ids {
		sess, err := s.GetSession(ctx(t), id)
		must(t, "GetSession "+id, err)
		e, err := s.GetQueueEntry(ctx(t), id)
		must(t, "GetQueueEntry "+id, err)
		if sess.ID != id || sess.OutpostID != oldOutpost || e.SessionID != id || e.OutpostID != oldOutpost {
			t.Errorf("%s reads back as session %s of %s, entry %s of %s", id, sess.ID, sess.OutpostID, e.SessionID, e.OutpostID)
		}
	}
	for _, ref := range []string{oldOutpost, "legacy", freshOutpost, "fresh"} {
		o, err := s.GetOutpost(ctx(t), ref)
		must(t, "GetOutpost "+ref, err)
		if o.ID != ref && o.Name != ref {
			t.Errorf("GetOutpost(%q) = %s (%s)", ref, o.ID, o.Name)
		}
	}
	once := func(what string, got []string) {
		t.Helper()
		if len(got) != len(ids) || !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(ids))) {
			t.Errorf("%s gave %v, want each of %v once", what, got, ids)
		}
	}

	var listed []string
	f := store.SessionFilter{OutpostID: oldOutpost, Limit: 1}
	for range 10 {
		page, total, err := s.ListSessions(ctx(t), f)
		must(t, "ListSessions", err)
		if total != len(ids) {
			t.Errorf("ListSessions total %d, want %d", total, len(ids))
		}
		if len(page) == 0 {
			break
		}
		listed = append(listed, page[0].ID)
		f.BeforeCreated, f.BeforeID = page[0].CreatedAt, page[0].ID
	}
	once("ListSessions in pages of one", listed)

	listed = nil
	q := store.QueueFilter{OutpostID: oldOutpost, Limit: 1}
	for range 10 {
		page, _, err := s.ListQueue(ctx(t), q)
		must(t, "ListQueue", err)
		if len(page) == 0 {
			break
		}
		listed = append(listed, page[0].SessionID)
		q.AfterRev = page[0].Rev
	}
	once("ListQueue in pages of one", listed)

	once("ClaimNext", claimNextIDs(t, s, oldOutpost, store.NextFilter{}))
}
