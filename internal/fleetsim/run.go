package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// startConcurrency bounds the workers connecting at once: a server closes
// new connections while many are open and not yet authenticated.
const startConcurrency = 64

func (s *sim) simulate(ctx context.Context) (*Report, error) {
	o := s.opts
	rep := &Report{Config: configOf(o)}
	begin := time.Now()
	if err := s.setup(ctx); err != nil {
		return nil, err
	}
	rep.Outpost = s.outpostName
	tokens, err := s.tokens(ctx)
	if err != nil {
		return nil, err
	}
	m0 := s.scrape(ctx)

	// The fleet's contexts: workers live until the end; remotes can be
	// stopped on their own when the drain times out.
	wctx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorkers()
	rctx, stopRemotes := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRemotes()
	s.remotesCtx = rctx

	stopProgress := s.progress(begin)
	defer stopProgress()

	// Connect the workers, at most startConcurrency at a time, each
	// counted as started once its watch stream is open.
	var workers sync.WaitGroup
	var stops []func() // each worker's: stop it and wait until it returned
	sem := make(chan struct{}, startConcurrency)
	t0 := time.Now()
	for i := range o.Workers {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			stopWorkers()
			workers.Wait()
			return nil, ctx.Err()
		}
		var once sync.Once
		release := func() { once.Do(func() { <-sem }) }
		w, err := newWorker(s, i, tokens[i/o.WorkersPerToken], release)
		if err != nil {
			return nil, err
		}
		own, stop := context.WithCancel(wctx)
		done := make(chan struct{})
		stops = append(stops, func() { stop(); <-done })
		workers.Go(func() {
			defer close(done)
			// A worker that cannot open its watch at once frees its slot
			// after a while; it goes on retrying as a real worker does.
			t := time.AfterFunc(10*time.Second, release)
			defer t.Stop()
			w.run(own)
		})
	}
	for range startConcurrency {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
	}
	rep.Workers.ConnectS = time.Since(t0).Seconds()

	// Idle: every worker watching, nothing running.
	if o.Idle > 0 {
		_ = waitCtx(ctx, min(2*time.Second, o.Idle))
	}
	m1 := s.scrape(ctx)
	if o.Idle > 0 {
		_ = waitCtx(ctx, o.Idle)
	}
	m2 := s.scrape(ctx)
	sim0, simOK0 := processCPU()
	rep.Workers.Watching = s.watching.Load()

	// Busy: create sessions at the rate, drive and follow each.
	steady, stopSteady := context.WithTimeout(ctx, o.Duration)
	defer stopSteady()
	busyStart := time.Now()
	var agents sync.WaitGroup
	s.create(steady, &agents)
	<-steady.Done()
	m3 := s.scrape(ctx)
	sim1, simOK1 := processCPU()
	runningAtEnd := s.running.Load() - s.ended.Load()
	busy := time.Since(busyStart)
	agents.Wait()

	// Drain: end every session, wait for the remotes and the claims.
	drained := s.drain(ctx, stopRemotes)
	stopPaced(stops)
	stopWorkers()
	workers.Wait()
	stopProgress()

	if err := mixedReplicas(&m0, &m1, &m2, &m3); err != nil {
		s.errs.add("metrics", err)
	}
	s.fill(rep, busy)
	rep.Sessions.RunningAtEnd = runningAtEnd
	rep.Server = serverFigures(m0.total, m1.total, m2.total, m3.total, o.Workers, runningAtEnd, rep.Calls.Answered, o.Idle)
	rep.Server.Replicas = replicaFigures(m0, m2, m3)
	rep.Simulator = simulatorFigures(sim0, sim1, simOK0 && simOK1, rep.Calls.Answered)
	rep.WallS = time.Since(begin).Seconds()
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	if drained != nil {
		return rep, drained
	}
	return rep, nil
}

// setup finds or creates the outpost.
func (s *sim) setup(ctx context.Context) error {
	name := s.opts.Outpost
	if name == "" {
		name = "fleetsim-" + s.run
	}
	o, err := s.admin.Outposts.Get(ctx, name)
	if client.IsNotFound(err) {
		o, err = s.admin.Outposts.Create(ctx, api.CreateOutpostRequest{Name: name, Platform: api.PlatformLinux})
		if err == nil {
			s.mu.Lock()
			s.createdOutpost = true
			s.mu.Unlock()
		}
	}
	if err != nil {
		return fmt.Errorf("outpost %s: %w", name, trustHint(err))
	}
	s.outpost = *o
	s.outpostName = name
	return nil
}

// tokens creates the machine tokens of the workers, one per
// WorkersPerToken workers.
func (s *sim) tokens(ctx context.Context) ([]string, error) {
	n := (s.opts.Workers + s.opts.WorkersPerToken - 1) / s.opts.WorkersPerToken
	out := make([]string, n)
	for i := range out {
		t, err := s.admin.Tokens.Create(ctx, api.CreateTokenRequest{
			Name: fmt.Sprintf("fleetsim-%s-%d", s.run, i), Scopes: []string{api.ScopeMachine}, Outpost: s.outpostName,
		})
		if err != nil {
			return nil, fmt.Errorf("create a machine token for the simulated workers: %w", err)
		}
		s.mu.Lock()
		s.tokenIDs = append(s.tokenIDs, t.ID)
		s.mu.Unlock()
		out[i] = t.Secret
	}
	return out, nil
}

// create creates the sessions at the rate until all are created or ctx
// ends; each gets an agent and its followers, which agents waits for.
func (s *sim) create(ctx context.Context, agents *sync.WaitGroup) {
	o := s.opts
	every := time.Duration(float64(time.Second) / o.CreateRate)
	next := time.Now()
	sem := make(chan struct{}, 32)
	var creates sync.WaitGroup
	defer creates.Wait()
	for i := range o.Sessions {
		if err := waitCtx(ctx, time.Until(next)); err != nil {
			return
		}
		next = next.Add(every)
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		creates.Go(func() {
			defer func() { <-sem }()
			s.createOne(ctx, i, agents)
		})
	}
}

func (s *sim) createOne(ctx context.Context, i int, agents *sync.WaitGroup) {
	start := time.Now()
	sess, err := s.nextAdmin().Sessions.Create(ctx, api.CreateSessionRequest{
		Outpost: s.outpostName, Title: fmt.Sprintf("fleetsim %s session %d", s.run, i),
		Agent: api.Agent{Kind: api.AgentExternal},
	})
	if err != nil {
		if ctx.Err() == nil {
			s.errs.add("create", err)
		}
		return
	}
	now := time.Now()
	s.lat.create.add(now.Sub(start))
	s.created.Add(1)
	ss, early := s.registerCreated(sess.Metadata.SessionID, start, now)
	if early {
		// Its remote was welcomed before this answer came.
		s.lat.connect.add(0)
		s.started()
	}
	agents.Go(func() { s.agent(ctx, ss, i) })
	for f := i; f < s.opts.Followers; f += s.opts.Sessions {
		agents.Go(func() { s.follow(ctx, ss) })
	}
}

// agent calls a tool of the session at the rate once its remote is
// connected, one call at a time, until ctx ends.
func (s *sim) agent(ctx context.Context, ss *session, i int) {
	select {
	case <-ss.welcomed:
	case <-ctx.Done():
		return
	}
	// Each agent calls through one server, as an agent behind a balancer
	// keeps its connection.
	admin := s.nextAdmin()
	every := time.Duration(float64(time.Second) / s.opts.CallRate)
	next := time.Now()
	for k := 0; ; k++ {
		if waitCtx(ctx, time.Until(next)) != nil {
			return
		}
		next = next.Add(every)
		if time.Until(next) < 0 {
			next = time.Now()
		}
		callID := fmt.Sprintf("%s-%d-%d", s.run, i, k)
		s.mu.Lock()
		s.calls[callID] = false
		s.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		start := time.Now()
		allRunning := s.allRunning()
		res, err := admin.Sessions.CallTool(cctx, ss.id, api.ToolExec, api.ExecArgs{Argv: []string{callProgram, callID}})
		d := time.Since(start)
		cancel()
		switch {
		case err != nil:
			s.failed.Add(1)
			s.errs.add("call", err)
		case !res.OK:
			s.failed.Add(1)
			s.errs.add("call", errors.New(res.Error))
		default:
			s.answered.Add(1)
			s.lat.call.add(d)
			if allRunning && s.allRunning() {
				// Sent and answered inside the window.
				s.lat.callAllRunning.add(d)
			}
			s.mu.Lock()
			s.calls[callID] = true
			s.mu.Unlock()
		}
	}
}

// follow follows the session's transcript and measures, for each result,
// the time from its remote sending it to the follower seeing it.
func (s *sim) follow(ctx context.Context, ss *session) {
	seen := map[int64]bool{}
	err := s.nextAdmin().Sessions.Follow(ctx, ss.id, 0, func(ev api.Event) error {
		if ev.Type != api.EventResult || ev.CallSeq <= 0 || seen[ev.CallSeq] {
			return nil
		}
		seen[ev.CallSeq] = true
		if at, ok := s.sentAt(ss.id, ev.CallSeq); ok {
			s.lat.lag.add(time.Since(at))
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		s.errs.add("follow", err)
	}
}

// drain ends every session and waits until their remotes ended and the
// workers hold no claim, at most Options.Drain; then it stops the remotes
// left.
func (s *sim) drain(ctx context.Context, stopRemotes func()) error {
	s.mu.Lock()
	ids := make([]string, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	// Cancelled (Ctrl-C): the sessions are still ended, within a shorter
	// bound, so that none is left running on the server.
	bound := s.opts.Drain
	if ctx.Err() != nil {
		bound = min(bound, cleanupTimeout)
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := s.admin.Sessions.Terminate(dctx, id, "the fleet simulation ended"); err != nil && !client.IsConflict(err) {
				s.errs.add("terminate", err)
			}
		})
	}
	wg.Wait()
	for s.ended.Load() < s.running.Load() {
		if waitCtx(dctx, 50*time.Millisecond+rand.N(10*time.Millisecond)) != nil {
			stopRemotes()
			return fmt.Errorf("%d remotes still connected %s after the end: %w", s.running.Load()-s.ended.Load(), bound, dctx.Err())
		}
	}
	return nil
}

// fill writes the counts and latencies into rep.
func (s *sim) fill(rep *Report, busy time.Duration) {
	rep.DurationS = busy.Seconds()
	rep.Workers.Requested = s.opts.Workers
	rep.Workers.Heartbeats = s.heartbeats.Load()
	rep.Workers.ClaimAttempts = s.claimAttempts.Load()
	rep.Workers.Claims = s.claims.Load()
	rep.Workers.Conflicts = s.conflicts.Load()
	rep.Sessions.Requested = s.opts.Sessions
	rep.Sessions.Created = s.created.Load()
	rep.Sessions.Started = s.running.Load()
	rep.Sessions.Ended = s.ended.Load()
	rep.Remotes.Connects = s.connects.Load()
	rep.Remotes.Reconnects = s.reconnects.Load()
	rep.Remotes.OutputBytes = s.outputBytes.Load()
	rep.Remotes.ResentByServer = s.resent.Load()

	s.mu.Lock()
	c := &rep.Calls
	c.Answered = s.answered.Load()
	c.Failed = s.failed.Load()
	c.Issued = int64(len(s.calls))
	c.WithoutID = s.noID
	for id, n := range s.byCall {
		c.Executions += int64(n)
		c.Executed++
		if n > 1 {
			c.Duplicated++
		}
		if answered, ok := s.calls[id]; !ok || !answered {
			c.ExecutedUnanswered++
		}
	}
	for id, answered := range s.calls {
		if answered && s.byCall[id] == 0 {
			c.Lost++
		}
	}
	s.mu.Unlock()

	rep.Latency = Latencies{
		Claim: s.lat.claim.dist(), Dispatch: s.lat.dispatch.dist(), Connect: s.lat.connect.dist(),
		ToolCall: s.lat.call.dist(), ToolCallAllRunning: s.lat.callAllRunning.dist(), FollowerLag: s.lat.lag.dist(), Heartbeat: s.lat.heartbeat.dist(), Create: s.lat.create.dist(),
	}
	if sec := busy.Seconds(); sec > 0 {
		rep.Throughput.CallsPerS = float64(c.Answered) / sec
		rep.Throughput.OutputBytesPerS = float64(rep.Remotes.OutputBytes) / sec
		rep.Throughput.SessionsPerS = float64(rep.Sessions.Created) / sec
	}
	rep.Errors.Total = s.errs.total.Load()
	rep.Errors.ByKind, rep.Errors.First = s.errs.snapshot()
}

// progress prints a line every ProgressEvery until the returned function
// is called.
func (s *sim) progress(begin time.Time) func() {
	if s.opts.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(s.opts.ProgressEvery)
		defer t.Stop()
		calls := 0 // the tool call latencies printed so far
		for {
			select {
			case <-done:
				return
			case <-t.C:
				var d Dist
				d, calls = s.lat.call.since(calls)
				interval := ""
				if d.N > 0 {
					// The interval's own tail: the run's percentiles
					// at the end mix the ramp with the full rate.
					interval = fmt.Sprintf(", tool call p50 %.1f p99 %.1f ms", d.P50, d.P99)
				}
				fmt.Fprintf(s.opts.Progress, "fleetsim %4.0fs: %d/%d workers watching, %d sessions created, %d running, %d calls answered (%d failed)%s, %d errors\n",
					time.Since(begin).Seconds(), s.watching.Load(), s.opts.Workers, s.created.Load(), s.running.Load()-s.ended.Load(),
					s.answered.Load(), s.failed.Load(), interval, s.errs.total.Load())
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// metricsURLs are where the server's metrics are read.
func (s *sim) metricsURLs() []string {
	if len(s.opts.MetricsURLs) > 0 {
		return s.opts.MetricsURLs
	}
	out := make([]string, len(s.opts.Servers))
	for i, u := range s.opts.Servers {
		out[i] = u + "/metrics"
	}
	return out
}

// stopPaced stops the workers startConcurrency at a time: each says
// goodbye on stopping, and thousands of requests at once would be
// refused by a server's bound on new connections.
func stopPaced(stops []func()) {
	sem := make(chan struct{}, startConcurrency)
	var wg sync.WaitGroup
	for _, stop := range stops {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			stop()
		})
	}
	wg.Wait()
}
