package queuefeed

import (
	"context"
	"time"

	"github.com/outpost-sh/outpost/internal/loop"
)

// Queue tombstones. A deleted queue entry stays as a tombstone so that a
// watch replaying from an older cursor hears of the deletion; kept
// forever they made every list and replay count all of history. Prune
// deletes the tombstones of ended sessions once they are older than the
// feed's tombstone age, and a watch from a cursor below its outpost's
// horizon (store.QueueHorizon) re-lists instead of replaying (From.Relist).

const (
	// pruneEvery spaces the prune rounds.
	pruneEvery = time.Minute
	// pruneBatch is how many tombstones one transaction deletes.
	pruneBatch = 1000
)

// TombstoneAge is how long to keep a tombstone when a watch stream lasts
// at most maxStream: its client reconnects from its cursor soon after the
// stream ends, so a client that keeps watching never falls behind the
// horizon.
func TombstoneAge(maxStream time.Duration) time.Duration {
	return maxStream + 10*time.Minute
}

// Prune prunes old tombstones every minute until ctx ends.
func (q *Feed) Prune(ctx context.Context) {
	loop.Every(ctx, pruneEvery, q.PruneOnce)
}

// PruneOnce deletes every tombstone past the age, a batch at a time.
func (q *Feed) PruneOnce(ctx context.Context) {
	before := q.now().Add(-q.age)
	total := 0
	for {
		n, err := q.store.PruneQueue(ctx, before, pruneBatch)
		if err != nil {
			if ctx.Err() == nil {
				q.log.Warn("prune queue tombstones", "err", err)
			}
			return
		}
		total += n
		if n < pruneBatch {
			break
		}
	}
	if total > 0 {
		q.log.Debug("pruned queue tombstones", "count", total, "before", before)
	}
}
