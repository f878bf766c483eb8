package storetest

import (
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
)

// testReplicas checks the replicas' heartbeat rows and a queue entry's
// owner.
func testReplicas(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := store.Replica{ID: "a", URL: "http://10.0.0.1:7420", StartedAt: at(0), SeenAt: at(0)}
	b := store.Replica{ID: "b", URL: "", StartedAt: at(time.Second), SeenAt: at(5 * time.Second)}
	must(t, "HeartbeatReplica a", s.HeartbeatReplica(ctx, a))
	must(t, "HeartbeatReplica b", s.HeartbeatReplica(ctx, b))
	got, err := s.ListReplicas(ctx, at(0))
	must(t, "ListReplicas", err)
	equal(t, "replicas", got, []store.Replica{a, b})

	// A heartbeat moves SeenAt and the URL, never StartedAt.
	a2 := store.Replica{ID: "a", URL: "http://10.0.0.2:7420", StartedAt: at(9 * time.Second), SeenAt: at(10 * time.Second)}
	must(t, "HeartbeatReplica a again", s.HeartbeatReplica(ctx, a2))
	got, err = s.ListReplicas(ctx, at(6*time.Second))
	must(t, "ListReplicas since", err)
	a2.StartedAt = a.StartedAt
	equal(t, "replicas seen since 6s", got, []store.Replica{a2})

	must(t, "DeleteReplica a", s.DeleteReplica(ctx, "a"))
	must(t, "DeleteReplica absent", s.DeleteReplica(ctx, "nobody"))
	got, err = s.ListReplicas(ctx, time.Time{})
	must(t, "ListReplicas after delete", err)
	equal(t, "replicas after delete", got, []store.Replica{b})

	// The owner of a queue entry round-trips through UpdateSession and
	// is kept by writes that leave it alone.
	sess := newSession("s1", "", "owned", 0)
	create(t, s, sess)
	e := setEntry(t, s, "s1", func(e *store.QueueEntry) { e.Owner = "a" })
	equal(t, "owner written", e.Owner, "a")
	got1, err := s.GetQueueEntry(ctx, "s1")
	must(t, "GetQueueEntry", err)
	equal(t, "owner read", got1.Owner, "a")
	setEntry(t, s, "s1", func(e *store.QueueEntry) { e.Priority = 3 })
	got1, err = s.GetQueueEntry(ctx, "s1")
	must(t, "GetQueueEntry after another write", err)
	equal(t, "owner kept", got1.Owner, "a")
	list, _, err := s.ListQueue(ctx, store.QueueFilter{})
	must(t, "ListQueue", err)
	if len(list) != 1 || list[0].Owner != "a" {
		t.Errorf("ListQueue owner = %+v, want a", list)
	}
}
