package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/api"
)

// Two workers must never share an acceptor id: the second would take the
// first one's claims for renewals and serve their sessions again. Each
// worker announces itself with a random instance id before it claims
// anything, and the server refuses a heartbeat under an acceptor id whose
// live entry names another instance (api.CodeAcceptorInUse). A worker
// refused so stops; one whose predecessor on this machine died without a
// goodbye (its pid is gone) takes the entry over at once rather than wait
// for it to expire.

// ErrAcceptorInUse is returned by Run when another live process holds the
// worker's acceptor id.
var ErrAcceptorInUse = errors.New("acceptor id in use")

// acceptorInUseError names the acceptor id and its holder; it matches
// ErrAcceptorInUse.
type acceptorInUseError struct {
	acceptor string
	holder   *api.Worker // nil when not known
	now      time.Time
	server   error // the server's refusal
}

func (e *acceptorInUseError) Error() string {
	who := "another live worker"
	if h := e.holder; h != nil {
		who = "another live " + h.Kind
		if h.Hostname != "" {
			who += " on " + h.Hostname
		}
		if h.PID > 0 {
			who += fmt.Sprintf(" (pid %d)", h.PID)
		}
		who += fmt.Sprintf(", last seen %ds ago", max(0, e.now.Unix()-h.LastSeenAt))
	}
	return fmt.Sprintf("acceptor id %q is in use by %s: two workers must never share an identity. "+
		"Give this worker its own --acceptor-id (or none: each workspace gets its own), or stop the other one", e.acceptor, who)
}

func (e *acceptorInUseError) Unwrap() []error { return []error{ErrAcceptorInUse, e.server} }

// claimIdentity announces the worker before it claims anything. Other
// announcement failures are logged (the worker serves anyway, as it did
// before presence existed); only a refusal because another live process
// holds the acceptor id stops it.
func (w *worker) claimIdentity(ctx context.Context) error {
	if w.presence.Instance() == "" {
		return nil
	}
	for takenOver := false; ; takenOver = true {
		_, err := w.presence.Announce(ctx)
		if err == nil {
			return nil
		}
		if !client.HasCode(err, api.CodeAcceptorInUse) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			w.log.Warn("cannot announce this worker to the server; it serves anyway and retries", "err", err)
			return nil
		}
		holder := w.holder(ctx)
		if !takenOver && holder != nil && w.predecessor(holder) {
			w.log.Info("the previous worker under this acceptor id on this machine is gone; taking its place",
				"acceptor_id", w.acceptor, "previous_pid", holder.PID)
			if err := w.c.Workers.GoodbyeInstance(ctx, w.outpost.Metadata.OutpostID, w.acceptor, holder.Instance); err != nil {
				return fmt.Errorf("forget the previous worker's entry: %w", err)
			}
			continue
		}
		return &acceptorInUseError{acceptor: w.acceptor, holder: holder, now: time.Now(), server: err}
	}
}

// holder is the live presence entry of the worker's acceptor id, or nil.
func (w *worker) holder(ctx context.Context) *api.Worker {
	l, err := w.c.Workers.List(ctx, w.outpost.Metadata.OutpostID)
	if err != nil {
		return nil
	}
	for i := range l.Items {
		if l.Items[i].AcceptorID == w.acceptor {
			return &l.Items[i]
		}
	}
	return nil
}

// predecessor reports whether h is a dead process of this machine: a
// worker that ran here under the same acceptor id and stopped without a
// goodbye. A process of this machine with this process's pid is one too
// (a container restarted).
func (w *worker) predecessor(h *api.Worker) bool {
	host, _ := os.Hostname()
	if h.Instance == "" || h.PID <= 0 || h.Hostname == "" || h.Hostname != host {
		return false
	}
	return h.PID == os.Getpid() || !processAlive(h.PID)
}
