package fleet

import (
	"context"
	"slices"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/steptrace"
)

// A consumer with free capacity keeps one claim-next request waiting at
// the server (api.ClaimNextRequest.WaitSeconds) rather than asking on each
// change its watch shows: the server parks it and hands it a fitting
// session as soon as one is pending, so a new session costs one request
// instead of one per idle claimer. The watch still keeps the consumer's
// entries (cancellations, ends of held sessions); while a request waits,
// its events send nothing. One request in all, whatever the capacity: the
// server claims for a request that arrives while sessions are pending at
// once, so a backlog is drained by requests back to back, and a consumer
// with many slots does not park many requests that the same new session
// would each be woken for.
//
// A server that does not park (an older one: no api.HeaderClaimWait on
// its answer) answers at once; the consumer then asks on each change as
// before, and tries waiting again after waitRetry.

// DefaultClaimWait is how long a waiting claim-next may be held by the
// server: below the minute after which proxies commonly cut idle requests.
const DefaultClaimWait = 30 * time.Second

// waitRetry is how long a consumer asks without waiting after a server
// answered that it does not park requests.
const waitRetry = 10 * time.Minute

// waitSeconds is the wait a request asks for; 0 when the consumer does
// not wait.
func (c *Consumer) waitSeconds() int {
	switch {
	case c.ClaimWait < 0:
		return 0
	case c.ClaimWait == 0:
		return int(DefaultClaimWait / time.Second)
	}
	return min(max(int(c.ClaimWait/time.Second), 1), api.MaxClaimNextWait)
}

// waitNext keeps a waiting claim-next outstanding while the consumer has
// free capacity, and reports whether one is: then scheduleNext has nothing
// to send. A request already waiting with sessions in its exclude list
// that may be claimed again now is cut short, to be asked again without
// them.
func (c *Consumer) waitNext(ctx context.Context) bool {
	if c.waitSeconds() == 0 {
		return false
	}
	if until := c.waitOffUntil.Load(); until != 0 && c.clock.Now().UnixNano() < until {
		return false
	}
	_, post, ok := c.waitExcludes()
	if !ok {
		// Too many sessions to leave out for a waiting request: claims
		// go by the entries the watch shows until they are fewer.
		c.watchAll()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiting {
		if c.waitCancel != nil {
			for _, id := range c.waitExclude {
				if !slices.Contains(post, id) {
					c.waitCancel()
					break
				}
			}
		}
		return true
	}
	if !ok || c.halting.Load() || c.Drain || c.Capacity-len(c.held) <= 0 || c.clock.Now().Before(c.fullUntil) {
		return false
	}
	c.waiting = true
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.poke() // the scheduler looks again once no request waits
		defer func() {
			c.mu.Lock()
			c.waiting = false
			c.mu.Unlock()
		}()
		c.waitLoop(ctx)
	}()
	return true
}

// waitLoop sends waiting claim-next requests one after the other while
// the consumer has free capacity, until ctx ends or the server cannot be
// asked so (then the scheduler takes over).
func (c *Consumer) waitLoop(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil && c.free() > 0 {
		exclude, post, ok := c.waitExcludes()
		if !ok {
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		c.mu.Lock()
		c.waitCancel, c.waitExclude = cancel, post
		c.mu.Unlock()
		sent := time.Now()
		claim, waits, err := c.claimNextWait(ctx, wctx, exclude)
		cut := wctx.Err() != nil && ctx.Err() == nil
		c.mu.Lock()
		c.waitCancel, c.waitExclude = nil, nil
		c.mu.Unlock()
		cancel()
		switch {
		case cut && claim == nil:
			continue // cut short to ask with a shorter exclude list
		case client.HasCode(err, api.CodeOutpostAtCapacity):
			c.pause(ctx, c.atCapacity())
			return
		case client.IsNotFound(err):
			if c.byIDUntil.Swap(c.clock.Now().Add(claimNextRetry).UnixNano()) == 0 {
				c.log.Info("the server does not assign claims (an older version, or the outpost is gone); claiming sessions by id", "err", err)
			}
			c.watchAll()
			return
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			failures++
			c.log.Warn("cannot wait for the next session; retrying", "err", err)
			c.obs.Failure("claim")
			c.pause(ctx, claimBackoff.Delay(failures))
		case claim != nil:
			failures = 0
			c.mu.Lock()
			c.fullTries = 0
			c.mu.Unlock()
			c.start(ctx, *claim, false)
		case !waits:
			c.waitOffUntil.Store(c.clock.Now().Add(waitRetry).UnixNano())
			c.watchAll()
			c.log.Info("the server answers claim-next at once (an older version); asking on each change of the queue")
			return
		case time.Since(sent) < time.Second && ctx.Err() == nil:
			// Not held as asked (the server stopping): not at once again.
			failures++
			c.pause(ctx, claimBackoff.Delay(failures))
		default:
			failures = 0 // the wait is over: ask again
		}
	}
}

// waitExcludes is postponed's list with the sessions the consumer holds
// too, while they fit: a held session released while a request waits
// (its runner gave it back, to be postponed once it is unregistered) is
// not handed straight back to the same consumer.
// post is the postponed part alone: a request is cut short (to ask again
// without them) only when one of those may be claimed again, never
// because a held session ended, which a cut would only race with a claim
// being made for it.
func (c *Consumer) waitExcludes() (exclude, post []string, ok bool) {
	post, ok = c.postponed()
	if !ok {
		return nil, post, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	exclude = slices.Clone(post)
	if len(exclude)+len(c.held) > api.MaxClaimNextExclude {
		return exclude, post, true
	}
	for id := range c.held {
		if !slices.Contains(exclude, id) {
			exclude = append(exclude, id)
		}
	}
	return exclude, post, true
}

// pause waits d on the consumer's clock, or until ctx ends.
func (c *Consumer) pause(ctx context.Context, d time.Duration) {
	t := c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
	case <-ctx.Done():
	}
}

// claimNextWait is claimNext of a request that waits: it ends with wctx.
// A claim answered after ctx ended is released at once.
func (c *Consumer) claimNextWait(ctx, wctx context.Context, exclude []string) (*api.QueueEntry, bool, error) {
	steptrace.Mark("worker.claim_sent", "")
	claim, waits, err := c.Client.Queue.ClaimNextWaiting(wctx, c.outpostID(), api.ClaimNextRequest{
		AcceptorID: c.Identity.AcceptorID, Platform: c.platform, Exclude: exclude,
		NetworkPolicy: c.enforcesNetwork(), Desktop: c.Desktop, Machine: c.Machine, Provisions: c.Provisions,
		WaitSeconds: c.waitSeconds(),
	})
	if claim != nil {
		steptrace.Mark("worker.claim_answer", claim.Metadata.SessionID)
		if ctx.Err() != nil {
			c.Release(context.WithoutCancel(ctx), claim.Metadata.SessionID, "")
			return nil, waits, ctx.Err()
		}
	}
	return claim, waits, err
}
