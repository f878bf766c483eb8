package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/loop"
	"github.com/outpost-sh/outpost/internal/store"
)

// The background side of suspend: automatic suspends of sessions idle past
// limits.suspend_after_idle_s, and the deletion of snapshots that are no
// longer needed (their session ended) or kept too long (the snapshot TTL).

// snapshotSweepBatch is how many expired snapshots one sweep round handles.
const snapshotSweepBatch = 100

// sweepSuspends, every five sweep intervals (at most a minute) until ctx
// ends, suspends llm sessions idle past limits.suspend_after_idle_s and
// deletes the snapshots of sessions that ended, ending those suspended
// longer than the snapshot TTL.
func (s *Server) sweepSuspends(ctx context.Context) {
	var wg sync.WaitGroup // the automatic suspends under way
	defer wg.Wait()
	loop.Every(ctx, min(5*s.opts.SweepInterval, time.Minute), func(ctx context.Context) {
		s.autoSuspend(ctx, &wg)
		if err := s.expireSnapshots(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("snapshot sweep", "err", err)
		}
	})
}

// autoSuspend starts, in wg, the suspend of every llm session that has
// waited for its user past its limits.suspend_after_idle_s.
func (s *Server) autoSuspend(ctx context.Context, wg *sync.WaitGroup) {
	ids, err := s.store.ActiveSessions(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("list active sessions", "err", err)
		}
		return
	}
	now := s.now()
	for _, id := range ids {
		sess, err := s.store.GetSession(ctx, id)
		if err != nil {
			continue
		}
		why, due := lifecycle.SuspendDue(sess, now)
		if !due || s.suspends.Get(id) != nil || s.suspends.AutoFailed(id, sess.UpdatedAt) {
			continue
		}
		if c := s.hub.Get(id); c == nil || c.Version < api.SnapshotsSince {
			continue // nothing to suspend through now; an older remote never
		}
		wg.Go(func() {
			if err := s.suspend(ctx, id, why); err != nil && ctx.Err() == nil {
				// Not again until the session changes: each try is on the
				// transcript.
				s.suspends.MarkAutoFailed(id, sess.UpdatedAt)
				s.log.Warn("automatic suspend", "session", id, "err", err)
			}
		})
	}
}

// expireSnapshots deletes the snapshots of sessions that ended, and ends
// sessions suspended longer than the snapshot TTL, deleting theirs.
func (s *Server) expireSnapshots(ctx context.Context) error {
	now := s.now()
	list, err := s.store.ListSnapshotsExpired(ctx, now.Add(-s.opts.SnapshotTTL), snapshotSweepBatch)
	if err != nil {
		return fmt.Errorf("list expired snapshots: %w", err)
	}
	for _, sn := range list {
		sess, err := s.store.GetSession(ctx, sn.SessionID)
		if err != nil {
			continue
		}
		fate := lifecycle.ExpireSnapshot(sess, s.opts.SnapshotTTL)
		if fate.Keep {
			continue
		}
		if end := fate.End; end != nil {
			if err := s.endSession(ctx, sn.SessionID, end.Status, end.Detail, end.Reason); err != nil {
				s.log.Warn("end expired suspended session", "session", sn.SessionID, "err", err)
				continue
			}
		}
		if s.suspends.Get(sn.SessionID) != nil {
			continue // a new snapshot is on its way; the next round sees it
		}
		if err := s.deleteSnapshot(ctx, sn); err != nil {
			s.log.Warn("delete snapshot", "session", sn.SessionID, "err", err)
		}
	}
	return nil
}

// deleteSnapshot deletes a snapshot's blob and then its row.
func (s *Server) deleteSnapshot(ctx context.Context, sn store.Snapshot) error {
	if err := s.blobs.Delete(ctx, sn.BlobKey); err != nil {
		return fmt.Errorf("delete blob %s: %w", sn.BlobKey, err)
	}
	if err := s.store.DeleteSnapshot(ctx, sn.SessionID, sn.BlobKey); err != nil {
		return err
	}
	s.log.Info("snapshot deleted", "session", sn.SessionID, "key", sn.BlobKey, "bytes", sn.Size)
	return nil
}
