package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// SnapshotCols are the columns of a snapshots row, in ScanSnapshot's order.
const SnapshotCols = `session_id, blob_key, size, sha256, files, bytes, epoch, created_at`

// Statements on snapshots both dialects accept.
const (
	// UpsertSnapshotSQL writes SnapshotArgs.
	UpsertSnapshotSQL = `INSERT INTO snapshots (` + SnapshotCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (session_id) DO UPDATE SET blob_key = excluded.blob_key, size = excluded.size,
		sha256 = excluded.sha256, files = excluded.files, bytes = excluded.bytes, epoch = excluded.epoch,
		created_at = excluded.created_at`
	// GetSnapshotSQL reads one session's snapshot: $1 the session.
	GetSnapshotSQL = `SELECT ` + SnapshotCols + ` FROM snapshots WHERE session_id = $1`
	// DeleteSnapshotSQL deletes $1's snapshot if its key is still $2.
	DeleteSnapshotSQL = `DELETE FROM snapshots WHERE session_id = $1 AND blob_key = $2`
	// ExpiredSnapshotsSQL lists snapshots of final sessions ($2, $3) or
	// created before $1, oldest first, at most $4.
	ExpiredSnapshotsSQL = `SELECT s.session_id, s.blob_key, s.size, s.sha256, s.files, s.bytes, s.epoch, s.created_at
		FROM snapshots s JOIN sessions x ON x.id = s.session_id
		WHERE x.status IN ($2, $3) OR s.created_at < $1
		ORDER BY s.created_at, s.session_id LIMIT $4`
)

// ExpiredSnapshotsArgs are the arguments of ExpiredSnapshotsSQL but the
// limit, which each dialect spells its own way.
func ExpiredSnapshotsArgs(createdBefore int64) []any {
	return []any{createdBefore, api.StatusExit, api.StatusError}
}

// SnapshotArgs are the arguments of UpsertSnapshotSQL.
func SnapshotArgs(s store.Snapshot) []any {
	return []any{s.SessionID, s.BlobKey, s.Size, s.SHA256, s.Files, s.Bytes, s.Epoch, MS(s.CreatedAt)}
}

// ScanSnapshot reads a row of SnapshotCols.
func ScanSnapshot(sc Scanner) (store.Snapshot, error) {
	var s store.Snapshot
	var created int64
	if err := sc.Scan(&s.SessionID, &s.BlobKey, &s.Size, &s.SHA256, &s.Files, &s.Bytes, &s.Epoch, &created); err != nil {
		return store.Snapshot{}, err
	}
	s.CreatedAt = FromMS(created)
	return s, nil
}

// PutSnapshot stores sn as its session's snapshot and returns the one it
// replaced (store.ErrNotFound with a zero Snapshot when none).
func (s *Store) PutSnapshot(ctx context.Context, sn store.Snapshot) (store.Snapshot, error) {
	var prev store.Snapshot
	err := s.db.Write(ctx, nil, func(tx Tx) error {
		var err error
		prev, err = ScanSnapshot(tx.QueryRow(ctx, GetSnapshotSQL+s.d.Lock.Row, sn.SessionID))
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		_, err = tx.Exec(ctx, UpsertSnapshotSQL, SnapshotArgs(sn)...)
		return err
	})
	if err != nil {
		return store.Snapshot{}, s.errorf(err, "put snapshot of %s", sn.SessionID)
	}
	if prev.SessionID == "" {
		return prev, store.ErrNotFound
	}
	return prev, nil
}

// GetSnapshot returns a session's snapshot.
func (s *Store) GetSnapshot(ctx context.Context, sessionID string) (store.Snapshot, error) {
	sn, err := ScanSnapshot(s.db.QueryRow(ctx, GetSnapshotSQL, sessionID))
	if err != nil {
		return store.Snapshot{}, s.errorf(err, "get snapshot of %s", sessionID)
	}
	return sn, nil
}

// DeleteSnapshot removes a session's snapshot if it is still blobKey's.
func (s *Store) DeleteSnapshot(ctx context.Context, sessionID, blobKey string) error {
	if _, err := s.db.Exec(ctx, DeleteSnapshotSQL, sessionID, blobKey); err != nil {
		return s.errorf(err, "delete snapshot of %s", sessionID)
	}
	return nil
}

// ListSnapshotsExpired returns snapshots of final sessions or created
// before createdBefore, oldest first, up to limit (0 or less: no cap).
func (s *Store) ListSnapshotsExpired(ctx context.Context, createdBefore time.Time, limit int) ([]store.Snapshot, error) {
	out, err := QueryAll(ctx, s.db, ScanSnapshot, ExpiredSnapshotsSQL, append(ExpiredSnapshotsArgs(MS(createdBefore)), s.limit(limit))...)
	if err != nil {
		return nil, s.errorf(err, "list expired snapshots")
	}
	return out, nil
}
