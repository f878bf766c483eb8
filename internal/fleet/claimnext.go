package fleet

import (
	"context"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/steptrace"
)

// A consumer asks the server for the next pending session
// of its outpost (client.QueueService.ClaimNext) rather than claiming an id
// the watch showed, so that consumers woken by one change do not race for
// one session: the watch is a hint that there is work, the server decides
// which.

// claimNextRetry is how long a consumer claims by id after a
// server-assigned claim answered 404.
const claimNextRetry = time.Minute

// scheduleNext claims through server-assigned claims while there is
// capacity and the queue, as the consumer knows it, shows a candidate. It
// reports whether it did the round (done); false leaves the round to the
// claims by id: against a server without the endpoint (for claimNextRetry), with
// more postponed sessions than a request may exclude, or after an error,
// whose retries the claims by id pace. full is as schedule's.
func (c *Consumer) scheduleNext(ctx context.Context) (done bool, full time.Duration) {
	if until := c.byIDUntil.Load(); until != 0 && c.clock.Now().UnixNano() < until {
		return false, 0
	}
	if c.waitNext(ctx) {
		return true, 0
	}
	for ctx.Err() == nil && c.free() > 0 {
		cands := c.candidates()
		if len(cands) == 0 {
			return true, 0
		}
		exclude, ok := c.postponed()
		if !ok {
			return false, 0
		}
		c.mu.Lock()
		sent := c.applied // what the consumer knew when it asked
		c.mu.Unlock()
		claim, err := c.claimNext(ctx, exclude)
		switch {
		case client.HasCode(err, api.CodeOutpostAtCapacity):
			return true, c.atCapacity()
		case client.IsNotFound(err):
			if c.byIDUntil.Swap(c.clock.Now().Add(claimNextRetry).UnixNano()) == 0 {
				c.log.Info("the server does not assign claims (an older version, or the outpost is gone); claiming sessions by id", "err", err)
			}
			c.watchAll()
			return false, 0 // no claim was made: by id for a while
		case err != nil:
			if ctx.Err() == nil {
				c.log.Warn("cannot claim the next session; claiming by id", "err", err)
			}
			return false, 0
		case claim == nil:
			// Nothing claimable for this consumer: what it saw pending
			// has been taken; the watch will show it so.
			c.mu.Lock()
			for _, e := range cands {
				// Only an entry no event changed since the request: a newer
				// one (released meanwhile) may be newer than the answer.
				if cur, ok := c.entries[e.Metadata.SessionID]; ok && cur.Status.Phase == api.PhasePending && c.appliedAt[e.Metadata.SessionID] <= sent {
					cur.Status.Phase = api.PhaseClaimed // until the queue says otherwise
					c.entries[e.Metadata.SessionID] = cur
				}
			}
			c.mu.Unlock()
			return true, 0
		}
		c.mu.Lock()
		c.fullTries = 0
		c.mu.Unlock()
		c.start(ctx, *claim, false)
	}
	return true, 0
}

// postponed lists the sessions held back by retryAt now, and the pending
// restricted ones the runner refuses one by one (NetworkRefusal), for a
// request's exclude; false when there are more than it may hold. Restricted
// sessions a consumer cannot enforce at all are not listed: the request
// says whether it enforces, and the server skips them for one that does not.
func (c *Consumer) postponed() ([]string, bool) {
	// A runner that enforces policies may still refuse some (the operator:
	// hostname rules); those the server cannot know are excluded here.
	perEntry := c.NetworkRefusal != nil && c.enforcesNetwork()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	var out []string
	for id, at := range c.retryAt {
		if now.Before(at) {
			out = append(out, id)
		}
	}
	if perEntry {
		for id, e := range c.entries {
			if e.Status.Phase == api.PhasePending && Restricted(&e) && !now.Before(c.retryAt[id]) && c.NetworkRefusal(&e) != nil {
				out = append(out, id)
			}
		}
	}
	return out, len(out) <= api.MaxClaimNextExclude
}

// claimNext is claim of the server's choice. A claim already sent is seen
// through even when ctx ends meanwhile, and then released at once.
func (c *Consumer) claimNext(ctx context.Context, exclude []string) (*api.QueueEntry, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	steptrace.Mark("worker.claim_sent", "")
	claim, err := c.Client.Queue.ClaimNext(cctx, c.outpostID(), api.ClaimNextRequest{
		AcceptorID: c.Identity.AcceptorID, Platform: c.platform, Exclude: exclude,
		NetworkPolicy: c.enforcesNetwork(), Desktop: c.Desktop, Machine: c.Machine, Provisions: c.Provisions,
	})
	if claim != nil {
		steptrace.Mark("worker.claim_answer", claim.Metadata.SessionID)
	}
	if err == nil && claim != nil && ctx.Err() != nil {
		c.Release(context.WithoutCancel(ctx), claim.Metadata.SessionID, "")
		return nil, ctx.Err()
	}
	return claim, err
}
