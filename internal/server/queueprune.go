package server

import (
	"context"
	"time"

	"github.com/outpost-sh/outpost/internal/loop"
)

// Queue tombstones. A deleted queue entry stays as a
// tombstone so that a watch replaying from an older cursor hears of the
// deletion; kept forever they made every list and replay count all of
// history. pruneQueue deletes the tombstones of ended sessions once they
// are older than queueTombstoneAge, and a watch from a cursor below its
// outpost's horizon (store.QueueHorizon) re-lists instead of replaying.

const (
	// queuePruneEvery spaces the prune rounds.
	queuePruneEvery = time.Minute
	// queuePruneBatch is how many tombstones one transaction deletes.
	queuePruneBatch = 1000
)

// queueTombstoneAge is how long a tombstone is kept: a watch stream lasts
// at most WatchMaxDuration, and its client reconnects from its cursor
// soon after, so a client that keeps watching never falls behind the
// horizon.
func (s *Server) queueTombstoneAge() time.Duration {
	return s.opts.WatchMaxDuration + 10*time.Minute
}

// pruneQueue prunes old tombstones every queuePruneEvery until ctx ends.
func (s *Server) pruneQueue(ctx context.Context) {
	loop.Every(ctx, queuePruneEvery, s.pruneQueueOnce)
}

// pruneQueueOnce deletes every tombstone past the age, a batch at a time.
func (s *Server) pruneQueueOnce(ctx context.Context) {
	before := s.now().Add(-s.queueTombstoneAge())
	total := 0
	for {
		n, err := s.store.PruneQueue(ctx, before, queuePruneBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("prune queue tombstones", "err", err)
			}
			return
		}
		total += n
		if n < queuePruneBatch {
			break
		}
	}
	if total > 0 {
		s.log.Debug("pruned queue tombstones", "count", total, "before", before)
	}
}
