package sqlstore

import (
	"context"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
)

// ScanReplica reads the columns of ListReplicasSQL.
func ScanReplica(sc Scanner) (store.Replica, error) {
	var r store.Replica
	var started, seen int64
	if err := sc.Scan(&r.ID, &r.URL, &started, &seen); err != nil {
		return store.Replica{}, err
	}
	r.StartedAt, r.SeenAt = FromMS(started), FromMS(seen)
	return r, nil
}

// HeartbeatReplica inserts r, or updates its URL and SeenAt.
func (s *Store) HeartbeatReplica(ctx context.Context, r store.Replica) error {
	if _, err := s.db.Exec(ctx, UpsertReplicaSQL, r.ID, r.URL, MS(r.StartedAt), MS(r.SeenAt)); err != nil {
		return s.errorf(err, "heartbeat replica %s", r.ID)
	}
	return nil
}

// ListReplicas returns the replicas seen at or after since, by id.
func (s *Store) ListReplicas(ctx context.Context, since time.Time) ([]store.Replica, error) {
	rs, err := QueryAll(ctx, s.db, ScanReplica, ListReplicasSQL, MS(since))
	if err != nil {
		return nil, s.errorf(err, "list replicas")
	}
	return rs, nil
}

// DeleteReplica removes a replica's row; an absent one is no error.
func (s *Store) DeleteReplica(ctx context.Context, id string) error {
	if _, err := s.db.Exec(ctx, DeleteReplicaSQL, id); err != nil {
		return s.errorf(err, "delete replica %s", id)
	}
	return nil
}
