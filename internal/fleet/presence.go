package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// goodbyeTimeout bounds the goodbye sent when the consumer stops.
const goodbyeTimeout = 5 * time.Second

// ErrAcceptorInUse is returned by Consumer.Run when another live process
// holds the consumer's acceptor id.
var ErrAcceptorInUse = errors.New("acceptor id in use")

// Presence announces an acceptor (a worker or an orchestrator) to the
// server (PUT /v1/outposts/{outpost}/workers/{acceptor}) on start, every
// heartbeat interval and whenever what it serves changes, and says goodbye
// when it stops. Failures are logged and never stop the acceptor, except
// that a heartbeat refused because another live process holds the
// acceptor id (api.CodeAcceptorInUse) is reported to the consumer, which
// stops.
type Presence struct {
	c        *client.Client
	outpost  string // outpost id
	acceptor string
	every    time.Duration // 0: as the server says, else api.WorkerHeartbeatInterval
	log      *slog.Logger
	clock    clockwork.Clock
	wake     chan struct{}

	mu   sync.Mutex // guards info
	info api.WorkerInfo
}

// NewPresence returns the presence of acceptor on the outpost with id
// outpostID; every zero means the interval the server asks for, clk nil the
// real clock. A Consumer given it runs it.
func NewPresence(c *client.Client, outpostID, acceptor string, info api.WorkerInfo, every time.Duration, clk clockwork.Clock, log *slog.Logger) *Presence {
	if clk == nil {
		clk = clockwork.NewRealClock()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Presence{c: c, outpost: outpostID, acceptor: acceptor, every: every, log: log, clock: clk,
		wake: make(chan struct{}, 1), info: info}
}

// setHeld records how many sessions the acceptor serves now, and which one
// when it serves one at most, and sends a heartbeat soon so that the UI
// shows it without waiting for the next beat.
func (p *Presence) setHeld(n int, sessionID string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.info.ActiveSessions = n
	p.info.SessionID = sessionID
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Announce sends one heartbeat now and returns the server's answer.
func (p *Presence) Announce(ctx context.Context) (*api.Worker, error) {
	p.mu.Lock()
	info := p.info
	p.mu.Unlock()
	return p.c.Workers.Heartbeat(ctx, p.outpost, p.acceptor, info)
}

// Instance is the instance id this presence announces ("" for none).
func (p *Presence) Instance() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.info.Instance
}

// run heartbeats until ctx ends, then says goodbye. onConflict is called
// with the server's refusal when another process holds the acceptor id.
func (p *Presence) run(ctx context.Context, onConflict func(error)) {
	failing := false
	every := p.every
	for {
		// Not cancelled with ctx: a heartbeat abandoned mid-flight could
		// reach the server after the goodbye and announce us again.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		res, err := p.Announce(hctx)
		cancel()
		kind := p.info.Kind // set once, by NewPresence
		switch {
		case ctx.Err() != nil:
		case client.HasCode(err, api.CodeAcceptorInUse):
			p.log.Error("another live process announces itself under this acceptor id", "acceptor_id", p.acceptor, "err", err)
			onConflict(err)
		case err != nil && !failing:
			failing = true
			p.log.Warn("cannot announce this "+kind+" to the server; it keeps serving and retries", "err", err)
		case err != nil:
			p.log.Debug("heartbeat failed", "err", err)
		case failing:
			failing = false
			p.log.Info(kind + " announced to the server again")
		}
		if p.every == 0 {
			every = api.WorkerHeartbeatInterval
			if res != nil && res.HeartbeatIntervalS > 0 {
				every = time.Duration(res.HeartbeatIntervalS) * time.Second
			}
		}
		t := p.clock.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			p.goodbye(context.WithoutCancel(ctx))
			return
		case <-p.wake:
		case <-t.Chan():
		}
		t.Stop()
	}
}

func (p *Presence) goodbye(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, goodbyeTimeout)
	defer cancel()
	var err error
	if instance := p.Instance(); instance != "" {
		err = p.c.Workers.GoodbyeInstance(ctx, p.outpost, p.acceptor, instance)
	} else {
		err = p.c.Workers.Goodbye(ctx, p.outpost, p.acceptor)
	}
	if err != nil {
		p.log.Debug("goodbye failed; the server forgets this acceptor after its heartbeats stop", "err", err)
		return
	}
	p.log.Debug("said goodbye to the server")
}

// Two consumers must never share an acceptor id: the second would take the
// first one's claims for renewals and serve their sessions again. Each
// announces itself with a random instance id before it claims anything,
// and the server refuses a heartbeat under an acceptor id whose live entry
// names another instance (api.CodeAcceptorInUse). A consumer refused so
// stops; one whose predecessor on this machine died without a goodbye (the
// instance that held its data dir before it, or a process whose pid is
// gone) takes the entry over at once rather than wait for it to expire.

// acceptorInUseError names the acceptor id and its holder; it matches
// ErrAcceptorInUse.
type acceptorInUseError struct {
	id     *Identity
	holder *api.Worker // nil when not known
	now    time.Time
	server error // the server's refusal
}

func (e *acceptorInUseError) Error() string {
	kind := e.id.Kind
	who := "another live " + kind
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
	return fmt.Sprintf("acceptor id %q is in use by %s: two %ss must never share an identity. %s",
		e.id.AcceptorID, who, kind, e.id.Hint)
}

func (e *acceptorInUseError) Unwrap() []error { return []error{ErrAcceptorInUse, e.server} }

// claimIdentity announces the consumer before it claims anything. Other
// announcement failures are logged (the consumer serves anyway); only a
// refusal because another live process holds the acceptor id stops it.
func (c *Consumer) claimIdentity(ctx context.Context) error {
	p := c.Presence
	if p == nil || p.Instance() == "" {
		return nil
	}
	for takenOver := false; ; takenOver = true {
		_, err := p.Announce(ctx)
		if err == nil {
			c.announced = true
			return nil
		}
		if !client.HasCode(err, api.CodeAcceptorInUse) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.log.Warn("cannot announce this "+c.Identity.Kind+" to the server; it serves anyway and retries", "err", err)
			return nil
		}
		holder := c.holder(ctx)
		if !takenOver && holder != nil && predecessor(c.Identity, holder) {
			c.log.Info("the previous "+c.Identity.Kind+" under this acceptor id on this machine is gone; taking its place",
				"acceptor_id", c.Identity.AcceptorID, "previous_pid", holder.PID, "previous_instance", holder.Instance)
			if err := c.Client.Workers.GoodbyeInstance(ctx, c.outpostID(), c.Identity.AcceptorID, holder.Instance); err != nil {
				return fmt.Errorf("forget the previous %s's entry: %w", c.Identity.Kind, err)
			}
			continue
		}
		return &acceptorInUseError{id: c.Identity, holder: holder, now: c.clock.Now(), server: err}
	}
}

// holder is the live presence entry of the consumer's acceptor id, or nil.
func (c *Consumer) holder(ctx context.Context) *api.Worker {
	l, err := c.Client.Workers.List(ctx, c.outpostID())
	if err != nil {
		return nil
	}
	for i := range l.Items {
		if l.Items[i].AcceptorID == c.Identity.AcceptorID {
			return &l.Items[i]
		}
	}
	return nil
}

// predecessor reports whether h is a dead process of this machine: a
// consumer that ran here under the same acceptor id and stopped without a
// goodbye. The instance that held id's data dir before this process is one
// (the lock proves it gone, whatever its pid shows: a zombie, or a pid
// reused, still answers kill(pid, 0)); so is, for a data dir that recorded
// no instance, a process of this machine whose pid is gone or is this
// process's (a container restarted).
func predecessor(id *Identity, h *api.Worker) bool {
	if id.Previous != "" && h.Instance == id.Previous {
		return true
	}
	host, _ := os.Hostname()
	if h.Instance == "" || h.PID <= 0 || h.Hostname == "" || h.Hostname != host {
		return false
	}
	return h.PID == os.Getpid() || !processAlive(h.PID)
}

// handBack releases every claim the consumer's acceptor id holds as it
// starts (Consumer.HandBack): its predecessor's, whose machines died with
// it. Each release says why on the session's transcript and counts as a
// failed attempt of the session, as a lost machine does.
func (c *Consumer) handBack(ctx context.Context) {
	f := client.QueueFilter{Outpost: c.outpostID(), Phase: api.PhaseClaimed, AcceptorID: c.Identity.AcceptorID, First: listPage}
	var ids []string
	for {
		l, err := c.Client.Queue.List(ctx, f)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("cannot list the claims the previous "+c.Identity.Kind+" held; they lapse after the reconnect grace", "err", err)
			}
			return
		}
		for _, e := range l.Items {
			if a := e.Status.AcceptorID; a != nil && *a == c.Identity.AcceptorID {
				ids = append(ids, e.Metadata.SessionID)
			}
		}
		if !l.HasNextPage || l.Cursor == "" {
			break
		}
		f.Cursor = l.Cursor
	}
	reason := fmt.Sprintf("the %s restarted: its previous process ended without releasing this claim, and the session's remote ended with it", c.Identity.Kind)
	for _, id := range ids {
		c.log.Info("handing back a session the previous "+c.Identity.Kind+" held", "session", id)
		c.Release(ctx, id, reason)
	}
}
