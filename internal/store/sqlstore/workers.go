package sqlstore

import (
	"encoding/json"
	"fmt"

	"github.com/outpost-sh/outpost/internal/store"
)

// WorkerCols are the columns of a workers row, in ScanWorker's order.
const WorkerCols = `outpost_id, acceptor_id, info_json, connected_at, last_seen_at, expires_at`

// Statements on workers (the presence of acceptors) both dialects accept.
const (
	// OutpostExistsSQL reads outpost $1's id.
	OutpostExistsSQL = `SELECT id FROM outposts WHERE id = $1`
	// GetWorkerSQL reads outpost $1's acceptor $2 while live at $3.
	GetWorkerSQL = `SELECT ` + WorkerCols + ` FROM workers WHERE outpost_id = $1 AND acceptor_id = $2 AND expires_at > $3`
	// GetAnyWorkerSQL reads outpost $1's acceptor $2, live or offline.
	GetAnyWorkerSQL = `SELECT ` + WorkerCols + ` FROM workers WHERE outpost_id = $1 AND acceptor_id = $2`
	// CountOutpostEntriesSQL counts outpost $1's entries, live or kept
	// offline: an upper bound of its live ones that the primary key's
	// index answers alone.
	CountOutpostEntriesSQL = `SELECT COUNT(*) FROM workers WHERE outpost_id = $1`
	// CountOutpostWorkersSQL counts outpost $1's entries live at $2.
	CountOutpostWorkersSQL = `SELECT COUNT(*) FROM workers WHERE outpost_id = $1 AND expires_at > $2`
	// UpsertWorkerSQL writes WorkerArgs.
	UpsertWorkerSQL = `INSERT INTO workers (outpost_id, acceptor_id, instance, kind, info_json, connected_at, last_seen_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (outpost_id, acceptor_id) DO UPDATE SET instance = excluded.instance, kind = excluded.kind,
		info_json = excluded.info_json, connected_at = excluded.connected_at, last_seen_at = excluded.last_seen_at,
		expires_at = excluded.expires_at`
	// OfflineWorkerSQL ends outpost $1's acceptor $2's life at $4 (its
	// goodbye) unless $3 and its instance are both non-empty and differ;
	// an entry no longer live at $4 is left as it is.
	OfflineWorkerSQL = `UPDATE workers SET expires_at = $4
		WHERE outpost_id = $1 AND acceptor_id = $2 AND ($3 = '' OR instance = '' OR instance = $3) AND expires_at > $4`
	// ListWorkersSQL lists outpost $1's entries live at $2 by acceptor id.
	ListWorkersSQL = `SELECT ` + WorkerCols + ` FROM workers WHERE outpost_id = $1 AND expires_at > $2 ORDER BY acceptor_id`
	// RecentWorkersSQL lists the entries of outpost $1 (every outpost when
	// $1 is '') whose life ended after $2, by outpost and acceptor id.
	RecentWorkersSQL = `SELECT ` + WorkerCols + ` FROM workers WHERE ($1 = '' OR outpost_id = $1) AND expires_at > $2
		ORDER BY outpost_id, acceptor_id`
	// CountWorkersSQL counts the entries live at $1 by outpost and kind.
	CountWorkersSQL = `SELECT outpost_id, kind, COUNT(*) FROM workers WHERE expires_at > $1
		GROUP BY outpost_id, kind ORDER BY outpost_id, kind`
)

// PruneWorkersSQL deletes outpost $1's entries that expired at or before
// $2 (the heartbeat's time less store.WorkerOfflineKeep) through the index
// workers_expires, so that it reads those few entries rather than every
// entry of the outpost, which the primary key's outpost_id = ? would.
func (d Dialect) PruneWorkersSQL() string {
	return `DELETE FROM workers` + d.IndexedBy("workers_expires") + ` WHERE outpost_id = $1 AND expires_at <= $2`
}

// PlanWorker decides PutWorker's write from what its transaction read:
// prev, the acceptor's live entry (nil when none), and live, how many live
// entries the outpost has. It returns the entry to write, or the refusal.
func PlanWorker(prev *store.Worker, live int, w store.Worker, max int) (store.Worker, error) {
	if prev == nil {
		if max > 0 && live >= max {
			return store.Worker{}, store.ErrTooManyWorkers
		}
		w.ConnectedAt = w.LastSeenAt
		return w, nil
	}
	if in, held := w.Info.Instance, prev.Info.Instance; in != "" && held != "" && in != held {
		return store.Worker{}, &store.AcceptorInUseError{Holder: *prev}
	}
	w.ConnectedAt = prev.ConnectedAt
	return w, nil
}

// WorkerArgs are the arguments of UpsertWorkerSQL.
func WorkerArgs(w store.Worker) ([]any, error) {
	info, err := json.Marshal(w.Info)
	if err != nil {
		return nil, fmt.Errorf("encode worker info: %w", err)
	}
	return []any{w.OutpostID, w.AcceptorID, w.Info.Instance, w.Info.Kind, string(info),
		MS(w.ConnectedAt), MS(w.LastSeenAt), MS(w.ExpiresAt)}, nil
}

// ScanWorker reads a row of WorkerCols.
func ScanWorker(sc Scanner) (store.Worker, error) {
	var w store.Worker
	var info string
	var connected, seen, expires int64
	if err := sc.Scan(&w.OutpostID, &w.AcceptorID, &info, &connected, &seen, &expires); err != nil {
		return store.Worker{}, err
	}
	if err := json.Unmarshal([]byte(info), &w.Info); err != nil {
		return store.Worker{}, fmt.Errorf("decode worker info of %s: %w", w.AcceptorID, err)
	}
	w.ConnectedAt, w.LastSeenAt, w.ExpiresAt = FromMS(connected), FromMS(seen), FromMS(expires)
	return w, nil
}

// ScanWorkerCount reads a row of CountWorkersSQL.
func ScanWorkerCount(sc Scanner) (store.WorkerCount, error) {
	var c store.WorkerCount
	err := sc.Scan(&c.OutpostID, &c.Kind, &c.N)
	return c, err
}
