package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/machine"
)

// goodbyeTimeout bounds the goodbye sent when the worker stops.
const goodbyeTimeout = 5 * time.Second

// Presence announces an acceptor (a worker or an orchestrator) to the
// server (PUT /v1/outposts/{outpost}/workers/{acceptor}) on start, every
// heartbeat interval and whenever what it serves changes, and says goodbye
// when it stops. Failures are logged and never stop the acceptor, except
// that a heartbeat refused because another live process holds the
// acceptor id (api.CodeAcceptorInUse) is reported to OnConflict.
type Presence struct {
	c        *client.Client
	outpost  string // outpost id
	acceptor string
	every    time.Duration // 0: as the server says, else api.WorkerHeartbeatInterval
	log      *slog.Logger
	wake     chan struct{}
	// OnConflict, when set before Run, is called (from Run's goroutine)
	// with the server's refusal when another process holds the acceptor
	// id; the acceptor should stop.
	OnConflict func(error)

	mu   sync.Mutex
	info api.WorkerInfo
}

func newPresence(w *worker, caps api.Capabilities) *Presence {
	info := api.WorkerInfo{Kind: api.WorkerKindWorker, Hostname: caps.Hostname, Version: machine.Version,
		Capabilities: &caps, MaxSessions: 1, PID: os.Getpid()}
	// A worker serving one session under an acceptor id it was given
	// (its orchestrator's) shares that id by design; any other holds its
	// id alone.
	if w.opts.SessionID == "" || w.opts.AcceptorID == "" {
		info.Instance = newInstanceID()
	}
	return NewPresence(w.c, w.outpost.Metadata.OutpostID, w.acceptor, info, w.opts.HeartbeatInterval, w.log)
}

// newInstanceID returns a random id for this process.
func newInstanceID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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

// Run heartbeats until ctx ends, then says goodbye.
func (p *Presence) Run(ctx context.Context) {
	failing := false
	every := p.every
	for {
		// Not cancelled with ctx: a heartbeat abandoned mid-flight could
		// reach the server after the goodbye and announce us again.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		res, err := p.Announce(hctx)
		cancel()
		p.mu.Lock()
		kind := p.info.Kind
		p.mu.Unlock()
		switch {
		case ctx.Err() != nil:
		case client.HasCode(err, api.CodeAcceptorInUse) && p.OnConflict != nil:
			p.log.Error("another live process announces itself under this acceptor id", "acceptor_id", p.acceptor, "err", err)
			p.OnConflict(err)
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
	var err error
	if instance := p.Instance(); instance != "" {
		err = p.c.Workers.GoodbyeInstance(ctx, p.outpost, p.acceptor, instance)
	} else {
		err = p.c.Workers.Goodbye(ctx, p.outpost, p.acceptor)
	}
	if err != nil {
		p.log.Debug("goodbye failed; the server forgets this worker after its heartbeats stop", "err", err)
		return
	}
	p.log.Debug("said goodbye to the server")
}
