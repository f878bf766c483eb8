package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/backoff"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/atomicfile"
	"github.com/outpost-sh/outpost/internal/steptrace"
)

// errWatchEndedAtOnce is a watch the server ended as soon as it started.
var errWatchEndedAtOnce = errors.New("the queue watch ended as soon as it started")

// errWatchAll ends a held watch when the consumer needs the whole queue's
// (watchAll): the feed lists the queue, then watches it all.
var errWatchAll = errors.New("the whole queue is to be watched")

// feed keeps the known entries up to date until ctx ends: it lists the
// queue, then watches it from the list's cursor, reconnecting from the last
// event's cursor whenever a stream ends, so nothing is missed or replayed.
// While watching fails it lists the queue every PollInterval and tries the
// watch again with backoff; after maxWatchFailures failures in a row, or
// when the server refuses the cursor (400), it lists again first. A start
// always lists: a list is the queue's whole state, a replay only what
// changed.
//
// A server given a cursor it did not issue (its database was reset, say)
// starts the stream with every live entry as an upsert instead, without
// the tombstones of entries deleted meanwhile: an entry left over from
// before is replaced by the next list, claiming it meanwhile answers 404
// (a lost race), and each held session's check ends it once it is gone.
func (c *Consumer) feed(ctx context.Context) {
	for ctx.Err() == nil {
		cursor, err := c.list(ctx)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("cannot list the queue; retrying", "err", err, "in", c.PollInterval)
				c.obs.Failure("list")
			}
			_ = backoff.Sleep(ctx, c.clock, c.PollInterval)
			continue
		}
		for failures := 0; ctx.Err() == nil; {
			err := c.watch(ctx, &cursor)
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, errWatchAll) {
				break // list, then watch
			}
			if err == nil {
				failures = 0 // the server ended a healthy stream: reconnect
				c.log.Debug("queue watch ended by the server; reconnecting", "cursor", cursor)
				continue
			}
			failures++
			c.obs.Failure("watch")
			relist := client.IsBadRequest(err) || failures >= maxWatchFailures
			retry := c.clock.Now().Add(watchBackoff.Delay(failures))
			c.log.Warn("cannot watch the queue; polling it meanwhile", "err", err, "failures", failures,
				"poll_interval", c.PollInterval, "watch_retry_at", retry.Format(time.TimeOnly), "list_again", relist)
			if polled, ok := c.pollUntil(ctx, retry); ok {
				cursor = polled
			}
			if relist {
				break
			}
		}
	}
}

// pollUntil lists the queue every PollInterval until the time retry, and
// returns the last list's cursor (ok when a list succeeded).
func (c *Consumer) pollUntil(ctx context.Context, retry time.Time) (cursor string, ok bool) {
	for {
		left := retry.Sub(c.clock.Now())
		if left <= 0 {
			return cursor, ok
		}
		if backoff.Sleep(ctx, c.clock, min(c.PollInterval, left)) != nil {
			return cursor, ok
		}
		if !c.clock.Now().Before(retry) {
			return cursor, ok // the next list or watch is the caller's
		}
		cur, err := c.list(ctx)
		switch {
		case err == nil:
			cursor, ok = cur, true
		case ctx.Err() == nil:
			c.log.Warn("cannot list the queue", "err", err)
			c.obs.Failure("list")
		}
	}
}

// resync lists the queue every ResyncInterval.
func (c *Consumer) resync(ctx context.Context) {
	for backoff.Sleep(ctx, c.clock, c.ResyncInterval) == nil {
		if _, err := c.list(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("cannot list the queue", "err", err)
			c.obs.Failure("list")
		}
	}
}

// list replaces the known pending entries with the server's, pokes the
// scheduler and returns the list's final cursor.
func (c *Consumer) list(ctx context.Context) (string, error) {
	f := client.QueueFilter{Outpost: c.outpostID(), Phase: api.PhasePending, First: listPage}
	fresh := map[string]api.QueueEntry{}
	for {
		page, err := c.Client.Queue.List(ctx, f)
		if err != nil {
			return "", fmt.Errorf("list queue: %w", err)
		}
		for _, e := range page.Items {
			fresh[e.Metadata.SessionID] = e
		}
		if !page.HasNextPage || page.Cursor == "" || page.Cursor == f.Cursor {
			c.mu.Lock()
			c.entries = fresh
			c.applied++
			c.appliedAt = make(map[string]uint64, len(fresh))
			for id := range fresh {
				c.appliedAt[id] = c.applied
			}
			c.mu.Unlock()
			c.saveCursor(page.Cursor)
			c.poke()
			return page.Cursor, nil
		}
		f.Cursor = page.Cursor
	}
}

// watch watches the queue from *cursor until the stream ends, advancing
// *cursor with each event. A stream the server ends after events, or after
// a second, is healthy (nil).
func (c *Consumer) watch(ctx context.Context, cursor *string) error {
	events, start := 0, c.clock.Now()
	fn := func(ev api.WatchEvent) error {
		events++
		if ev.Cursor != "" {
			*cursor = ev.Cursor
			c.saveCursor(ev.Cursor)
		}
		if ev.Type == api.WatchBookmark {
			return nil // the cursor alone
		}
		steptrace.Mark("worker.watch_event", ev.Object.Metadata.SessionID)
		c.upsert(ev.Type, ev.Object)
		return nil
	}
	var err error
	if c.watchesHeld() {
		wctx, cancel := context.WithCancel(ctx)
		c.mu.Lock()
		c.rewatch = cancel
		c.mu.Unlock()
		if !c.watchesHeld() {
			// A watchAll between the check and rewatch found none to end.
			cancel()
		}
		err = c.Client.Queue.WatchHeld(wctx, c.outpostID(), c.Identity.AcceptorID, *cursor, fn)
		c.mu.Lock()
		c.rewatch = nil
		c.mu.Unlock()
		cut := wctx.Err() != nil && ctx.Err() == nil
		cancel()
		if cut {
			// The way of claiming changed: the whole queue is wanted,
			// and its pending entries created meanwhile were passed
			// over, so it is listed first.
			return errWatchAll
		}
	} else {
		err = c.Client.Queue.Watch(ctx, c.outpostID(), *cursor, fn)
	}
	switch {
	case err != nil:
		return err
	case events == 0 && c.clock.Since(start) < time.Second:
		// A server that ends every stream at once would make this loop spin.
		return errWatchEndedAtOnce
	}
	return nil
}

// watchesHeld reports whether the next watch is narrowed to the entries
// the consumer holds: with WatchHeld, while it claims through waiting
// claim-next requests.
func (c *Consumer) watchesHeld() bool {
	if !c.WatchHeld || c.waitSeconds() <= 0 || c.Identity == nil || c.Identity.AcceptorID == "" {
		return false
	}
	now := c.clock.Now().UnixNano()
	if c.waitOffUntil.Load() > now || c.byIDUntil.Load() > now {
		return false
	}
	_, _, ok := c.waitExcludes()
	return ok
}

// watchAll ends a held watch, if one is open, once the consumer claims
// otherwise than through waiting requests: the next watch is the whole
// queue's, whose pending entries it then claims from.
func (c *Consumer) watchAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rewatch != nil {
		c.rewatch()
	}
}

// upsert records a watch event and pokes the scheduler; an event that
// shows a held session over ends it.
func (c *Consumer) upsert(typ string, e api.QueueEntry) {
	id := e.Metadata.SessionID
	c.mu.Lock()
	if s := c.held[id]; s != nil && (typ == api.WatchDeleted || e.Status.SessionStatus == api.QueueSessionTerminated) {
		s.end()
	} else if s != nil {
		s.updated(e)
	}
	if old, ok := c.entries[id]; typ == api.WatchDeleted || ok && old.Status.Phase == api.PhaseClaimed && e.Status.Phase == api.PhasePending {
		// A claim ended: a slot of the outpost's max_running may be free.
		c.fullUntil = time.Time{}
	}
	if typ == api.WatchDeleted {
		delete(c.entries, id)
	} else {
		c.entries[id] = e
	}
	c.applied++
	if c.appliedAt == nil {
		c.appliedAt = map[string]uint64{}
	}
	if typ == api.WatchDeleted {
		delete(c.appliedAt, id)
	} else {
		c.appliedAt[id] = c.applied
	}
	c.mu.Unlock()
	c.poke()
}

func (c *Consumer) saveCursor(cursor string) {
	if cursor == "" {
		return
	}
	if c.Cursor != nil {
		c.Cursor(cursor)
	}
	if c.CursorFile == "" {
		return
	}
	// A cursor not saved only costs a longer replay at the next start.
	_ = atomicfile.Write(c.CursorFile, []byte(cursor+"\n"), 0o600)
}
