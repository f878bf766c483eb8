// Package fleet is the one consumer of the fleet API: it lists and watches
// an outpost's queue, claims pending sessions up to a capacity, keeps each
// claim (renewing it before its deadline), hands each claimed session to a
// Runner that gives it a machine, and when the runner returns confirms the
// session's end and releases the claim, with a reason when the session is
// not over. It also owns the consumer's identity: the acceptor id, the lock
// on the data dir that keeps it, and the presence (heartbeat) that stops a
// second live process under the same id.
//
// The worker is a Consumer of capacity 1 whose Runner starts a local
// remote; the orchestrator one of capacity N whose Runner provisions a
// machine through a backend; a Kubernetes operator would be one of
// capacity N whose Runner creates pods.
package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/backoff"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/dist"
)

// DefaultPollInterval is how often the queue is listed while watching it
// fails, when Consumer.PollInterval is zero.
const DefaultPollInterval = 5 * time.Second

const (
	// releaseTimeout bounds the release of a claim, which runs even after
	// the consumer's context ended.
	releaseTimeout = 15 * time.Second
	// confirmWindow is how long the queue's session status may lag a
	// remote's exit; confirmEvery is how often it is read meanwhile.
	confirmWindow = 5 * time.Second
	confirmEvery  = 500 * time.Millisecond
	// minRenewWait and unknownDeadlineWait bound the wait between renewals.
	minRenewWait        = time.Second
	unknownDeadlineWait = time.Minute
	// maxReleaseReason is what the server accepts as a release reason.
	maxReleaseReason = 1000
	// maxWatchFailures is how many watches in a row may fail before the
	// queue is listed again rather than watched from the last cursor.
	maxWatchFailures = 3
	// listPage is the page size of queue lists.
	listPage = 200
)

var (
	// watchBackoff paces watch retries after failures; the queue is polled
	// every PollInterval meanwhile.
	watchBackoff = backoff.Policy{Base: time.Second, Max: time.Minute, Jitter: 0.2}
	// claimBackoff paces claims retried after an error that is not a lost
	// race.
	claimBackoff = backoff.Policy{Base: time.Second, Max: 30 * time.Second, Jitter: 0.2}
	// capacityBackoff paces claims while the outpost is at its
	// max_running (api.CodeOutpostAtCapacity); a claim released or a
	// session ended on the watch ends the wait sooner.
	capacityBackoff = backoff.Policy{Base: 500 * time.Millisecond, Max: 15 * time.Second, Jitter: 0.2}
)

// ErrClaimLost is the cause (context.Cause) of a runner's context when the
// server says the claim is no longer the consumer's.
var ErrClaimLost = errors.New("the claim was lost")

// Runner gives claimed sessions their machines.
type Runner interface {
	// Run starts the session's machine and returns when it is done. ctx
	// ends when the claim is lost (cause ErrClaimLost): the machine must
	// stop at once, its session is someone else's. s.Stopping is closed
	// when the consumer shuts down, s.Ended when the queue shows the
	// session over; what the machine gets then is the runner's choice.
	// The consumer keeps the claim meanwhile and, once Run returns,
	// confirms the session's end and releases the claim.
	Run(ctx context.Context, s *Session) Outcome
}

// Releaser is implemented by a Runner that keeps something of a session
// on its machine between runs (a worker's state dir). Once Run returned
// and the consumer released the claim (or left it), Released tells it
// whether the session may come back to this consumer: resumable when it
// went back to the queue unfinished or its machine outlives the consumer,
// false when it is over here (ended, suspended, gone, or held by another
// claimer now). It is called before the consumer claims anything in the
// session's slot.
type Releaser interface {
	Released(ctx context.Context, s *Session, resumable bool)
}

// Outcome is how a session's machine ended. Its Ending decides what becomes
// of the claim; Postpone, Stop and Reason only qualify it. Runners build one
// with Stopped, Exited, NotStarted or HandedOff, qualified by Postponed,
// StopAfter and WithReason.
type Outcome struct {
	// Ending is what happened to the session's machine.
	Ending Ending
	// Err says why the machine stopped or could not start. When the
	// session turns out not to be over it is the release reason (unless
	// Reason is set) and Run's error for the session; it is ignored when
	// the session is over.
	Err error
	// Reason, when set, is the release reason instead of Err's text.
	Reason string
	// Postpone leaves the session to other claimers for
	// Consumer.RetryAfter before this consumer claims it again.
	Postpone bool
	// Stop makes the consumer stop after this session; Run then returns
	// the session's error, nil when the session is over.
	Stop bool
}

// Ending is the one thing an Outcome says happened to the session's
// machine, which decides what becomes of its claim.
type Ending int

const (
	// EndStopped: the machine was stopped (the session ended, the claim
	// was lost, the consumer shuts down), or stopped by itself in a way
	// the runner does not call an exit. The queue says whether the
	// session is over; if not, the claim goes back to the queue.
	EndStopped Ending = iota
	// EndExited: the remote exited by itself. As EndStopped, but the
	// queue's status may lag the exit, so the consumer waits a moment for
	// the session's end before deciding it is not over.
	EndExited
	// EndNotStarted: the machine could not be given at all (provisioning
	// or starting the remote failed). The claim is released with the
	// reason at once and Err is the session's error whatever its status.
	EndNotStarted
	// EndHandedOff: the claim is not the consumer's to release. Before
	// shutdown it means the gateway refused the remote
	// (api.RemoteExitRejected): another remote serves the session under
	// the same claim, or the claim moved. On shutdown (Session.Stopping)
	// it means the machine outlives the consumer (the operator's pods):
	// the claim is kept for the next process to adopt.
	EndHandedOff
)

// String names the ending, for logs and test failures.
func (e Ending) String() string {
	switch e {
	case EndStopped:
		return "stopped"
	case EndExited:
		return "exited"
	case EndNotStarted:
		return "not started"
	case EndHandedOff:
		return "handed off"
	}
	return fmt.Sprintf("Ending(%d)", int(e))
}

// Stopped is the Outcome of a machine that was stopped; err says why.
func Stopped(err error) Outcome { return Outcome{Ending: EndStopped, Err: err} }

// Exited is the Outcome of a remote that exited by itself; err says how.
func Exited(err error) Outcome { return Outcome{Ending: EndExited, Err: err} }

// NotStarted is the Outcome of a machine that could not be given; err says
// why and is the session's error.
func NotStarted(err error) Outcome { return Outcome{Ending: EndNotStarted, Err: err} }

// HandedOff is the Outcome of a session whose claim is left to whoever
// holds it now; err says why.
func HandedOff(err error) Outcome { return Outcome{Ending: EndHandedOff, Err: err} }

// Postponed returns o leaving the session to other claimers for
// Consumer.RetryAfter.
func (o Outcome) Postponed() Outcome {
	o.Postpone = true
	return o
}

// StopAfter returns o stopping the consumer after this session.
func (o Outcome) StopAfter() Outcome {
	o.Stop = true
	return o
}

// WithReason returns o with reason as the release reason instead of Err's
// text.
func (o Outcome) WithReason(reason string) Outcome {
	o.Reason = reason
	return o
}

// Observer sees what a consumer does, for metrics. Its methods must not
// block.
type Observer interface {
	// Conflict counts a claim lost to another acceptor (409 or 404).
	Conflict()
	// Failure counts a failed call by operation: "list", "watch",
	// "claim", "renew", "release", "claim_lost".
	Failure(op string)
	// Held reports how many claims the consumer holds now.
	Held(n int)
}

// Consumer consumes one outpost's queue. Set its fields, then call Run (or
// Serve) once.
type Consumer struct {
	// Machine, when set, is sent with each server-assigned claim so that
	// the server gives the consumer only sessions whose requirements the
	// machine meets; nil gets only sessions without requirements.
	Machine *api.ClaimMachine
	// Provisions says the consumer provisions a machine per session to
	// meet its requirements (an orchestrator's container or pod), so it
	// is given sessions with requirements without a Machine.
	Provisions bool
	// Client talks to the server with a token of the outposts.machine
	// scope. Required. The token never reaches a machine.
	Client *client.Client
	// Outpost is the outpost served. Required.
	Outpost api.Outpost
	// Platform is the platform of the machines the runner gives; sessions
	// pinned to another are not claimed. Empty means the outpost's, an
	// outpost without one meaning linux.
	Platform string
	// Identity names the consumer in claims. Required.
	Identity *Identity
	// Capacity is how many sessions run at once; zero means 1.
	Capacity int
	// Drain, when set, claims nothing new: the consumer serves the claims
	// Recover hands it until they end (a Kubernetes pool scaled to zero).
	Drain bool
	// Runner gives each claimed session its machine. Required.
	Runner Runner
	// Presence, when set, is run from the start until every claim is
	// released; an Identity with an Instance is announced through it
	// before anything is claimed (see ErrAcceptorInUse).
	Presence *Presence
	// Resolver resolves a session's pinned remote build (Session.Remote);
	// nil means every session runs RemoteCommand.
	Resolver *dist.Resolver
	// RemoteCommand is this build's remote command, for Session.Remote
	// without a Resolver.
	RemoteCommand []string
	// PinnedOnly makes sessions that pin no build run RemoteCommand rather
	// than the Resolver's default (its Pin, else the latest published).
	PinnedOnly bool
	// GatewayURL is the gateway remotes dial when a claim answer names
	// none.
	GatewayURL string
	// CAFile, absolute, is passed to remotes as OUTPOST_CA_FILE; empty
	// means the consumer's own OUTPOST_CA_FILE, if any.
	CAFile string
	// PollInterval is how often the queue is listed while watching it
	// fails. Zero means DefaultPollInterval.
	PollInterval time.Duration
	// ResyncInterval, when set, lists the whole queue that often even
	// while the watch is healthy, a backstop for a backlog.
	ResyncInterval time.Duration
	// CheckInterval, when set, reads each held session's entry that often,
	// in case the watch missed its end (Session.Ended).
	CheckInterval time.Duration
	// RetryAfter is how long a session whose Outcome is Postponed is
	// left to other claimers.
	RetryAfter time.Duration
	// Recover, when set, is called once the identity is announced and
	// before anything is claimed. It returns claims the consumer already
	// holds, renewed (a restart found their machines still running): they
	// count against Capacity and reach the Runner with Session.Adopted set.
	Recover func(ctx context.Context) []api.QueueEntry
	// HandBack says the consumer's machines die with its process (a
	// worker's remotes): claims its acceptor id holds when it starts are
	// its dead predecessor's, whose machines are gone. Once the identity is
	// announced (the data dir's lock and the presence prove no other live
	// process serves them), they are released at once, with a reason, so
	// that their sessions go back to the queue rather than wait for the
	// reconnect grace and the claim deadline. Ignored for an identity
	// without an Instance (shared by design).
	HandBack bool
	// NetworkEnforcement says whether the Runner enforces a session's
	// network policy (spec.network_policy enabled) now: nil when it does,
	// else the sentence why not. Nil means it enforces none, and
	// restricted sessions are then never served open: they are not
	// claimed, and one the server hands over anyway is given back at
	// once with the reason, which reaches its transcript.
	NetworkEnforcement func() error
	// Desktop says the consumer's machines give sessions a desktop. Only
	// then does a server-assigned claim hand it the sessions of an outpost
	// whose desktop is enabled (api.OutpostDesktop); false never gets
	// them.
	Desktop bool
	// NetworkRefusal, when set, is asked about each restricted entry once
	// NetworkEnforcement allowed restricted sessions: nil when the Runner
	// enforces that entry's policy too, else the sentence why not (a rule
	// its enforcement cannot express). Such an entry is treated as all
	// restricted ones are without enforcement. It may be called with the
	// consumer's lock held: it must not block or call the consumer.
	NetworkRefusal func(e *api.QueueEntry) error
	// ClaimWait is how long a server-assigned claim may wait at the
	// server for a session to become pending (see claimwait.go): 0 means
	// DefaultClaimWait, negative asks without waiting, on each change of
	// the queue; at most api.MaxClaimNextWait seconds.
	ClaimWait time.Duration
	// WatchHeld narrows the consumer's queue watch to the entries it
	// holds (client.QueueService.WatchHeld) while it claims through
	// waiting claim-next requests, which need no other entries: a new
	// session then costs the server one write, not one for each idle
	// consumer of the outpost. While it claims otherwise (a server that
	// does not park requests or assign claims: by id, from the entries
	// its watch shows) it lists and watches the whole queue: the held
	// watch gives way at once, and the next watch, once the server ends
	// that one, is chosen again.
	WatchHeld bool
	// CursorFile, when set, is where the last watch cursor is saved.
	CursorFile string
	// Cursor, when set, is given each new watch cursor (the Kubernetes
	// operator shows it in the pool's status). It must not block.
	Cursor func(cursor string)
	// Observer, when set, sees claims, conflicts and failures.
	Observer Observer
	// Clock paces every wait; nil means the real clock.
	Clock clockwork.Clock
	// Logger receives the consumer's log; nil discards it.
	Logger *slog.Logger

	log      *slog.Logger
	clock    clockwork.Clock
	obs      Observer
	lookup   func(string) (string, bool)
	platform string
	wake     chan struct{} // pokes the scheduler
	halt     chan error    // a session whose outcome says Stop
	halting  atomic.Bool   // set once a session's outcome said Stop
	stopping chan struct{} // closed when the consumer shuts down
	wg       sync.WaitGroup
	// announced is set when the server took the identity's presence at
	// start (claimIdentity), so nobody else holds its acceptor id.
	announced bool

	// byIDUntil (Unix nanoseconds of the consumer's clock) is when the
	// consumer next tries a server-assigned claim after one answered 404:
	// an older server without the endpoint, or an outpost gone for a
	// moment. Until then it claims by id.
	byIDUntil atomic.Int64
	// waitOffUntil (as byIDUntil) is when the consumer next tries a
	// waiting claim-next after a server answered one at once.
	waitOffUntil atomic.Int64
	// rewatch, set while a held watch is open (WatchHeld), ends it so
	// that the next one is chosen again; guarded by mu.
	rewatch context.CancelFunc

	mu      sync.Mutex // guards the following
	entries map[string]api.QueueEntry
	// applied counts the watch events applied to entries; appliedAt is
	// the count at each entry's last one (scheduleNext).
	applied   uint64
	appliedAt map[string]uint64
	held      map[string]*Session
	retryAt   map[string]time.Time
	// fullUntil is when to claim again after the outpost answered that
	// it is at its max_running; fullTries counts those answers in a row.
	fullUntil time.Time
	fullTries int
	// waiting is set while a goroutine sends waiting claim-next requests
	// (waitNext); waitCancel cuts the one in flight, which excludes
	// waitExclude.
	waiting     bool
	waitCancel  context.CancelFunc
	waitExclude []string
}

// Run consumes the queue until ctx ends (a clean exit: nil) or a session's
// outcome says Stop. When ctx ends, running sessions see Stopping and their
// claims are kept until their runners return and then released. Run
// returns only after every goroutine it started has stopped.
func (c *Consumer) Run(ctx context.Context) error {
	return c.run(ctx, c.consume)
}

// Serve claims the one session id, waiting while it cannot be claimed yet
// (polled every PollInterval), runs it and returns its error. Its runner
// sees Stopping when ctx ends.
func (c *Consumer) Serve(ctx context.Context, id string) error {
	return c.run(ctx, func(ctx context.Context) error { return c.serveOne(ctx, id) })
}

func (c *Consumer) init() error {
	if c.Client == nil || c.Identity == nil || c.Runner == nil || c.Outpost.Metadata.OutpostID == "" {
		return errors.New("fleet: Consumer needs a Client, an Identity, a Runner and an Outpost")
	}
	if c.Capacity <= 0 {
		c.Capacity = 1
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.clock = c.Clock; c.clock == nil {
		c.clock = clockwork.NewRealClock()
	}
	if c.log = c.Logger; c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.obs = c.Observer; c.obs == nil {
		c.obs = nopObserver{}
	}
	if c.platform = c.Platform; c.platform == "" {
		c.platform = OutpostPlatform(&c.Outpost)
	}
	c.lookup = LookupWithCAFile(os.LookupEnv, c.CAFile)
	c.wake = make(chan struct{}, 1)
	c.halt = make(chan error, 1)
	c.stopping = make(chan struct{})
	c.entries = map[string]api.QueueEntry{}
	c.held = map[string]*Session{}
	c.retryAt = map[string]time.Time{}
	return nil
}

// run announces the identity, runs the presence around body and turns a
// refused heartbeat into Run's error.
func (c *Consumer) run(ctx context.Context, body func(context.Context) error) error {
	if err := c.init(); err != nil {
		return err
	}
	if err := c.claimIdentity(ctx); err != nil {
		if isCanceled(ctx, err) {
			return nil
		}
		return err
	}
	// A heartbeat refused later (another process took the id over while
	// this one could not reach the server) stops the consumer as ctx's end
	// does, with that refusal as the cause.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if c.Presence != nil {
		// The presence outlives ctx until every claim is released: a
		// session finishing after shutdown is still served.
		pctx, stopPresence := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Presence.run(pctx, func(err error) {
				stop(&acceptorInUseError{id: c.Identity, holder: c.holder(context.WithoutCancel(ctx)), now: c.clock.Now(), server: err})
			})
		}()
		defer func() {
			stopPresence()
			<-done
		}()
	}
	err := body(ctx)
	if cause := context.Cause(ctx); errors.Is(cause, ErrAcceptorInUse) {
		return cause
	}
	if isCanceled(ctx, err) {
		return nil
	}
	return err
}

// consume is Run's body: the scheduler, with the feed (and the resync)
// feeding it, until ctx ends or a session says Stop.
func (c *Consumer) consume(ctx context.Context) error {
	fctx, stopFeed := context.WithCancel(ctx)
	if c.HandBack && c.announced {
		c.handBack(ctx)
	}
	if c.Recover != nil {
		for _, e := range c.Recover(ctx) {
			c.start(ctx, e, true)
		}
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.feed(fctx)
	}()
	if c.ResyncInterval > 0 {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.resync(fctx)
		}()
	}
	var stopErr error
	failures := 0
	retry := c.clock.NewTimer(time.Hour)
	retry.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case stopErr = <-c.halt:
			break loop
		case <-c.wake:
		case <-retry.Chan():
		}
		failed, full := c.schedule(ctx, failures+1)
		if failed {
			failures++
		} else {
			failures = 0
		}
		// Wake up when the first postponed or failed entry may be claimed
		// again, or the outpost's max_running wait is over, whatever else
		// wakes the loop before.
		d, ok := c.nextRetry()
		if full > 0 && (!ok || full < d) {
			d, ok = full, true
		}
		if ok {
			retry.Reset(d)
		}
	}
	retry.Stop()
	stopFeed()
	close(c.stopping)
	c.wg.Wait()
	if stopErr == nil {
		select {
		case stopErr = <-c.halt: // a session that said Stop while shutting down
		default:
		}
	}
	return stopErr
}

// schedule claims candidates in claim order (higher priority first, then
// oldest) while there is capacity. It reports whether a claim failed with
// an error worth retrying, and, when the outpost answered that it is at
// its max_running, how long to wait before claiming again (full).
//
// An entry whose claim failed so is not tried again before a wait of
// claimBackoff for the attempt-th failure in a row, whatever wakes the
// scheduler meanwhile.
func (c *Consumer) schedule(ctx context.Context, attempt int) (failed bool, full time.Duration) {
	if done, full := c.scheduleNext(ctx); done {
		return false, full
	}
	for ctx.Err() == nil {
		cands := c.candidates()
		progressed := false
		for _, e := range cands {
			if c.free() == 0 || ctx.Err() != nil {
				return failed, 0
			}
			id := e.Metadata.SessionID
			c.mu.Lock()
			sent := c.applied // what the consumer knew when it asked
			c.mu.Unlock()
			claim, err := c.claim(ctx, id)
			switch {
			case client.HasCode(err, api.CodeOutpostAtCapacity):
				// Every other candidate is of the same outpost: wait for
				// a slot rather than try them.
				return failed, c.atCapacity()
			case client.IsConflict(err) || client.IsNotFound(err):
				c.obs.Conflict()
				c.log.Debug("session taken by another claimer", "session", id)
				c.mu.Lock()
				// Unless an event changed it since the request (released
				// meanwhile): that one may be newer than the answer.
				if cur, ok := c.entries[id]; ok && c.appliedAt[id] <= sent {
					cur.Status.Phase = api.PhaseClaimed // until the queue says otherwise
					c.entries[id] = cur
				}
				c.mu.Unlock()
			case err != nil:
				if ctx.Err() == nil {
					c.log.Warn("cannot claim session; retrying", "session", id, "err", err)
					c.obs.Failure("claim")
					failed = true
					c.mu.Lock()
					c.retryAt[id] = c.clock.Now().Add(claimBackoff.Delay(attempt))
					c.mu.Unlock()
				}
			default:
				progressed = true
				c.mu.Lock()
				c.fullTries = 0
				c.mu.Unlock()
				c.start(ctx, *claim, false)
			}
		}
		if !progressed {
			return failed, 0
		}
	}
	return failed, 0
}

// nextRetry returns the wait until the first entry now held back by retryAt
// may be claimed, forgetting the waits that have passed; false when none
// waits.
func (c *Consumer) nextRetry() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	var first time.Time
	for id, at := range c.retryAt {
		if !at.After(now) {
			delete(c.retryAt, id)
			continue
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return first.Sub(now), true
}

// atCapacity records an answer that the outpost is at its max_running and
// returns how long to wait before claiming again.
func (c *Consumer) atCapacity() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fullTries++
	wait := capacityBackoff.Delay(c.fullTries)
	c.fullUntil = c.clock.Now().Add(wait)
	c.log.Debug("the outpost is at its max_running; waiting for a slot", "tries", c.fullTries, "wait", wait)
	return wait
}

// candidates are the known entries this consumer may claim now, in claim
// order: higher priority first, then oldest (the server's order too). None
// while the outpost is at its max_running.
func (c *Consumer) candidates() []api.QueueEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if now.Before(c.fullUntil) {
		return nil
	}
	var out []api.QueueEntry
	for _, e := range c.entries {
		if c.candidateLocked(&e, now) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, claimOrder)
	return out
}

// claimOrder orders queue entries as claimers take them: higher priority
// first, then created first (to the millisecond when the server says),
// then by session id.
func claimOrder(a, b api.QueueEntry) int {
	return cmp.Or(cmp.Compare(b.Spec.Priority, a.Spec.Priority),
		cmp.Compare(a.Metadata.CreatedAt, b.Metadata.CreatedAt),
		cmp.Compare(a.Metadata.CreatedAtMS, b.Metadata.CreatedAtMS),
		strings.Compare(a.Metadata.SessionID, b.Metadata.SessionID))
}

// candidateLocked reports whether e is pending on this outpost, for this
// platform, not asleep or over, not held and not postponed.
func (c *Consumer) candidateLocked(e *api.QueueEntry, now time.Time) bool {
	switch {
	case !c.claimable(e),
		e.Status.Phase != api.PhasePending,
		c.held[e.Metadata.SessionID] != nil,
		now.Before(c.retryAt[e.Metadata.SessionID]):
		return false
	}
	return true
}

// claimable reports whether e is a session of this outpost and platform,
// neither asleep nor over.
func (c *Consumer) claimable(e *api.QueueEntry) bool {
	switch {
	case e.Status.SessionStatus == api.QueueSessionSuspended,
		e.Status.SessionStatus == api.QueueSessionTerminated,
		e.Metadata.OutpostID != "" && e.Metadata.OutpostID != c.outpostID(),
		e.Spec.Platform != "" && e.Spec.Platform != c.platform,
		c.networkRefusal(e) != nil:
		return false
	}
	return true
}

func (c *Consumer) free() int {
	if c.halting.Load() || c.Drain {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Capacity - len(c.held)
}

// Wake makes the consumer look at the entries it knows again without
// waiting for the queue to change, as after a change of what
// NetworkRefusal decides. It never blocks.
func (c *Consumer) Wake() { c.poke() }

func (c *Consumer) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Consumer) outpostID() string { return c.Outpost.Metadata.OutpostID }

// OutpostPlatform is an outpost's platform, an empty one meaning linux.
func OutpostPlatform(o *api.Outpost) string {
	if o.Spec.Platform == "" {
		return api.PlatformLinux
	}
	return o.Spec.Platform
}

// isCanceled reports whether err is only the end of ctx, which is a clean
// exit rather than a failure.
func isCanceled(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, ctx.Err()))
}

type nopObserver struct{}

func (nopObserver) Conflict()      {}
func (nopObserver) Failure(string) {}
func (nopObserver) Held(int)       {}
