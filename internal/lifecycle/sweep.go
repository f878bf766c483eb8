package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/loop"
	"github.com/outpost-sh/outpost/internal/store"
)

// Liveness and the sweeps. A claim promises a remote by its deadline; from
// the moment the remote says hello, its gateway connection holds the
// claim: its owner keeps each connected claim's LiveUntil a reconnect
// grace ahead of now (KeepAlive), so the claim lapses only a grace after
// the connection went, whichever server held it, and even if that server
// died. The sweeps then decide, a session at a time:
//
//   - a lapsed claim goes back to the queue, a failed attempt (SweepLapsed);
//   - a session past its limits.max_duration_s that no runner is watching
//     (its remote is gone, or the server restarted meanwhile) ends
//     (EnforceLimits);
//   - the entry of an ended session, kept listed — phase pending, no
//     acceptor, session_status terminated — so that clients of the fleet
//     API see the session ended and clean up what they keep for it,
//     becomes a tombstone once EndedRetention has passed (SweepEnded).
//     No claim takes such an entry, claim-next and the store's counts
//     pass over it, and the retention bounds how many exist: about the
//     sessions ended in that time.
//
// Every replica runs the sweeps: each change is one transaction of the
// session (TombstoneEnded skips what another has picked or changed), so
// two sweeps never apply one change twice.

const (
	// endedSweepBatch is how many entries one transaction of the
	// ended-entry sweep turns into tombstones.
	endedSweepBatch = 500
	// maxEndedSweepBatches bounds one round of the ended-entry sweep;
	// what is left waits for the next round.
	maxEndedSweepBatches = 100
	// limitsEvery is how many rounds of the lapse sweep pass between two
	// checks of the sessions' limits, which read every started session.
	limitsEvery = 5
)

// KeepAlive keeps the claims of leases, whose remotes are connected, alive
// for a reconnect grace from now, in one store write. Its owner calls it
// three times per grace for every connected remote, and once more when a
// connection ends, so the claim holds a grace after the remote went.
func (mc *Machine) KeepAlive(ctx context.Context, leases ...store.Lease) error {
	if len(leases) == 0 {
		return nil
	}
	return mc.opts.Store.KeepAlive(ctx, mc.opts.Now().Add(mc.opts.ReconnectGrace), leases...)
}

// Run runs the sweeps until ctx ends: lapsed claims every SweepInterval
// (at least four times per ClaimTTL), limits every fifth SweepInterval,
// and ended entries every quarter of EndedRetention (between 10ms and a
// minute, so an entry goes at most that long after its retention).
// Without retention the ended-entry sweep still runs, for entries kept
// under an earlier setting.
func (mc *Machine) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { mc.sweepClaims(ctx) })
	wg.Go(func() { loop.Every(ctx, mc.endedSweepEvery(), mc.SweepEnded) })
}

// sweepClaims requeues lapsed claims, and every limitsEvery-th interval
// ends sessions past their limits, until ctx ends.
func (mc *Machine) sweepClaims(ctx context.Context) {
	interval := max(min(mc.opts.SweepInterval, mc.opts.ClaimTTL/4), time.Millisecond)
	var lastLimits time.Time
	loop.Every(ctx, interval, func(ctx context.Context) {
		if now := mc.opts.Now(); now.Sub(lastLimits) >= limitsEvery*mc.opts.SweepInterval {
			lastLimits = now
			mc.EnforceLimits(ctx)
		}
		mc.SweepLapsed(ctx)
	})
}

// endedSweepEvery spaces the rounds of the ended-entry sweep.
func (mc *Machine) endedSweepEvery() time.Duration {
	return min(max(mc.opts.EndedRetention/4, 10*time.Millisecond), time.Minute)
}

// SweepLapsed is one round of the lapse sweep: every claim lapsed by now
// goes back to the queue (Lapse). A claim whose remote is attached to this
// process (the Attached hook) is kept alive instead: its keep-alive came
// late (a stalled disk, a busy machine), the remote is not gone.
func (mc *Machine) SweepLapsed(ctx context.Context) {
	ids, err := mc.opts.Store.LapsedClaims(ctx, mc.opts.Now())
	if err != nil {
		if ctx.Err() == nil {
			mc.opts.Log.Warn("sweep lapsed claims", "err", err)
		}
		return
	}
	for _, id := range ids {
		if err := mc.lapseUnlessAttached(ctx, id); err != nil && ctx.Err() == nil {
			mc.opts.Log.Warn("requeue lapsed claim", "session", id, "err", err)
		}
	}
}

func (mc *Machine) lapseUnlessAttached(ctx context.Context, sessionID string) error {
	if epoch, ok := mc.opts.Hooks.Attached(sessionID); ok {
		if err := mc.KeepAlive(ctx, store.Lease{SessionID: sessionID, Epoch: epoch}); err != nil {
			return fmt.Errorf("keep a connected remote's claim alive: %w", err)
		}
		mc.opts.Log.Warn("a connected remote's claim was about to lapse (its keep-alive came late); kept", "session", sessionID)
	}
	return mc.Lapse(ctx, sessionID)
}

// EnforceLimits is one round of the limits sweep: every started session
// past its limits.max_duration_s (PastLimit) ends, with what follows an
// end.
func (mc *Machine) EnforceLimits(ctx context.Context) {
	active, err := mc.opts.Store.ListStartedSessions(ctx)
	if err != nil {
		if ctx.Err() == nil {
			mc.opts.Log.Warn("list started sessions", "err", err)
		}
		return
	}
	now := mc.opts.Now()
	for _, sess := range active {
		id := sess.ID
		end, past := PastLimit(sess, now)
		if !past {
			continue
		}
		after, err := mc.End(ctx, id, end.Status, end.Detail, end.Reason)
		after()
		if err != nil && ctx.Err() == nil {
			mc.opts.Log.Warn("end session past its limit", "session", id, "err", err)
		}
	}
}

// SweepEnded is one round of the ended-entry sweep: the entries of sessions
// that ended longer than EndedRetention ago become tombstones, a batch at a
// time, each followed by the Committed hook (watchers see it DELETED).
func (mc *Machine) SweepEnded(ctx context.Context) {
	now := mc.opts.Now()
	before := now.Add(-max(mc.opts.EndedRetention, 0))
	total := 0
	for range maxEndedSweepBatches {
		swept, err := mc.opts.Store.TombstoneEnded(ctx, before, now, endedSweepBatch)
		if err != nil {
			if ctx.Err() == nil {
				mc.opts.Log.Warn("sweep the entries of ended sessions", "err", err)
			}
			return
		}
		for i := range swept {
			e := &swept[i]
			mc.opts.Hooks.Committed(e.SessionID, store.Mutation{Entry: e})
		}
		total += len(swept)
		if len(swept) < endedSweepBatch {
			break
		}
	}
	if total > 0 {
		mc.opts.Log.Debug("deleted the queue entries of ended sessions", "count", total, "ended_before", before)
	}
}

// Ending is an end a sweep decided for a session: the final status, its
// detail and the reason.
type Ending struct {
	Status, Detail, Reason string
}

// PastLimit reports whether sess, started, has run past its
// limits.max_duration_s at now, and how it ends.
func PastLimit(sess store.Session, now time.Time) (Ending, bool) {
	limit := sess.Spec.Limits.MaxDurationS
	if sess.StartedAt == nil || limit <= 0 || api.IsFinal(sess.Status) {
		return Ending{}, false
	}
	if now.Before(sess.StartedAt.Add(time.Duration(limit) * time.Second)) {
		return Ending{}, false
	}
	return Ending{Status: api.StatusExit, Detail: api.DetailUsageLimitExceeded,
		Reason: fmt.Sprintf("The session reached its limit of %d s (limits.max_duration_s).", limit)}, true
}
