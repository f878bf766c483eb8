package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// testSnapshots covers PutSnapshot, GetSnapshot, DeleteSnapshot and
// ListSnapshotsExpired: a session has one snapshot, a put replaces it and
// returns the old one, a delete of a replaced key keeps the new one, and
// snapshots of final sessions or older than the cutoff are listed.
func testSnapshots(t *testing.T, s store.Store) {
	if _, err := s.GetSnapshot(ctx(t), "ses_none"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSnapshot of a session without one: %v, want ErrNotFound", err)
	}
	for i, id := range []string{"ses_susp", "ses_ended", "ses_old"} {
		sess := newSession(id, "op", id, time.Duration(i)*time.Second)
		sess.Status = api.StatusSuspended
		if id == "ses_ended" {
			sess.Status, sess.EndedAt = api.StatusExit, ptr(at(time.Hour))
		}
		create(t, s, sess)
	}
	first := store.Snapshot{SessionID: "ses_susp", BlobKey: "k1", Size: 10, SHA256: "aa", Files: 2, Bytes: 30, Epoch: 1, CreatedAt: at(5 * time.Hour)}
	if _, err := s.PutSnapshot(ctx(t), first); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("first PutSnapshot: %v, want ErrNotFound (nothing replaced)", err)
	}
	second := first
	second.BlobKey, second.Size, second.Epoch, second.CreatedAt = "k2", 20, 2, at(6*time.Hour)
	prev, err := s.PutSnapshot(ctx(t), second)
	must(t, "second PutSnapshot", err)
	equal(t, "replaced snapshot", prev, first)
	got, err := s.GetSnapshot(ctx(t), "ses_susp")
	must(t, "GetSnapshot", err)
	equal(t, "stored snapshot", got, second)

	// A delete of the replaced key leaves the new snapshot alone.
	must(t, "delete replaced key", s.DeleteSnapshot(ctx(t), "ses_susp", "k1"))
	if _, err := s.GetSnapshot(ctx(t), "ses_susp"); err != nil {
		t.Fatalf("snapshot gone after deleting the replaced key: %v", err)
	}

	for _, sn := range []store.Snapshot{
		{SessionID: "ses_ended", BlobKey: "k3", Size: 1, SHA256: "bb", CreatedAt: at(7 * time.Hour)},
		{SessionID: "ses_old", BlobKey: "k4", Size: 1, SHA256: "cc", CreatedAt: at(1 * time.Hour)},
	} {
		if _, err := s.PutSnapshot(ctx(t), sn); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("PutSnapshot %s: %v", sn.SessionID, err)
		}
	}
	list, err := s.ListSnapshotsExpired(ctx(t), at(2*time.Hour), 0)
	must(t, "list expired", err)
	var ids []string
	for _, sn := range list {
		ids = append(ids, sn.SessionID)
	}
	equal(t, "expired snapshots", ids, []string{"ses_old", "ses_ended"})
	list, err = s.ListSnapshotsExpired(ctx(t), at(2*time.Hour), 1)
	must(t, "list expired with a limit", err)
	if len(list) != 1 || list[0].SessionID != "ses_old" {
		t.Errorf("first expired = %+v, want ses_old", list)
	}

	must(t, "delete", s.DeleteSnapshot(ctx(t), "ses_susp", "k2"))
	if _, err := s.GetSnapshot(ctx(t), "ses_susp"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSnapshot after delete: %v, want ErrNotFound", err)
	}
	must(t, "delete again", s.DeleteSnapshot(ctx(t), "ses_susp", "k2"))
}
