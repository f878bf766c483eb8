package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/api"
	"github.com/outpost-sh/outpost/internal/machine"
)

// goodbyeTimeout bounds the goodbye sent when the worker stops.
const goodbyeTimeout = 5 * time.Second

// Presence announces an acceptor (a worker or an orchestrator) to the
// server (PUT /v1/outposts/{outpost}/workers/{acceptor}) on start, every
// heartbeat interval and whenever what it serves changes, and says goodbye
// when it stops. Failures are logged and never stop the acceptor.
type Presence struct {
	c        *client.Client
	outpost  string // outpost id
	acceptor string
	every    time.Duration // 0: as the server says, else api.WorkerHeartbeatInterval
	log      *slog.Logger
	wake     chan struct{}

	mu   sync.Mutex
	info api.WorkerInfo
}

func newPresence(w *worker, caps api.Capabilities) *Presence {
	return NewPresence(w.c, w.outpost.Metadata.OutpostID, w.acceptor, api.WorkerInfo{Kind: api.WorkerKindWorker,
		Hostname: caps.Hostname, Version: machine.Version, Capabilities: &caps, MaxSessions: 1}, w.opts.HeartbeatInterval, w.log)
}

// NewPresence returns the presence of acceptor on the outpost with id
// outpostID; every zero means the interval the server asks for. Start it
// with Run.
func NewPresence(c *client.Client, outpostID, acceptor string, info api.WorkerInfo, every time.Duration, log *slog.Logger) *Presence {
	return &Presence{c: c, outpost: outpostID, acceptor: acceptor, every: every, log: log, wake: make(chan struct{}, 1), info: info}
}

// SetActive records how many sessions the acceptor serves now and sends a
// heartbeat soon.
func (p *Presence) SetActive(n int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.info.ActiveSessions = n
	p.mu.Unlock()
	p.poke()
}

func (p *Presence) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// serving records the session served now ("" when idle) and sends a
// heartbeat soon, so the UI shows it without waiting for the next beat.
func (p *Presence) serving(sessionID string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.info.SessionID = sessionID
	p.info.ActiveSessions = 0
	if sessionID != "" {
		p.info.ActiveSessions = 1
	}
	p.mu.Unlock()
	p.poke()
}

// Run heartbeats until ctx ends, then says goodbye.
func (p *Presence) Run(ctx context.Context) {
	failing := false
	every := p.every
	for {
		p.mu.Lock()
		info := p.info
		p.mu.Unlock()
		// Not cancelled with ctx: a heartbeat abandoned mid-flight could
		// reach the server after the goodbye and announce us again.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		res, err := p.c.Workers.Heartbeat(hctx, p.outpost, p.acceptor, info)
		cancel()
		switch {
		case ctx.Err() != nil:
		case err != nil && !failing:
			failing = true
			p.log.Warn("cannot announce this "+info.Kind+" to the server; it keeps serving and retries", "err", err)
		case err != nil:
			p.log.Debug("heartbeat failed", "err", err)
		case failing:
			failing = false
			p.log.Info(info.Kind + " announced to the server again")
		}
		if p.every == 0 {
			every = api.WorkerHeartbeatInterval
			if res != nil && res.HeartbeatIntervalS > 0 {
				every = time.Duration(res.HeartbeatIntervalS) * time.Second
			}
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			p.goodbye(context.WithoutCancel(ctx))
			return
		case <-p.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

func (p *Presence) goodbye(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, goodbyeTimeout)
	defer cancel()
	if err := p.c.Workers.Goodbye(ctx, p.outpost, p.acceptor); err != nil {
		p.log.Debug("goodbye failed; the server forgets this worker after its heartbeats stop", "err", err)
		return
	}
	p.log.Debug("said goodbye to the server")
}
