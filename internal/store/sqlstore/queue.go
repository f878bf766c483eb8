package sqlstore

import (
	"context"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// GetQueueEntry returns one queue entry, tombstones included.
func (s *Store) GetQueueEntry(ctx context.Context, sessionID string) (store.QueueEntry, error) {
	e, err := ScanEntry(s.db.QueryRow(ctx, GetEntrySQL, sessionID))
	if err != nil {
		return store.QueueEntry{}, s.errorf(err, "get queue entry %s", sessionID)
	}
	return e, nil
}

// ListQueue returns entries matching f in Rev order, and the number of live
// entries matching f's OutpostID, Phase and AcceptorID.
func (s *Store) ListQueue(ctx context.Context, f store.QueueFilter) ([]store.QueueEntry, int, error) {
	q := s.d.ListQueue(f)
	var out []store.QueueEntry
	var total int
	err := s.db.Read(ctx, func(tx Tx) error {
		if !f.NoTotal {
			if err := tx.QueryRow(ctx, q.Count, q.CountArgs...).Scan(&total); err != nil {
				return err
			}
		}
		var err error
		out, err = QueryAll(ctx, tx, ScanEntry, q.Page, q.PageArgs...)
		return err
	})
	if err != nil {
		return nil, 0, s.errorf(err, "list queue")
	}
	return out, total, nil
}

// MaxRev is the highest Rev assigned so far (0 when none).
func (s *Store) MaxRev(ctx context.Context) (int64, error) {
	var rev int64
	if err := s.db.QueryRow(ctx, MaxRevSQL).Scan(&rev); err != nil {
		return 0, s.errorf(err, "max rev")
	}
	return rev, nil
}

// LapsedClaims returns ids of claimed, live entries whose Expiry is at or
// before now, earliest first.
func (s *Store) LapsedClaims(ctx context.Context, now time.Time) ([]string, error) {
	ids, err := QueryAll(ctx, s.db, ScanString, s.sql.lapsedClaims, api.PhaseClaimed, now.UnixMilli())
	if err != nil {
		return nil, s.errorf(err, "lapsed claims")
	}
	return ids, nil
}

// ClaimsOfToken returns ids of claimed, live entries whose ClaimTokenID is
// tokenID, oldest claim first; none for "".
func (s *Store) ClaimsOfToken(ctx context.Context, tokenID string) ([]string, error) {
	if tokenID == "" {
		return nil, nil
	}
	ids, err := QueryAll(ctx, s.db, ScanString, s.sql.claimsOfToken, api.PhaseClaimed, tokenID)
	if err != nil {
		return nil, s.errorf(err, "claims of token %s", tokenID)
	}
	return ids, nil
}

// ActiveSessions returns ids of sessions whose status is not final (see
// api.IsFinal), oldest first.
func (s *Store) ActiveSessions(ctx context.Context) ([]string, error) {
	ids, err := QueryAll(ctx, s.db, ScanString, ActiveSessionsSQL)
	if err != nil {
		return nil, s.errorf(err, "active sessions")
	}
	return ids, nil
}

// ListStartedSessions returns the started sessions of those ActiveSessions
// lists, in its order, in one read, without their secrets (Secrets nil).
func (s *Store) ListStartedSessions(ctx context.Context) ([]store.Session, error) {
	out, err := QueryAll(ctx, s.db, func(sc Scanner) (store.Session, error) {
		sess, err := ScanSession(sc, nil) // the secrets' column is "{}", never sealed
		sess.Secrets = nil
		return sess, err
	}, ListStartedSessionsSQL)
	if err != nil {
		return nil, s.errorf(err, "list started sessions")
	}
	return out, nil
}

// PruneQueue deletes up to limit tombstones of ended sessions written
// before before, and raises the horizon to the highest rev deleted. It
// notifies nothing: a tombstone past the horizon is no change a watch
// waits for.
func (s *Store) PruneQueue(ctx context.Context, before time.Time, limit int) (int, error) {
	var n int
	err := s.db.Write(ctx, nil, func(tx Tx) error {
		pruned, err := QueryAll(ctx, tx, ScanPruned, s.sql.pruneQueue, before.UnixMilli(), api.StatusExit, api.StatusError, limit)
		if err != nil {
			return err
		}
		n = len(pruned)
		if n == 0 {
			return nil
		}
		b := &Batch{}
		for outpostID, rev := range Horizons(pruned) {
			b.Exec(s.sql.raiseHorizon, outpostID, rev)
		}
		return tx.Send(ctx, b)
	})
	if err != nil {
		return 0, s.errorf(err, "prune queue")
	}
	return n, nil
}

// QueueHorizon is the highest rev of a pruned tombstone of the outpost
// ("" for any; 0 when none).
func (s *Store) QueueHorizon(ctx context.Context, outpostID string) (int64, error) {
	var rev int64
	if err := s.db.QueryRow(ctx, QueueHorizonSQL, outpostID).Scan(&rev); err != nil {
		return 0, s.errorf(err, "queue horizon")
	}
	return rev, nil
}
