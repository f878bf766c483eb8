package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/api"
)

// maxWatchBackoff caps the wait before watching the queue again after a
// failed watch; the queue is polled meanwhile.
const maxWatchBackoff = time.Minute

// errClaimed stops a watch once a session has been claimed.
var errClaimed = errors.New("claimed a session")

// runQueue serves the outpost's sessions one at a time until ctx ends, or
// after one with Once.
func (w *worker) runQueue(ctx context.Context) error {
	for {
		claim, err := w.acquire(ctx)
		if err != nil {
			return err
		}
		if err := w.serve(ctx, claim); err != nil {
			if w.opts.Once || errors.Is(err, errStart) || errors.Is(err, ErrWorkspace) {
				return err
			}
			if ctx.Err() != nil {
				w.log.Info("session handed back to the queue", "session", claim.Metadata.SessionID, "reason", err)
			} else {
				w.log.Warn("session failed", "session", claim.Metadata.SessionID, "err", err)
			}
		}
		if w.opts.Once || ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// acquire blocks until it has claimed a pending session: it lists the
// pending entries, then watches the queue from the list's cursor,
// reconnecting whenever the server ends the stream. While watching fails it
// polls the list every PollInterval and tries the watch again with backoff.
func (w *worker) acquire(ctx context.Context) (*api.QueueEntry, error) {
	failures := 0
	for {
		claim, cursor, err := w.scan(ctx)
		if claim != nil || ctx.Err() != nil {
			return claim, ctx.Err()
		}
		if err != nil {
			w.log.Warn("cannot list the queue; retrying", "err", err, "in", w.opts.PollInterval)
			if err := sleep(ctx, w.opts.PollInterval); err != nil {
				return nil, err
			}
			continue
		}
		claim, err = w.watch(ctx, cursor)
		if claim != nil || ctx.Err() != nil {
			return claim, ctx.Err()
		}
		failures++
		retry := time.Now().Add(watchBackoff(failures))
		w.log.Warn("cannot watch the queue; polling it meanwhile", "err", err, "poll_interval", w.opts.PollInterval,
			"watch_retry_at", retry.Format(time.TimeOnly))
		for time.Until(retry) > 0 {
			if err := sleep(ctx, min(w.opts.PollInterval, time.Until(retry))); err != nil {
				return nil, err
			}
			if time.Until(retry) <= 0 {
				break // the next scan is the one at the top of the loop
			}
			claim, _, err := w.scan(ctx)
			if claim != nil || ctx.Err() != nil {
				return claim, ctx.Err()
			}
			if err != nil {
				w.log.Warn("cannot list the queue", "err", err)
			}
		}
	}
}

// scan lists every pending entry of the outpost, trying to claim each
// candidate, and returns the list's final cursor for a watch.
func (w *worker) scan(ctx context.Context) (*api.QueueEntry, string, error) {
	f := client.QueueFilter{Outpost: w.outpost.Metadata.OutpostID, Phase: api.PhasePending}
	for {
		page, err := w.c.Queue.List(ctx, f)
		if err != nil {
			return nil, "", fmt.Errorf("list queue: %w", err)
		}
		for i := range page.Items {
			claim, err := w.tryClaim(ctx, &page.Items[i])
			if claim != nil || err != nil {
				return claim, "", err
			}
		}
		if !page.HasNextPage || page.Cursor == "" || page.Cursor == f.Cursor {
			return nil, page.Cursor, nil
		}
		f.Cursor = page.Cursor
	}
}

// watch watches the queue from cursor, reconnecting each time the server
// ends the stream, until it claims a session or the watch fails.
func (w *worker) watch(ctx context.Context, cursor string) (*api.QueueEntry, error) {
	for {
		var claim *api.QueueEntry
		events, start := 0, time.Now()
		err := w.c.Queue.Watch(ctx, w.outpost.Metadata.OutpostID, cursor, func(ev api.WatchEvent) error {
			events++
			if ev.Cursor != "" {
				cursor = ev.Cursor
			}
			if ev.Type != api.WatchModified {
				return nil
			}
			c, err := w.tryClaim(ctx, &ev.Object)
			if err != nil {
				return err
			}
			if c != nil {
				claim = c
				return errClaimed
			}
			return nil
		})
		if claim != nil {
			return claim, nil
		}
		if err != nil {
			return nil, err
		}
		if events == 0 && time.Since(start) < time.Second {
			// A server that ends every stream at once would make this loop spin.
			return nil, errors.New("the queue watch ended as soon as it started")
		}
		w.log.Debug("queue watch ended by the server; reconnecting", "cursor", cursor)
	}
}

// tryClaim claims e when it is a session this worker may serve. It returns
// nil, nil when the entry is not a candidate or another worker won it.
func (w *worker) tryClaim(ctx context.Context, e *api.QueueEntry) (*api.QueueEntry, error) {
	if !w.candidate(e) {
		return nil, nil
	}
	id := e.Metadata.SessionID
	claim, err := w.claim(ctx, id)
	switch {
	case client.IsConflict(err) || client.IsNotFound(err):
		w.log.Debug("session taken by another worker", "session", id)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("claim session %s: %w", id, err)
	}
	return claim, nil
}

// claim claims session id. A claim already sent is seen through even when
// ctx ends meanwhile, and then released at once, so that shutdown never
// leaves a session claimed by nobody until its deadline.
func (w *worker) claim(ctx context.Context, id string) (*api.QueueEntry, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	claim, err := w.c.Queue.Claim(cctx, id, w.acceptor)
	if err == nil && ctx.Err() != nil {
		w.release(context.WithoutCancel(ctx), id, w.log.With("session", id))
		return nil, ctx.Err()
	}
	return claim, err
}

// candidate reports whether e is pending on this outpost, for this
// platform, and not asleep or over.
func (w *worker) candidate(e *api.QueueEntry) bool {
	switch {
	case e.Status.Phase != api.PhasePending,
		e.Status.SessionStatus == api.QueueSessionSuspended,
		e.Status.SessionStatus == api.QueueSessionTerminated,
		e.Metadata.OutpostID != "" && e.Metadata.OutpostID != w.outpost.Metadata.OutpostID,
		e.Spec.Platform != "" && e.Spec.Platform != w.platform:
		return false
	}
	return true
}

// runSession claims the one session id, retrying while it waits in the
// queue, and serves it.
func (w *worker) runSession(ctx context.Context, id string) error {
	logged := false
	for {
		e, err := w.c.Queue.Get(ctx, id)
		switch {
		case client.IsNotFound(err):
			return fmt.Errorf("session %s is not in the queue (it ended or never existed)", id)
		case err != nil:
			return fmt.Errorf("read session %s from the queue: %w", id, err)
		case e.Metadata.OutpostID != w.outpost.Metadata.OutpostID:
			return fmt.Errorf("session %s is queued on another outpost (%s), not %q", id, e.Metadata.OutpostID, w.outpost.Spec.Name)
		case e.Status.SessionStatus == api.QueueSessionTerminated:
			return fmt.Errorf("session %s has already ended", id)
		case e.Spec.Platform != "" && e.Spec.Platform != w.platform:
			return fmt.Errorf("session %s needs a %s machine, this one runs %s", id, e.Spec.Platform, w.platform)
		}
		held := e.Status.AcceptorID != nil && *e.Status.AcceptorID == w.acceptor
		if e.Status.SessionStatus != api.QueueSessionSuspended && (e.Status.Phase == api.PhasePending || held) {
			claim, err := w.claim(ctx, id)
			if err == nil {
				return w.serve(ctx, claim)
			}
			if !client.IsConflict(err) {
				return fmt.Errorf("claim session %s: %w", id, err)
			}
		}
		if !logged {
			w.log.Info("waiting for the session to become claimable", "session", id,
				"phase", e.Status.Phase, "session_status", e.Status.SessionStatus)
			logged = true
		}
		if err := sleep(ctx, w.opts.PollInterval); err != nil {
			return err
		}
	}
}

// watchBackoff is the wait before the n-th watch retry (n ≥ 1).
func watchBackoff(n int) time.Duration {
	d := time.Second
	for i := 1; i < n && d < maxWatchBackoff; i++ {
		d *= 2
	}
	return min(d, maxWatchBackoff)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
