package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// HeartbeatReplica inserts r, or updates its URL and SeenAt.
func (s *Store) HeartbeatReplica(ctx context.Context, r store.Replica) error {
	if _, err := s.pool.Exec(ctx, sqlstore.UpsertReplicaSQL, r.ID, r.URL, sqlstore.MS(r.StartedAt), sqlstore.MS(r.SeenAt)); err != nil {
		return fmt.Errorf("postgres: heartbeat replica %s: %w", r.ID, mapErr(err))
	}
	return nil
}

// ListReplicas returns the replicas seen at or after since, by id.
func (s *Store) ListReplicas(ctx context.Context, since time.Time) ([]store.Replica, error) {
	rs, err := collect(sqlstore.ScanReplica)(s.pool.Query(ctx, sqlstore.ListReplicasSQL, sqlstore.MS(since)))
	if err != nil {
		return nil, fmt.Errorf("postgres: list replicas: %w", mapErr(err))
	}
	return rs, nil
}

// DeleteReplica removes a replica's row; an absent one is no error.
func (s *Store) DeleteReplica(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, sqlstore.DeleteReplicaSQL, id); err != nil {
		return fmt.Errorf("postgres: delete replica %s: %w", id, mapErr(err))
	}
	return nil
}
