package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// PutSnapshot stores sn as its session's snapshot and returns the one it
// replaced.
func (s *Store) PutSnapshot(ctx context.Context, sn store.Snapshot) (store.Snapshot, error) {
	var prev store.Snapshot
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		prev, err = sqlstore.ScanSnapshot(tx.QueryRowContext(ctx, sqlstore.GetSnapshotSQL, sn.SessionID))
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		_, err = tx.ExecContext(ctx, sqlstore.UpsertSnapshotSQL, sqlstore.SnapshotArgs(sn)...)
		return err
	})
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("sqlite: put snapshot of %s: %w", sn.SessionID, mapErr(err))
	}
	if prev.SessionID == "" {
		return prev, store.ErrNotFound
	}
	return prev, nil
}

// GetSnapshot returns a session's snapshot.
func (s *Store) GetSnapshot(ctx context.Context, sessionID string) (store.Snapshot, error) {
	sn, err := sqlstore.ScanSnapshot(s.r.QueryRowContext(ctx, sqlstore.GetSnapshotSQL, sessionID))
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("sqlite: get snapshot of %s: %w", sessionID, mapErr(err))
	}
	return sn, nil
}

// DeleteSnapshot removes a session's snapshot if it is still blobKey's.
func (s *Store) DeleteSnapshot(ctx context.Context, sessionID, blobKey string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, sqlstore.DeleteSnapshotSQL, sessionID, blobKey)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: delete snapshot of %s: %w", sessionID, err)
	}
	return nil
}

// ListSnapshotsExpired returns snapshots of final sessions or created
// before createdBefore, oldest first.
func (s *Store) ListSnapshotsExpired(ctx context.Context, createdBefore time.Time, limit int) ([]store.Snapshot, error) {
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.r.QueryContext(ctx, sqlstore.ExpiredSnapshotsSQL,
		append(sqlstore.ExpiredSnapshotsArgs(sqlstore.MS(createdBefore)), limit)...)
	out, err := collect(rows, err, sqlstore.ScanSnapshot)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list expired snapshots: %w", err)
	}
	return out, nil
}
