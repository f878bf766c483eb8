package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/backoff"
	outpost "github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/internal/machine"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

const (
	// resyncEvery is how often a consumer lists its whole queue even while
	// the watch is healthy, and checkEvery how often it reads each held
	// session's entry in case the watch missed its end.
	resyncEvery = 30 * time.Second
	checkEvery  = 10 * time.Second
	// retryAfter is how long a session whose pod could not be made is left
	// to other claimers.
	retryAfter = 30 * time.Second
)

// recoverBackoff paces the listing of a pool's leftovers while the
// Kubernetes API fails it: adoption needs it.
var recoverBackoff = backoff.Policy{Base: time.Second, Max: 30 * time.Second, Jitter: 0.2}

// poolConsumer is the fleet consumer of one pool, running in a goroutine
// of its own until stopped. It is replaced (stopped, then started anew)
// when what it was started from changes (fingerprint).
type poolConsumer struct {
	key         types.NamespacedName
	uid         types.UID
	fingerprint string
	acceptor    string
	outpost     api.Outpost
	api         *outpost.Client
	runner      *Runner
	consumer    *fleet.Consumer
	log         *slog.Logger
	// poke asks for a reconcile of the pool (its status changed).
	poke func()

	pool   atomic.Pointer[v1alpha1.OutpostPool] // the latest spec seen
	held   atomic.Int32
	cursor atomic.Pointer[string]
	// suspect is set when listing or watching the queue fails, so the next
	// reconcile looks the outpost up again (the token may be revoked).
	suspect atomic.Bool
	// refusals remembers the restricted sessions refused and why, so that
	// each is said once; lastRefusal is the last one, for the status.
	refusals    refusals
	lastRefusal atomic.Pointer[string]
	recorder    events.EventRecorder

	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned; err and exited are then set
	err    error
	exited time.Time
}

// running reports whether the consumer's Run has not returned.
func (pc *poolConsumer) running() bool {
	select {
	case <-pc.done:
		return false
	default:
		return true
	}
}

// stop stops the consumer and waits for it: its runners see Stopping and
// leave their pods and claims to the next consumer.
func (pc *poolConsumer) stop() {
	pc.cancel()
	<-pc.done
}

// consumerSpec is what a pool's consumer is started from.
type consumerSpec struct {
	pool        *v1alpha1.OutpostPool
	api         *outpost.Client
	outpost     api.Outpost
	acceptor    string
	capacity    int
	drain       bool // maxConcurrentSessions is 0: claim nothing new
	fingerprint string
}

// start starts the consumer of spec in the background, under ctx.
func (r *poolReconciler) startConsumer(ctx context.Context, cs consumerSpec) (*poolConsumer, error) {
	id, err := fleet.NewIdentity(cs.acceptor, api.WorkerKindOrchestrator)
	if err != nil {
		return nil, err
	}
	key := types.NamespacedName{Namespace: cs.pool.Namespace, Name: cs.pool.Name}
	log := r.log.With("pool", key.String())
	pc := &poolConsumer{key: key, uid: cs.pool.UID, fingerprint: cs.fingerprint, acceptor: cs.acceptor,
		outpost: cs.outpost, api: cs.api, log: log, done: make(chan struct{}), poke: func() { r.poke(key) },
		recorder: r.recorder, refusals: refusals{m: map[string]string{}}}
	pc.pool.Store(cs.pool.DeepCopy())
	name := key.String()
	pc.runner = NewRunner(RunnerConfig{
		Kube: r.kube, Pool: pc.pool.Load, API: cs.api, AcceptorID: cs.acceptor, OutpostID: cs.outpost.Metadata.OutpostID,
		WorkerImage: r.workerImage, StartTimeout: r.startTimeout, Metrics: r.metrics.runner(name), Logger: log,
		Egress: r.egress,
	})
	host, _ := os.Hostname()
	info := api.WorkerInfo{Kind: api.WorkerKindOrchestrator, Hostname: host, Version: machine.Version,
		MaxSessions: cs.capacity, PID: os.Getpid()}
	if cs.drain {
		info.MaxSessions = 0
	}
	c := &fleet.Consumer{
		Client:   cs.api,
		Outpost:  cs.outpost,
		Identity: id,
		Capacity: cs.capacity,
		// Each session gets a pod made to its requirements
		// (applyRequirements); the scheduler finds it a node.
		Provisions:     true,
		Drain:          cs.drain,
		Runner:         claimCounter{Runner: pc.runner, claimed: r.metrics.SessionsClaimed.WithLabelValues(name)},
		Presence:       fleet.NewPresence(cs.api, cs.outpost.Metadata.OutpostID, cs.acceptor, info, 0, nil, log),
		ResyncInterval: resyncEvery,
		CheckInterval:  checkEvery,
		RetryAfter:     retryAfter,
		// Each cursor goes to the status with the next reconcile; the
		// first asks for one.
		Cursor: func(cursor string) {
			if pc.cursor.Swap(&cursor) == nil {
				pc.poke()
			}
		},
		Observer: poolObserver{pc: pc, conflicts: r.metrics.ClaimConflicts.WithLabelValues(name)},
		// Decided per entry, with the pool's latest spec: NetworkRefusal
		// refuses what the pool cannot enforce, and says so.
		NetworkEnforcement: func() error { return nil },
		NetworkRefusal:     pc.networkRefusal,
		Logger:             log,
	}
	c.Recover = func(ctx context.Context) []api.QueueEntry { return pc.recover(ctx, c) }
	pc.consumer = c
	cctx, cancel := context.WithCancel(ctx)
	pc.cancel = cancel
	go func() {
		defer close(pc.done)
		defer cancel()
		log.Info("serving the pool's queue", "outpost", cs.outpost.Spec.Name, "outpost_id", cs.outpost.Metadata.OutpostID,
			"acceptor_id", cs.acceptor, "max_concurrent_sessions", cs.capacity)
		pc.err = c.Run(cctx)
		if pc.err != nil {
			log.Error("the pool's consumer stopped", "err", pc.err)
		} else {
			log.Info("the pool's consumer stopped")
		}
		pc.exited = time.Now()
		pc.held.Store(0)
		pc.poke()
	}()
	return pc, nil
}

// recover deals with what an earlier consumer of the pool left: sessions
// whose claim is still the pool's are adopted (their claims renewed and
// handed back to the runner, which watches their pods), whatever else of
// the pool's is deleted (a suspended session's volume is kept), and claims
// of the pool's without pods are released. All are adopted, even past the
// pool's capacity: a lowered maxConcurrentSessions ends no running session.
func (pc *poolConsumer) recover(ctx context.Context, c *fleet.Consumer) []api.QueueEntry {
	var leftovers []Leftover
	for attempt := 1; ; attempt++ {
		var err error
		if leftovers, err = pc.runner.Leftovers(ctx); err == nil {
			break
		}
		pc.log.Warn("cannot list the pool's pods; retrying before claiming anything", "err", err)
		if backoff.Sleep(ctx, nil, recoverBackoff.Delay(attempt)) != nil {
			return nil
		}
	}
	seen := map[string]bool{}
	var adopt []api.QueueEntry
	for _, l := range leftovers {
		id := l.SessionID
		if seen[id] {
			continue
		}
		seen[id] = true
		log := pc.log.With("session", id)
		var e *api.QueueEntry
		err := retryTransient(ctx, log, "read a leftover session from the queue", func() (err error) {
			e, err = c.Client.Queue.Get(ctx, id)
			return err
		})
		release := false
		switch {
		case err != nil && !outpost.IsNotFound(err):
			// Nothing is known of it: leave its objects to the next
			// reconcile's consumer rather than delete a live session's pod.
			log.Warn("cannot read a leftover session from the queue; leaving its pod", "err", err)
			continue
		case err == nil && e.Status.Phase == api.PhaseClaimed && e.Status.AcceptorID != nil && *e.Status.AcceptorID == pc.acceptor &&
			e.Status.SessionStatus != api.QueueSessionTerminated:
			// A server that fails for a while (not one that refuses the
			// claim) is waited for: giving up would end a live session.
			var claim *api.QueueEntry
			err := retryTransient(ctx, log, "renew the claim of a leftover session", func() (err error) {
				claim, err = c.Client.Queue.Claim(ctx, id, pc.acceptor)
				return err
			})
			if err == nil {
				log.Info("adopting the session's pod", "pod", l.Pod, "volume", l.Volume)
				adopt = append(adopt, *claim)
				continue
			}
			if ctx.Err() != nil {
				continue // stopping: everything stays for the next consumer
			}
			log.Info("cannot renew the claim of a leftover session; removing its pod", "err", err)
			release = true
		}
		keepVolume := l.Volume && (l.Suspended || err == nil && e.Status.SessionStatus == api.QueueSessionSuspended)
		log.Info("removing a leftover session's objects", "keep_volume", keepVolume)
		if err := pc.runner.Remove(context.WithoutCancel(ctx), id, keepVolume); err != nil {
			log.Warn("cannot remove a leftover session's objects", "err", err)
		}
		if release {
			// After its pod is deleted: the session is not to be served
			// twice.
			c.Release(ctx, id, "the operator restarted and could not renew the claim; its pod was removed")
		}
	}
	// Claims of the pool's that have no pod (a stop between a claim and
	// its pod) go back to the queue at once.
	f := outpost.QueueFilter{Outpost: pc.outpost.Metadata.OutpostID, Phase: api.PhaseClaimed, AcceptorID: pc.acceptor, First: 200}
	err := eachEntry(ctx, c.Client, f, func(e api.QueueEntry) {
		if !seen[e.Metadata.SessionID] {
			c.Release(ctx, e.Metadata.SessionID, "")
		}
	})
	if err != nil {
		pc.log.Warn("cannot list the pool's claims; those without a pod lapse at their deadline", "err", err)
	}
	return adopt
}

// retryTransient calls fn until it succeeds, fails otherwise than
// transiently (the server unreachable, or a 5xx answer), or ctx ends.
func retryTransient(ctx context.Context, log *slog.Logger, what string, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		var ae *outpost.Error
		if err == nil || !outpost.IsTransport(err) && !(errors.As(err, &ae) && ae.StatusCode >= 500) || ctx.Err() != nil {
			return err
		}
		log.Warn("cannot "+what+"; retrying before claiming anything", "err", err)
		if backoff.Sleep(ctx, nil, recoverBackoff.Delay(attempt)) != nil {
			return err
		}
	}
}

// eachEntry calls fn with every entry of the queue matching f, page by
// page.
func eachEntry(ctx context.Context, c *outpost.Client, f outpost.QueueFilter, fn func(api.QueueEntry)) error {
	for {
		page, err := c.Queue.List(ctx, f)
		if err != nil {
			return fmt.Errorf("list queue: %w", err)
		}
		for _, e := range page.Items {
			fn(e)
		}
		if !page.HasNextPage || page.Cursor == "" || page.Cursor == f.Cursor {
			return nil
		}
		f.Cursor = page.Cursor
	}
}

// claimCounter counts the sessions a pool claims.
type claimCounter struct {
	*Runner
	claimed prometheus.Counter
}

func (r claimCounter) Run(ctx context.Context, s *fleet.Session) fleet.Outcome {
	if !s.Adopted {
		r.claimed.Inc()
	}
	return r.Runner.Run(ctx, s)
}

// poolObserver turns what a pool's consumer sees into metrics and status.
type poolObserver struct {
	pc        *poolConsumer
	conflicts prometheus.Counter
}

func (o poolObserver) Conflict() { o.conflicts.Inc() }

func (o poolObserver) Failure(op string) {
	if (op == "list" || op == "watch") && !o.pc.suspect.Swap(true) {
		o.pc.poke()
	}
}

func (o poolObserver) Held(n int) {
	if o.pc.held.Swap(int32(n)) != int32(n) {
		o.pc.poke()
	}
}

// consumers are the running pool consumers, keyed by pool. Their context
// is the leader's: Start runs while this process leads, and stops every
// consumer when it ends.
type consumers struct {
	mu      sync.Mutex // guards the following
	m       map[types.NamespacedName]*poolConsumer
	ctx     context.Context // nil until Start
	stopped bool
	ready   chan struct{} // closed by Start
}

func newConsumers() *consumers {
	return &consumers{m: map[types.NamespacedName]*poolConsumer{}, ready: make(chan struct{})}
}

// Start runs until ctx ends, then stops every consumer (their pods and
// claims stay for the next leader) and waits for them.
func (cs *consumers) Start(ctx context.Context) error {
	cs.mu.Lock()
	cs.ctx = ctx
	close(cs.ready)
	cs.mu.Unlock()
	<-ctx.Done()
	cs.mu.Lock()
	cs.stopped = true
	all := cs.m
	cs.m = map[types.NamespacedName]*poolConsumer{}
	cs.mu.Unlock()
	var wg sync.WaitGroup
	for _, pc := range all {
		wg.Go(pc.stop)
	}
	wg.Wait()
	return nil
}

// NeedLeaderElection: consumers run on the leader only.
func (cs *consumers) NeedLeaderElection() bool { return true }

// base returns the context consumers run under, waiting for Start; false
// once stopping.
func (cs *consumers) base(ctx context.Context) (context.Context, bool) {
	select {
	case <-cs.ready:
	case <-ctx.Done():
		return nil, false
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.ctx, !cs.stopped
}

func (cs *consumers) get(key types.NamespacedName) *poolConsumer {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.m[key]
}

// put records pc as key's consumer; false (and pc stopped) when the
// operator is stopping.
func (cs *consumers) put(key types.NamespacedName, pc *poolConsumer) bool {
	cs.mu.Lock()
	stopped := cs.stopped
	if !stopped {
		cs.m[key] = pc
	}
	cs.mu.Unlock()
	if stopped {
		pc.stop()
	}
	return !stopped
}

// remove stops key's consumer, if any, and returns it.
func (cs *consumers) remove(key types.NamespacedName) *poolConsumer {
	cs.mu.Lock()
	pc := cs.m[key]
	delete(cs.m, key)
	cs.mu.Unlock()
	if pc != nil {
		pc.stop()
	}
	return pc
}

// networkRefusal is the consumer's NetworkRefusal: why the pool does not
// serve e's restricted session, said once per session and reason as a
// Warning Event on the pool and a log line, and kept for its status.
func (pc *poolConsumer) networkRefusal(e *api.QueueEntry) error {
	pool := pc.pool.Load()
	err := SessionNetworkRefusal(pool, e, pc.runner.cfg.Egress != nil)
	if err == nil {
		return nil
	}
	id := e.Metadata.SessionID
	if !pc.refusals.first(id, err.Error()) {
		return err
	}
	msg := fmt.Sprintf("session %s stays pending for another claimer: %v", id, err)
	pc.log.Warn("not claiming a restricted session", "session", id, "err", err)
	if pc.recorder != nil {
		pc.recorder.Eventf(pool, nil, corev1.EventTypeWarning, ReasonSessionRefused, "Claim", "%s", clip(msg, 1000))
	}
	pc.lastRefusal.Store(&msg)
	pc.poke()
	return err
}

// maxRefusals bounds the sessions refusals remembers; past it, it starts
// over (a session may then be said again).
const maxRefusals = 4096

// refusals are the sessions refused and why.
type refusals struct {
	mu sync.Mutex // guards m
	m  map[string]string
}

// reset forgets every refusal.
func (r *refusals) reset() {
	r.mu.Lock()
	clear(r.m)
	r.mu.Unlock()
}

// first records that id is refused for why, and reports whether that is
// new.
func (r *refusals) first(id, why string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[id] == why {
		return false
	}
	if len(r.m) >= maxRefusals {
		clear(r.m)
	}
	r.m[id] = why
	return true
}
