package server

import (
	"context"
	"time"

	"github.com/outpost-sh/outpost/internal/loop"
	"github.com/outpost-sh/outpost/internal/store"
)

// Entries of ended sessions. Clients of the fleet API clean up what they
// keep for a session (checkpoints, volumes, sandboxes) when they see its
// entry read session_status terminated, so an ended session's entry is not
// deleted at once: once nobody holds it, it stays listed — phase pending,
// no acceptor, terminated — and watchers get a MODIFIED event with that
// status. No claim takes it (409), claim-next and the store's counts pass
// over it through their indexes, and after EndedEntryRetention the sweep
// below makes it a tombstone (a DELETED event), which queueprune.go later
// prunes as any other. The retention bounds how many such entries exist:
// about the sessions ended in that time.

const (
	// DefaultEndedEntryRetention is how long an ended session's entry
	// stays listed unless Options say otherwise.
	DefaultEndedEntryRetention = 10 * time.Minute
	// endedSweepBatch is how many entries one sweep transaction deletes.
	endedSweepBatch = 500
	// maxEndedSweepBatches bounds one round of the sweep; what is left
	// waits for the next round.
	maxEndedSweepBatches = 100
)

// keepEnded reports whether an ended session's entry stays listed.
func (s *Server) keepEnded() bool { return s.opts.EndedEntryRetention > 0 }

// endedSweepEvery spaces the rounds of the ended-entry sweep: a quarter of
// the retention, between 10ms and a minute, so an entry goes at most that
// long after its retention.
func (s *Server) endedSweepEvery() time.Duration {
	return min(max(s.opts.EndedEntryRetention/4, 10*time.Millisecond), time.Minute)
}

// sweepEndedEntries runs the ended-entry sweep until ctx ends. Every
// replica runs it: TombstoneEnded skips what another has picked or
// changed, so two sweeps never delete one entry twice. Without retention
// it still runs, for entries kept under an earlier setting.
func (s *Server) sweepEndedEntries(ctx context.Context) {
	loop.Every(ctx, s.endedSweepEvery(), s.sweepEndedOnce)
}

// sweepEndedOnce deletes the entries of sessions that ended longer than the
// retention ago, a batch at a time, and tells watchers of each.
func (s *Server) sweepEndedOnce(ctx context.Context) {
	now := s.now()
	before := now.Add(-max(s.opts.EndedEntryRetention, 0))
	total := 0
	for range maxEndedSweepBatches {
		swept, err := s.store.TombstoneEnded(ctx, before, now, endedSweepBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("sweep the entries of ended sessions", "err", err)
			}
			return
		}
		for i := range swept {
			e := &swept[i]
			s.committed(e.SessionID, store.Mutation{Entry: e})
		}
		total += len(swept)
		if len(swept) < endedSweepBatch {
			break
		}
	}
	if total > 0 {
		s.log.Debug("deleted the queue entries of ended sessions", "count", total, "ended_before", before)
	}
}
