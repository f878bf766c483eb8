package sqlstore

import (
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
