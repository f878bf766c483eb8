package sqlstore

import "github.com/outpost-sh/outpost/internal/store"

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
