package suspend

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/loop"
)

// sweepBatch is how many expired snapshots one sweep round handles.
const sweepBatch = 100

// Sweep is the background side of suspend: automatic suspends of sessions
// idle past limits.suspend_after_idle_s, and the deletion of snapshots that
// are no longer needed (their session ended) or kept too long (the
// snapshot TTL).
type Sweep struct {
	*Suspender
	// Every is how often a round runs.
	Every time.Duration
	// EndSession ends a session suspended past the TTL, as the server ends
	// any session.
	EndSession func(ctx context.Context, id, status, detail, reason string) error
}

// Run, every interval until ctx ends, suspends llm sessions idle past
// limits.suspend_after_idle_s and deletes the snapshots of sessions that
// ended, ending those suspended longer than the snapshot TTL.
func (sw *Sweep) Run(ctx context.Context) {
	var wg sync.WaitGroup // the automatic suspends under way
	defer wg.Wait()
	loop.Every(ctx, sw.Every, func(ctx context.Context) {
		sw.autoSuspend(ctx, &wg)
		if err := sw.Expire(ctx); err != nil && ctx.Err() == nil {
			sw.Log.Warn("snapshot sweep", "err", err)
		}
	})
}

// autoSuspend starts, in wg, the suspend of every llm session that has
// waited for its user past its limits.suspend_after_idle_s.
func (sw *Sweep) autoSuspend(ctx context.Context, wg *sync.WaitGroup) {
	active, err := sw.Store.ListStartedSessions(ctx)
	if err != nil {
		if ctx.Err() == nil {
			sw.Log.Warn("list started sessions", "err", err)
		}
		return
	}
	now := sw.Now()
	for _, sess := range active {
		id := sess.ID
		why, due := lifecycle.SuspendDue(sess, now)
		if !due || sw.Ops.Get(id) != nil || sw.Ops.AutoFailed(id, sess.UpdatedAt) {
			continue
		}
		if c := sw.Hub.Get(id); c == nil || c.Version < api.SnapshotsSince {
			continue // nothing to suspend through now; an older remote never
		}
		wg.Go(func() {
			if err := sw.Suspend(ctx, id, why); err != nil && ctx.Err() == nil {
				// Not again until the session changes: each try is on the
				// transcript.
				sw.Ops.MarkAutoFailed(id, sess.UpdatedAt)
				sw.Log.Warn("automatic suspend", "session", id, "err", err)
			}
		})
	}
}

// Expire deletes the snapshots of sessions that ended, and ends sessions
// suspended longer than the snapshot TTL, deleting theirs.
func (sw *Sweep) Expire(ctx context.Context) error {
	now := sw.Now()
	list, err := sw.Store.ListSnapshotsExpired(ctx, now.Add(-sw.TTL), sweepBatch)
	if err != nil {
		return fmt.Errorf("list expired snapshots: %w", err)
	}
	for _, sn := range list {
		sess, err := sw.Store.GetSession(ctx, sn.SessionID)
		if err != nil {
			continue
		}
		fate := lifecycle.ExpireSnapshot(sess, sw.TTL)
		if fate.Keep {
			continue
		}
		if end := fate.End; end != nil {
			if err := sw.EndSession(ctx, sn.SessionID, end.Status, end.Detail, end.Reason); err != nil {
				sw.Log.Warn("end expired suspended session", "session", sn.SessionID, "err", err)
				continue
			}
		}
		if sw.Ops.Get(sn.SessionID) != nil {
			continue // a new snapshot is on its way; the next round sees it
		}
		if err := sw.Blobs.Delete(ctx, sn.BlobKey); err != nil {
			sw.Log.Warn("delete snapshot", "session", sn.SessionID, "err", fmt.Errorf("delete blob %s: %w", sn.BlobKey, err))
			continue
		}
		if err := sw.Store.DeleteSnapshot(ctx, sn.SessionID, sn.BlobKey); err != nil {
			sw.Log.Warn("delete snapshot", "session", sn.SessionID, "err", err)
			continue
		}
		sw.Log.Info("snapshot deleted", "session", sn.SessionID, "key", sn.BlobKey, "bytes", sn.Size)
	}
	return nil
}
