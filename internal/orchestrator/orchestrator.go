// Package orchestrator serves an outpost's sessions by provisioning a
// machine per session: it lists and watches the outpost's queue, claims
// pending sessions up to a concurrency limit, provisions a machine for each
// through a Backend, starts `outpost remote serve` in it under the spawn
// contract, renews the claims, and tears the machine down and releases the
// claim when the session or its remote ends.
//
// Machines are named from session ids and their workspaces live in the
// state dir, so a restarted orchestrator adopts or removes what a crashed
// one left behind.
package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/machine"
	"github.com/outpost-sh/outpost/internal/worker"
)

const (
	// DefaultPollInterval is how often the whole queue is listed again, to
	// catch anything the watch missed and to claim a backlog.
	DefaultPollInterval = 10 * time.Second
	// DefaultRetryAfter is how long a session whose provisioning failed is
	// left to other claimers before this orchestrator tries it again.
	DefaultRetryAfter = 30 * time.Second

	releaseTimeout = 15 * time.Second
	confirmWindow  = 5 * time.Second
	checkEvery     = 3 * time.Second
	cursorFile     = "cursor"
	machinesDir    = "machines"
)

// Options configure an orchestrator.
type Options struct {
	// Client uses a token of the outposts.machine scope; it never reaches a
	// machine.
	Client        *client.Client
	Outpost       string
	StateDir      string
	Backend       Backend
	MaxConcurrent int
	// AcceptorID empty means the id saved in StateDir/acceptor-id.
	AcceptorID   string
	PollInterval time.Duration
	RetryAfter   time.Duration
	// RemoteCommand serves a session; empty means [this executable,
	// "remote", "serve"].
	RemoteCommand []string
	// CAFile is the PEM file of extra CA certificates the client trusts;
	// remotes get it as OUTPOST_CA_FILE (the bwrap and docker backends
	// mount it read-only into the machine). Empty means the orchestrator's
	// own OUTPOST_CA_FILE, if any, is passed on.
	CAFile  string
	Logger  *slog.Logger
	Metrics *Metrics
}

type orchestrator struct {
	opts     Options
	c        *client.Client
	log      *slog.Logger
	m        *Metrics
	outpost  api.Outpost
	platform string
	acceptor string
	sem      chan struct{}
	wake     chan struct{}
	ctx      context.Context
	schedMu  sync.Mutex // one schedule at a time: a second claim by the same acceptor would succeed

	mu       sync.Mutex
	entries  map[string]api.QueueEntry // upserted by session id
	held     map[string]*session
	retryAt  map[string]time.Time
	sessions sync.WaitGroup
	presence *worker.Presence
}

// session is a claimed session this orchestrator serves.
type session struct {
	id    string
	ended chan struct{} // closed when the queue shows the session over
	once  sync.Once
}

func (s *session) end() { s.once.Do(func() { close(s.ended) }) }

// Run orchestrates until ctx ends, then tears every machine down and
// releases every claim it holds.
func Run(ctx context.Context, opts Options) error {
	o, err := newOrchestrator(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	o.ctx = ctx
	host, _ := os.Hostname()
	o.presence = worker.NewPresence(o.c, o.outpost.Metadata.OutpostID, o.acceptor, api.WorkerInfo{
		Kind: api.WorkerKindOrchestrator, Hostname: host, Version: machine.Version, MaxSessions: opts.MaxConcurrent}, 0, o.log)
	pctx, stopPresence := context.WithCancel(context.WithoutCancel(ctx))
	presenceDone := make(chan struct{})
	go func() {
		defer close(presenceDone)
		o.presence.Run(pctx)
	}()
	o.recover(ctx)
	go o.poll(ctx)
	o.watchLoop(ctx)
	o.sessions.Wait()
	stopPresence() // goodbye once every claim is released
	<-presenceDone
	return nil
}

func newOrchestrator(ctx context.Context, opts Options) (*orchestrator, error) {
	if opts.Client == nil || opts.Backend == nil || opts.Outpost == "" || opts.StateDir == "" {
		return nil, errors.New("orchestrator: Client, Backend, Outpost and StateDir are required")
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 1
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	var err error
	if opts.StateDir, err = filepath.Abs(opts.StateDir); err != nil {
		return nil, err
	}
	if opts.CAFile != "" {
		if opts.CAFile, err = filepath.Abs(opts.CAFile); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(opts.StateDir, machinesDir), 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	if len(opts.RemoteCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the outpost executable: %w", err)
		}
		opts.RemoteCommand = []string{exe, "remote", "serve"}
	}
	o := &orchestrator{opts: opts, c: opts.Client, log: opts.Logger, m: opts.Metrics,
		sem: make(chan struct{}, opts.MaxConcurrent), wake: make(chan struct{}, 1),
		entries: map[string]api.QueueEntry{}, held: map[string]*session{}, retryAt: map[string]time.Time{}}
	op, err := o.c.Outposts.Get(ctx, opts.Outpost)
	if err != nil {
		return nil, fmt.Errorf("look up outpost %q: %w", opts.Outpost, err)
	}
	o.outpost = *op
	o.platform = op.Spec.Platform
	if o.platform == "" {
		o.platform = api.PlatformLinux
	}
	if o.acceptor = opts.AcceptorID; o.acceptor == "" {
		if o.acceptor, err = worker.LoadAcceptorIDAs(opts.StateDir, "orchestrator"); err != nil {
			return nil, err
		}
	}
	o.log.Info("orchestrator ready", "outpost", op.Spec.Name, "outpost_id", op.Metadata.OutpostID,
		"backend", opts.Backend.Name(), "max_concurrent", opts.MaxConcurrent, "acceptor_id", o.acceptor, "state_dir", opts.StateDir)
	return o, nil
}

func (o *orchestrator) spec(id string, claim *api.QueueEntry) Spec {
	ws := filepath.Join(o.opts.StateDir, machinesDir, MachineName(id))
	s := Spec{SessionID: id, Name: MachineName(id), Workspace: ws, Platform: o.platform, Remote: o.opts.RemoteCommand, Acceptor: o.acceptor}
	if claim != nil {
		s.Env = worker.RemoteEnv(claim, filepath.Join(ws, "state"), worker.LookupWithCAFile(os.LookupEnv, o.opts.CAFile))
	} else {
		s.Env = []string{api.EnvSessionID.Name + "=" + id}
	}
	return s
}

// recover deals with what a previous run left: machines whose claim is
// still ours and which still run are adopted; every other leftover machine
// is torn down, and claims of ours without a machine are released.
func (o *orchestrator) recover(ctx context.Context) {
	dirs, _ := os.ReadDir(filepath.Join(o.opts.StateDir, machinesDir))
	var leftovers []string
	for _, d := range dirs {
		if id, ok := strings.CutPrefix(d.Name(), "outpost-"); ok && d.IsDir() {
			leftovers = append(leftovers, id)
		}
	}
	if l, ok := o.opts.Backend.(LeftoverLister); ok {
		ids, err := l.Leftovers(ctx, o.acceptor)
		if err != nil {
			o.log.Warn("cannot list leftover machines", "err", err)
		}
		leftovers = append(leftovers, ids...)
	}
	seen := map[string]bool{}
	for _, id := range leftovers {
		if seen[id] {
			continue
		}
		seen[id] = true
		log := o.log.With("session", id, "machine", MachineName(id))
		e, err := o.c.Queue.Get(ctx, id)
		ours := err == nil && e.Status.Phase == api.PhaseClaimed && e.Status.AcceptorID != nil && *e.Status.AcceptorID == o.acceptor &&
			e.Status.SessionStatus != api.QueueSessionTerminated
		if ours {
			claim, cerr := o.c.Queue.Claim(ctx, id, o.acceptor)
			if cerr == nil {
				s := o.spec(id, claim)
				if m, ok := o.opts.Backend.Adopt(ctx, s); ok {
					select {
					case o.sem <- struct{}{}:
						log.Info("adopted leftover machine")
						o.report(ctx, id, api.MachineStepStart, fmt.Sprintf("The orchestrator restarted and adopted machine %s, still running.", s.Name), nil)
						o.start(ctx, claim, m)
						continue
					default:
					}
				}
			}
		}
		log.Info("removing leftover machine")
		if err := o.opts.Backend.Teardown(context.WithoutCancel(ctx), o.spec(id, nil)); err != nil {
			log.Warn("teardown of leftover machine failed", "err", err)
			o.m.fail("teardown")
		}
		if ours {
			why := fmt.Sprintf("the orchestrator restarted and removed machine %s, whose remote had stopped", MachineName(id))
			o.report(ctx, id, api.MachineStepTeardown, why, nil)
			o.releaseWhy(ctx, id, why)
		}
	}
	// Claims of ours that have no machine (a crash between claim and
	// provisioning) go back to the queue at once.
	l, err := o.c.Queue.List(ctx, client.QueueFilter{Outpost: o.outpost.Metadata.OutpostID, Phase: api.PhaseClaimed, AcceptorID: o.acceptor, First: 200})
	if err == nil {
		for _, e := range l.Items {
			o.mu.Lock()
			_, held := o.held[e.Metadata.SessionID]
			o.mu.Unlock()
			if !held && !seen[e.Metadata.SessionID] {
				o.release(ctx, e.Metadata.SessionID)
			}
		}
	}
}

// watchLoop lists the queue, then watches it from the list's cursor, until
// ctx ends. Each event's cursor is saved in the state dir, and a broken
// watch reconnects from the last one so nothing is missed or replayed; the
// queue is listed again only when the server refuses that cursor (400, from
// servers older than the re-list below) or the watch keeps failing. A
// restart always lists first: a list is the queue's whole state, while a
// replay shows only entries that changed.
//
// A server given a cursor it did not issue (its database was reset, say)
// starts the stream with a re-list instead: every live entry as an upsert,
// without the tombstones of entries deleted meanwhile. Nothing more is
// needed here: an entry left over from before is replaced by the next poll
// (every PollInterval), claiming it meanwhile answers 404 (counted as a
// lost race), and each held session's own check ends it once its entry is
// gone.
func (o *orchestrator) watchLoop(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		cursor, err := o.list(ctx)
		if err != nil {
			o.log.Warn("cannot list the queue", "err", err)
			o.m.fail("list")
			_ = worker.Sleep(ctx, o.opts.PollInterval)
			continue
		}
		o.schedule(ctx)
		for ctx.Err() == nil {
			start, events := time.Now(), 0
			err = o.c.Queue.Watch(ctx, o.outpost.Metadata.OutpostID, cursor, func(ev api.WatchEvent) error {
				events++
				if ev.Cursor != "" {
					cursor = ev.Cursor
					o.saveCursor(cursor)
				}
				o.upsert(ev.Type, ev.Object)
				o.schedule(ctx)
				return nil
			})
			if ctx.Err() != nil {
				return
			}
			if err == nil && (events > 0 || time.Since(start) >= time.Second) {
				failures = 0 // the server ended a healthy stream: reconnect
				continue
			}
			failures++
			if err == nil {
				err = errors.New("the watch stream ended at once")
			}
			o.m.fail("watch")
			if client.IsBadRequest(err) || failures >= 3 {
				o.log.Warn("queue watch failed; listing again", "err", err, "failures", failures)
				break
			}
			o.log.Warn("queue watch failed; reconnecting from the saved cursor", "err", err, "failures", failures)
			_ = worker.Sleep(ctx, time.Duration(failures)*time.Second)
		}
		if ctx.Err() != nil {
			return
		}
		_ = worker.Sleep(ctx, min(time.Duration(failures)*time.Second, time.Minute))
	}
}

// poll lists the queue every PollInterval, so a backlog is claimed even
// when the watch is quiet, and checks each held session.
func (o *orchestrator) poll(ctx context.Context) {
	for worker.Sleep(ctx, o.opts.PollInterval) == nil {
		if _, err := o.list(ctx); err != nil && ctx.Err() == nil {
			o.log.Warn("cannot list the queue", "err", err)
		}
		o.schedule(ctx)
	}
}

// list replaces the known pending entries with the server's and returns
// the final cursor.
func (o *orchestrator) list(ctx context.Context) (string, error) {
	f := client.QueueFilter{Outpost: o.outpost.Metadata.OutpostID, Phase: api.PhasePending, First: 200}
	fresh := map[string]api.QueueEntry{}
	for {
		page, err := o.c.Queue.List(ctx, f)
		if err != nil {
			return "", err
		}
		for _, e := range page.Items {
			fresh[e.Metadata.SessionID] = e
		}
		if !page.HasNextPage || page.Cursor == "" || page.Cursor == f.Cursor {
			o.mu.Lock()
			o.entries = fresh
			o.mu.Unlock()
			o.saveCursor(page.Cursor)
			return page.Cursor, nil
		}
		f.Cursor = page.Cursor
	}
}

func (o *orchestrator) saveCursor(c string) {
	if c != "" {
		_ = writeFileAtomic(filepath.Join(o.opts.StateDir, cursorFile), []byte(c+"\n"))
	}
}

// upsert records a watch event; an event that shows a held session over
// ends it.
func (o *orchestrator) upsert(typ string, e api.QueueEntry) {
	id := e.Metadata.SessionID
	o.mu.Lock()
	defer o.mu.Unlock()
	if s := o.held[id]; s != nil && (typ == api.WatchDeleted || e.Status.SessionStatus == api.QueueSessionTerminated) {
		s.end()
	}
	if typ == api.WatchDeleted {
		delete(o.entries, id)
		return
	}
	o.entries[id] = e
}

// candidate reports whether e is a session this orchestrator may claim.
func (o *orchestrator) candidate(e api.QueueEntry, now time.Time) bool {
	switch {
	case e.Status.Phase != api.PhasePending,
		e.Status.SessionStatus == api.QueueSessionSuspended,
		e.Status.SessionStatus == api.QueueSessionTerminated,
		e.Metadata.OutpostID != "" && e.Metadata.OutpostID != o.outpost.Metadata.OutpostID,
		e.Spec.Platform != "" && e.Spec.Platform != o.platform,
		o.held[e.Metadata.SessionID] != nil,
		now.Before(o.retryAt[e.Metadata.SessionID]):
		return false
	}
	return true
}

// schedule claims pending sessions, oldest first, while there is capacity.
func (o *orchestrator) schedule(ctx context.Context) {
	o.schedMu.Lock()
	defer o.schedMu.Unlock()
	for ctx.Err() == nil {
		o.mu.Lock()
		now := time.Now()
		var cands []api.QueueEntry
		for _, e := range o.entries {
			if o.candidate(e, now) {
				cands = append(cands, e)
			}
		}
		o.mu.Unlock()
		if len(cands) == 0 {
			return
		}
		slices.SortFunc(cands, func(a, b api.QueueEntry) int {
			if a.Metadata.CreatedAt != b.Metadata.CreatedAt {
				return int(a.Metadata.CreatedAt - b.Metadata.CreatedAt)
			}
			return strings.Compare(a.Metadata.SessionID, b.Metadata.SessionID)
		})
		progressed := false
		for _, e := range cands {
			select {
			case o.sem <- struct{}{}:
			default:
				return // at capacity: a finishing session schedules again
			}
			id := e.Metadata.SessionID
			claim, err := o.claim(ctx, id)
			if err != nil {
				<-o.sem
				o.mu.Lock()
				if cur, ok := o.entries[id]; ok {
					cur.Status.Phase = api.PhaseClaimed // until an event says otherwise
					o.entries[id] = cur
				}
				o.mu.Unlock()
				if client.IsConflict(err) || client.IsNotFound(err) {
					o.m.ClaimConflicts.Inc()
					o.log.Debug("session taken by another claimer", "session", id)
				} else if ctx.Err() == nil {
					o.log.Warn("cannot claim session", "session", id, "err", err)
					o.m.fail("claim")
				}
				continue
			}
			progressed = true
			o.provisionAndStart(ctx, claim)
		}
		if !progressed {
			return
		}
	}
}

// claim claims id; a claim won after ctx ended is released at once.
func (o *orchestrator) claim(ctx context.Context, id string) (*api.QueueEntry, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	claim, err := o.c.Queue.Claim(cctx, id, o.acceptor)
	if err == nil && ctx.Err() != nil {
		o.release(ctx, id)
		return nil, ctx.Err()
	}
	return claim, err
}

// provisionAndStart registers the claim and, in the background, provisions
// the session's machine and supervises it. It holds a semaphore slot.
func (o *orchestrator) provisionAndStart(ctx context.Context, claim *api.QueueEntry) {
	id := claim.Metadata.SessionID
	s := o.register(id)
	o.sessions.Add(1)
	go func() {
		defer o.sessions.Done()
		defer o.finish(id)
		log := o.log.With("session", id, "machine", MachineName(id))
		log.Info("claimed session; provisioning", "kind", claim.Spec.Kind, "backend", o.opts.Backend.Name())
		spec := o.spec(id, claim)
		t0 := time.Now()
		o.report(ctx, id, api.MachineStepCreate, fmt.Sprintf("Creating machine %s (%s backend).", spec.Name, o.opts.Backend.Name()), nil)
		m, err := o.opts.Backend.Provision(ctx, spec)
		if err != nil {
			log.Warn("provisioning failed; releasing the claim", "err", err)
			o.m.fail("provision")
			o.mu.Lock()
			o.retryAt[id] = time.Now().Add(o.opts.RetryAfter)
			o.mu.Unlock()
			bg := context.WithoutCancel(ctx)
			why := fmt.Sprintf("provisioning machine %s (%s backend) failed: %v", spec.Name, o.opts.Backend.Name(), err)
			o.report(bg, id, api.MachineStepFailed, why, nil)
			if terr := o.opts.Backend.Teardown(bg, spec); terr != nil {
				log.Warn("teardown after failed provisioning", "err", terr)
			}
			o.releaseWhy(bg, id, why)
			return
		}
		took := time.Since(t0)
		o.m.ProvisionSeconds.Observe(took.Seconds())
		log.Info("machine provisioned; remote started", "took", took.Round(time.Millisecond))
		o.report(ctx, id, api.MachineStepStart, fmt.Sprintf("Machine %s is up and its remote started (%s).", spec.Name, took.Round(time.Millisecond)), nil)
		o.supervise(ctx, s, claim, spec, m, log)
	}()
}

// start supervises an adopted machine in the background; the caller holds
// a semaphore slot.
func (o *orchestrator) start(ctx context.Context, claim *api.QueueEntry, m Machine) {
	id := claim.Metadata.SessionID
	s := o.register(id)
	o.sessions.Add(1)
	go func() {
		defer o.sessions.Done()
		defer o.finish(id)
		o.supervise(ctx, s, claim, o.spec(id, claim), m, o.log.With("session", id, "machine", MachineName(id)))
	}()
}

func (o *orchestrator) register(id string) *session {
	s := &session{id: id, ended: make(chan struct{})}
	o.mu.Lock()
	o.held[id] = s
	o.presence.SetActive(len(o.held))
	o.mu.Unlock()
	o.m.ClaimsHeld.Inc()
	return s
}

func (o *orchestrator) finish(id string) {
	o.mu.Lock()
	delete(o.held, id)
	delete(o.entries, id)
	o.presence.SetActive(len(o.held))
	o.mu.Unlock()
	o.m.ClaimsHeld.Dec()
	<-o.sem
	select {
	case o.wake <- struct{}{}:
	default:
	}
	go o.scheduleAfterFinish()
}

// scheduleAfterFinish claims the backlog as capacity frees up.
func (o *orchestrator) scheduleAfterFinish() {
	select {
	case <-o.wake:
	default:
		return
	}
	o.schedule(o.ctx)
}
