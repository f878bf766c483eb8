package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// HeartbeatReplica inserts r, or updates its URL and SeenAt.
func (s *Store) HeartbeatReplica(ctx context.Context, r store.Replica) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, sqlstore.UpsertReplicaSQL, r.ID, r.URL, sqlstore.MS(r.StartedAt), sqlstore.MS(r.SeenAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: heartbeat replica %s: %w", r.ID, mapErr(err))
	}
	return nil
}

// ListReplicas returns the replicas seen at or after since, by id.
func (s *Store) ListReplicas(ctx context.Context, since time.Time) ([]store.Replica, error) {
	rows, err := s.r.QueryContext(ctx, sqlstore.ListReplicasSQL, sqlstore.MS(since))
	rs, err := collect(rows, err, sqlstore.ScanReplica)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list replicas: %w", mapErr(err))
	}
	return rs, nil
}

// DeleteReplica removes a replica's row; an absent one is no error.
func (s *Store) DeleteReplica(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, sqlstore.DeleteReplicaSQL, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: delete replica %s: %w", id, mapErr(err))
	}
	return nil
}
