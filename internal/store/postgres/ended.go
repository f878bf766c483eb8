package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlstore"
)

// endedEntriesSQL picks ended entries and locks their sessions' rows, the
// lock every writer of a session takes first, skipping those another
// writer holds: the sweep never waits for a session's writer, and one of
// several servers sweeping at once leaves what another has picked.
var endedEntriesSQL = dialect.EndedEntriesSQL("FOR UPDATE OF s SKIP LOCKED")

// tombstoneEndedSQL marks the picked entries deleted, where each is still
// an ended entry once its session is locked (a writer that committed
// between the pick's snapshot and its lock may have changed it).
var tombstoneEndedSQL = `UPDATE queue SET deleted = true, updated_at = $1
	WHERE session_id = ANY($2::text[]) AND ` + dialect.Ended() + ` AND updated_at < $3 RETURNING session_id`

// takeRevsSQL takes $1 revs at once and returns the highest. The counter
// row stays locked until the transaction ends, so revs commit in order.
const takeRevsSQL = `UPDATE counters SET value = value + $1 WHERE name = 'rev' RETURNING value`

// setRevsSQL writes rev $2[i] to the entry of session $1[i].
const setRevsSQL = `UPDATE queue q SET rev = v.nrev FROM unnest($1::text[], $2::bigint[]) AS v(sid, nrev)
	WHERE q.session_id = v.sid RETURNING ` + sqlstore.EntryCols

// TombstoneEnded turns up to limit entries of ended sessions written before
// before into tombstones, oldest first, each under its own rev, in one
// transaction that also notifies the change feed of each.
func (s *Store) TombstoneEnded(ctx context.Context, before, now time.Time, limit int) ([]store.QueueEntry, error) {
	var out []store.QueueEntry
	err := s.write(ctx, func(tx pgx.Tx) error {
		out = nil
		picked, err := collect(sqlstore.ScanString)(tx.Query(ctx, endedEntriesSQL, before.UnixMilli(), limit))
		if err != nil || len(picked) == 0 {
			return err
		}
		done, err := collect(sqlstore.ScanString)(tx.Query(ctx, tombstoneEndedSQL, now.UnixMilli(), picked, before.UnixMilli()))
		if err != nil || len(done) == 0 {
			return err
		}
		// Revs in the pick's order, oldest first.
		written := make(map[string]bool, len(done))
		for _, id := range done {
			written[id] = true
		}
		var top int64
		if err := tx.QueryRow(ctx, takeRevsSQL, len(done)).Scan(&top); err != nil {
			return fmt.Errorf("take revs: %w", err)
		}
		ids, revs := make([]string, 0, len(done)), make([]int64, 0, len(done))
		next := top - int64(len(done))
		for _, id := range picked {
			if written[id] {
				next++
				ids, revs = append(ids, id), append(revs, next)
			}
		}
		out, err = collect(sqlstore.ScanEntry)(tx.Query(ctx, setRevsSQL, ids, revs))
		if err != nil {
			return err
		}
		slices.SortFunc(out, func(a, b store.QueueEntry) int { return cmp.Compare(a.Rev, b.Rev) })
		bodies := make([]string, len(out))
		for i, e := range out {
			b, _ := json.Marshal(payload{Origin: s.replica, Session: e.SessionID, Outpost: e.OutpostID, Rev: e.Rev, Epoch: e.Epoch}) // cannot fail
			bodies[i] = string(b)
		}
		_, err = tx.Exec(ctx, lateNotifySQL, bodies)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: tombstone ended entries: %w", err)
	}
	return out, nil
}
