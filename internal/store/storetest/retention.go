package storetest

import (
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// testArtifactRetention covers ListArtifactsExpired and MarkArtifactsPruned:
// only final sessions that ended before the cutoff are listed, earliest
// first, and marking is idempotent, skips sessions that are not final and
// survives later updates.
func testArtifactRetention(t *testing.T, s store.Store) {
	ids, err := s.ListArtifactsExpired(ctx(t), at(1000*time.Hour), 10)
	must(t, "list expired of empty store", err)
	if len(ids) != 0 {
		t.Errorf("expired of empty store = %v", ids)
	}
	type fixture struct {
		id, status string
		ended      *time.Time
	}
	for i, f := range []fixture{
		{"ses_b", api.StatusError, ptr(at(2 * time.Hour))},
		{"ses_a", api.StatusExit, ptr(at(1 * time.Hour))},
		{"ses_c", api.StatusExit, ptr(at(2 * time.Hour))}, // ties with ses_b: by id
		{"ses_late", api.StatusExit, ptr(at(10 * time.Hour))},
		{"ses_running", api.StatusRunning, nil},
		// Not final, whatever its ended_at says: never listed.
		{"ses_odd", api.StatusSuspended, ptr(at(1 * time.Hour))},
		{"ses_new", api.StatusNew, nil},
	} {
		sess := newSession(f.id, "op", f.id, time.Duration(i)*time.Second)
		sess.Status, sess.EndedAt = f.status, f.ended
		create(t, s, sess)
	}

	ids, err = s.ListArtifactsExpired(ctx(t), at(5*time.Hour), 10)
	must(t, "list expired", err)
	equal(t, "expired before base+5h", ids, []string{"ses_a", "ses_b", "ses_c"})
	ids, err = s.ListArtifactsExpired(ctx(t), at(5*time.Hour), 2)
	must(t, "list expired with a limit", err)
	equal(t, "first 2 expired", ids, []string{"ses_a", "ses_b"})
	ids, err = s.ListArtifactsExpired(ctx(t), at(1*time.Hour), 10)
	must(t, "list expired at the cutoff", err)
	if len(ids) != 0 {
		t.Errorf("expired strictly before base+1h = %v, want none", ids)
	}

	// Marking skips sessions that are not final and unknown ids.
	n, err := s.MarkArtifactsPruned(ctx(t), []string{"ses_a", "ses_running", "ses_odd", "ses_nope"}, at(100*time.Hour))
	must(t, "mark pruned", err)
	if n != 1 {
		t.Errorf("marked %d sessions, want 1", n)
	}
	got, err := s.GetSession(ctx(t), "ses_a")
	must(t, "get ses_a", err)
	equal(t, "ses_a pruned at", got.ArtifactsPrunedAt, ptr(at(100*time.Hour)))
	for _, id := range []string{"ses_running", "ses_odd", "ses_b"} {
		got, err := s.GetSession(ctx(t), id)
		must(t, "get "+id, err)
		if got.ArtifactsPrunedAt != nil {
			t.Errorf("%s pruned at %v, want nil", id, got.ArtifactsPrunedAt)
		}
	}
	ids, err = s.ListArtifactsExpired(ctx(t), at(5*time.Hour), 10)
	must(t, "list expired after marking", err)
	equal(t, "expired after marking ses_a", ids, []string{"ses_b", "ses_c"})

	// Marking again changes nothing.
	n, err = s.MarkArtifactsPruned(ctx(t), []string{"ses_a"}, at(200*time.Hour))
	must(t, "mark pruned again", err)
	if n != 0 {
		t.Errorf("marked %d sessions again, want 0", n)
	}
	n, err = s.MarkArtifactsPruned(ctx(t), nil, at(200*time.Hour))
	must(t, "mark no sessions", err)
	if n != 0 {
		t.Errorf("marked %d of no sessions", n)
	}

	// UpdateSession shows the mark to fn and keeps it.
	var seen *time.Time
	_, err = s.UpdateSession(ctx(t), "ses_a", func(sess store.Session, _ store.QueueEntry) (store.Mutation, error) {
		seen = sess.ArtifactsPrunedAt
		sess.Reason = "updated"
		sess.ArtifactsPrunedAt = nil
		return store.Mutation{Session: &sess}, nil
	})
	must(t, "update ses_a", err)
	equal(t, "fn sees pruned at", seen, ptr(at(100*time.Hour)))
	got, err = s.GetSession(ctx(t), "ses_a")
	must(t, "get ses_a after update", err)
	equal(t, "ses_a pruned at after update", got.ArtifactsPrunedAt, ptr(at(100*time.Hour)))
	if got.Reason != "updated" {
		t.Errorf("ses_a reason %q, want updated", got.Reason)
	}

	// Listed sessions are earliest ended first across pages of marking.
	n, err = s.MarkArtifactsPruned(ctx(t), []string{"ses_b", "ses_c"}, at(100*time.Hour))
	must(t, "mark ses_b and ses_c", err)
	if n != 2 {
		t.Errorf("marked %d, want 2", n)
	}
	ids, err = s.ListArtifactsExpired(ctx(t), at(1000*time.Hour), 10)
	must(t, "list expired at the end", err)
	equal(t, "expired at base+1000h", ids, []string{"ses_late"})
}
