package fleetsim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/fleet"
)

// worker is one simulated worker: the fleet consumer every real worker
// runs (list, watch, claim, renew, release, heartbeat through the public
// client), capacity 1, whose runner serves each claimed session with a
// simulated remote in this process instead of starting one.
type worker struct {
	sim      *sim
	t        *timed
	c        *fleet.Consumer
	acceptor string
	idle     func() // closes the worker's idle connections
}

func newWorker(s *sim, i int, token string, open func()) (*worker, error) {
	hc := s.tr.own()
	base := hc.Transport
	t := &timed{base: base, sim: s, open: open}
	hc.Transport = t
	// Workers are spread round robin over the servers, as a balancer
	// would spread their connections.
	c, err := client.New(s.server(i), token, client.WithHTTPClient(hc), client.WithUserAgent("outpost-fleetsim"))
	if err != nil {
		return nil, err
	}
	acceptor := fmt.Sprintf("fleetsim-%s-%05d", s.run, i)
	caps := &api.Capabilities{OS: "linux", Arch: runtime.GOARCH, CPUs: 1, Hostname: acceptor, Tools: []string{api.ToolExec}}
	id := &fleet.Identity{AcceptorID: acceptor, Kind: api.WorkerKindWorker, Instance: fmt.Sprintf("%016x", rand.Uint64())}
	info := api.WorkerInfo{Kind: api.WorkerKindWorker, Hostname: acceptor, Version: "fleetsim", Capabilities: caps, MaxSessions: 1, Instance: id.Instance}
	w := &worker{sim: s, t: t, acceptor: acceptor, idle: base.(*http.Transport).CloseIdleConnections}
	w.c = &fleet.Consumer{
		Client:   c,
		Outpost:  s.outpost,
		Identity: id,
		Capacity: 1,
		Machine:  &api.ClaimMachine{Capabilities: caps},
		Runner:   w,
		// As `outpost worker start` watches: the entries it holds.
		WatchHeld: true,
		Presence:  fleet.NewPresence(c, s.outpost.Metadata.OutpostID, acceptor, info, s.opts.Heartbeat, nil, nil),
	}
	return w, nil
}

// Run serves a claimed session with a simulated remote until the gateway
// ends it, the claim is lost, or the simulator stops its remotes.
func (w *worker) Run(ctx context.Context, s *fleet.Session) fleet.Outcome {
	gw := s.Claim.Status.GatewayURL
	if gw == "" {
		return fleet.NotStarted(fmt.Errorf("the claim of session %s names no gateway", s.ID)).Postponed()
	}
	w.sim.claimed(s.ID, w.t.takeWon())
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(w.sim.remotesCtx, cancel)
	defer stop()
	r := newRemote(w.sim, s.ID, gw, s.Claim.Status.ConnectToken)
	err := r.serve(rctx)
	if r.welcomedOnce() {
		w.sim.remoteEnded(s.ID)
	}
	if err != nil {
		return fleet.Stopped(err)
	}
	return fleet.Exited(nil)
}

// run runs the consumer until ctx ends.
func (w *worker) run(ctx context.Context) {
	// Spread the workers' start over a moment so their first heartbeats
	// and lists do not arrive as one burst.
	if err := waitCtx(ctx, rand.N(50*time.Millisecond)); err != nil {
		return
	}
	defer w.idle()
	if err := w.c.Run(ctx); err != nil && ctx.Err() == nil {
		w.sim.errs.add("worker", fmt.Errorf("%s: %w", w.acceptor, err))
	}
}
