package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// PutSnapshot stores sn as its session's snapshot and returns the one it
// replaced.
func (s *Store) PutSnapshot(ctx context.Context, sn store.Snapshot) (store.Snapshot, error) {
	var prev store.Snapshot
	err := s.write(ctx, func(tx pgx.Tx) error {
		var err error
		prev, err = sqlstore.ScanSnapshot(tx.QueryRow(ctx, sqlstore.GetSnapshotSQL+` FOR UPDATE`, sn.SessionID))
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		_, err = tx.Exec(ctx, sqlstore.UpsertSnapshotSQL, sqlstore.SnapshotArgs(sn)...)
		return err
	})
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("postgres: put snapshot of %s: %w", sn.SessionID, mapErr(err))
	}
	if prev.SessionID == "" {
		return prev, store.ErrNotFound
	}
	return prev, nil
}

// GetSnapshot returns a session's snapshot.
func (s *Store) GetSnapshot(ctx context.Context, sessionID string) (store.Snapshot, error) {
	sn, err := sqlstore.ScanSnapshot(s.pool.QueryRow(ctx, sqlstore.GetSnapshotSQL, sessionID))
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("postgres: get snapshot of %s: %w", sessionID, mapErr(err))
	}
	return sn, nil
}

// DeleteSnapshot removes a session's snapshot if it is still blobKey's.
func (s *Store) DeleteSnapshot(ctx context.Context, sessionID, blobKey string) error {
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, sqlstore.DeleteSnapshotSQL, sessionID, blobKey)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: delete snapshot of %s: %w", sessionID, err)
	}
	return nil
}

// ListSnapshotsExpired returns snapshots of final sessions or created
// before createdBefore, oldest first.
func (s *Store) ListSnapshotsExpired(ctx context.Context, createdBefore time.Time, limit int) ([]store.Snapshot, error) {
	var lim any // NULL: no limit
	if limit > 0 {
		lim = int64(limit)
	}
	out, err := collect(sqlstore.ScanSnapshot)(s.pool.Query(ctx, sqlstore.ExpiredSnapshotsSQL+`::bigint`,
		append(sqlstore.ExpiredSnapshotsArgs(sqlstore.MS(createdBefore)), lim)...))
	if err != nil {
		return nil, fmt.Errorf("postgres: list expired snapshots: %w", err)
	}
	return out, nil
}
