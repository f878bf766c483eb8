// Package agent is the agent loop of Outpost's control plane: for every
// running session it decides the tool calls — a script's steps, a model's
// answers, an outside agent's requests — sends each to the session's remote
// over the gateway, and records calls and results on the session's
// transcript.
//
// The loop owns no network or HTTP surface. The server hands it the store,
// the committed-event feed, the gateway's live connections, the message
// lock, a clock and a logger (see Options); the loop hands results of its
// transactions back through the feed and ends sessions through the server's
// one end transition.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/budget"
	"github.com/outpost-sh/outpost/internal/llm"
	"github.com/outpost-sh/outpost/internal/store"
)

// Store is the part of the store the loop reads and writes.
type Store interface {
	GetSession(ctx context.Context, id string) (store.Session, error)
	ListCalls(ctx context.Context, sessionID string) ([]store.Call, error)
	ListEvents(ctx context.Context, sessionID string, after int64, limit int) ([]api.Event, error)
	UpdateSession(ctx context.Context, id string, fn func(s store.Session, e store.QueueEntry) (store.Mutation, error)) (store.Mutation, error)
	AppendEvents(ctx context.Context, sessionID string, events []api.Event) error
}

// Feed is the committed-event feed: what transactions wrote, as they
// commit. The loop publishes its own transactions to it and follows a
// session's events through it.
type Feed interface {
	// Publish tells everyone concerned what a transaction of the session
	// wrote (queue watchers, transcript followers, fencing).
	Publish(sessionID string, m store.Mutation)
	// Subscribe follows the session's events committed from now on.
	Subscribe(sessionID string) Subscription
}

// Subscription is one follower of a session's committed events. Events may
// arrive out of order, and some (live output past the transcript's cap)
// carry no Seq.
type Subscription interface {
	// Events delivers the events.
	Events() <-chan api.Event
	// Lagged is closed when the follower fell behind and lost events; it
	// must read the store for them and subscribe again.
	Lagged() <-chan struct{}
	// Close ends the subscription.
	Close()
}

// Gateway gives the loop the session's live remote connection.
type Gateway interface {
	// Conn returns the session's live connection, or nil, and a channel
	// closed at the next change of the session's connections.
	Conn(sessionID string) (Conn, <-chan struct{})
}

// Conn is one remote's gateway connection. Results arrive through
// Loop.Deliver.
type Conn interface {
	// Call sends call seq to the remote.
	Call(ctx context.Context, seq int64, tool string, args json.RawMessage) error
	// Ack tells the remote that result seq is stored; it may forget it.
	Ack(ctx context.Context, seq int64) error
	// Done is closed when the connection has ended.
	Done() <-chan struct{}
}

// Messages orders user messages of llm sessions against their end.
type Messages interface {
	// Lock takes the session's message lock, which the server holds while
	// it records a user message, waiting until it is held or ctx ends; it
	// returns the unlock.
	Lock(ctx context.Context, sessionID string) (unlock func(), err error)
	// Arrived returns a channel closed when the next user message (of any
	// session) is recorded.
	Arrived() <-chan struct{}
}

// Ender is the one transition of a session to a final status: the
// server's lifecycle.Machine.
type Ender interface {
	// End ends the session (a no-op when it ended already) and
	// returns what must follow the transaction — stopping its runner and
	// telling its remote — so that a caller holding a lock over the
	// transition can release it first. The returned func is never nil.
	End(ctx context.Context, sessionID, status, detail, reason string) (func(), error)
	// EndIn writes into a transaction of the caller's — which read sess
	// and e, and found the session not ended — the change End commits,
	// adding it to m (a script's end folds into its last result's commit,
	// one commit less per session). Once m is committed and published,
	// Ended does the rest of End and returns what must follow, as End's
	// func.
	EndIn(sess *store.Session, e store.QueueEntry, m *store.Mutation, now time.Time, status, detail, reason string)
	Ended(sessionID, status, detail, reason string) func()
}

// Options are a Loop's dependencies. Store, Feed, Gateway, Messages and
// Ender are required.
type Options struct {
	Store    Store
	Feed     Feed
	Gateway  Gateway
	Messages Messages
	Ender    Ender
	// ApprovalRules returns the approval rules of an outpost, read at each
	// tool call; nil means outposts have none (sessions' own rules still
	// apply).
	ApprovalRules func(ctx context.Context, outpostID string) ([]api.ApprovalRule, error)
	// LLM is the model provider of llm sessions; nil ends them in error.
	LLM llm.Provider
	// ToolResultLimit is how many characters of one tool result a model
	// sees; 0 means 16000.
	ToolResultLimit int
	// Clock gives the time and the timers; nil means the real clock.
	Clock clockwork.Clock
	// Logger receives the loop's logs; nil means slog.Default().
	Logger *slog.Logger
	// OnToolCall, when set, is told of each stored result (for metrics).
	OnToolCall func(tool string, ok bool)
	// Interrupted, when set, says whether a suspend stopped call seq of a
	// session before it finished, and why (forgetting it): such a call's
	// result is stored as that error, whatever the remote answered, so
	// that the agent reads it as interrupted when the session resumes.
	Interrupted func(sessionID string, seq int64) (why string, ok bool)
	// Prices estimates the cost of model calls (usage.cost_usd); nil
	// counts none.
	Prices *budget.Prices
	// OutpostBudget, when set, reports whether an outpost reached its
	// monthly budget; an llm runner asks before each model call.
	OutpostBudget func(ctx context.Context, outpostID string) (budget.Reached, bool)
	// BudgetReached, when set, stops a session that reached a limit —
	// suspends or ends it as r.OnLimit says, and tells whoever needs to
	// know — without waiting for it; the runner returns. Nil ends the
	// session.
	BudgetReached func(ctx context.Context, sess store.Session, r budget.Reached)
	// BeforeFinish, for tests, runs when an llm runner is about to end a
	// session whose model is done, before it takes the message lock.
	BeforeFinish func(sessionID string)
}

// Loop runs the runners of the sessions. Its goroutines end when the
// context given to Start ends, and Stop waits for them.
type Loop struct {
	opts  Options
	clock clockwork.Clock
	log   *slog.Logger

	wg sync.WaitGroup

	mu       sync.Mutex // guards the following
	ctx      context.Context
	stopping bool
	runners  map[string]*runner // by session id
	// started is closed (and replaced) whenever a runner starts.
	started chan struct{}
}

// New returns a Loop that runs nothing until Start.
func New(opts Options) *Loop {
	if opts.ToolResultLimit <= 0 {
		opts.ToolResultLimit = 16000
	}
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Loop{opts: opts, clock: opts.Clock, log: opts.Logger, runners: map[string]*runner{}, started: make(chan struct{})}
}

// Start lets the loop run sessions until ctx ends; every runner derives
// from ctx.
func (l *Loop) Start(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ctx = ctx
}

// Stop refuses new runners and waits for the running ones, which end with
// the context given to Start.
func (l *Loop) Stop() {
	l.mu.Lock()
	l.stopping = true
	l.mu.Unlock()
	l.wg.Wait()
}

// Ensure starts the session's runner unless it runs already. It reports
// false when the loop is not running (not started, or stopping).
func (l *Loop) Ensure(sessionID string) bool {
	return l.ensure(sessionID) != nil
}

func (l *Loop) ensure(sessionID string) *runner {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.runners[sessionID]; r != nil {
		return r
	}
	if l.stopping || l.ctx == nil || l.ctx.Err() != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(l.ctx)
	r := &runner{l: l, sessionID: sessionID, cancel: cancel, results: make(chan resultMsg),
		external: make(chan externalReq), done: make(chan struct{}), early: map[int64]resultMsg{}}
	l.runners[sessionID] = r
	close(l.started)
	l.started = make(chan struct{})
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer close(r.done)
		defer cancel()
		r.run(ctx)
		l.mu.Lock()
		if l.runners[sessionID] == r {
			delete(l.runners, sessionID)
		}
		l.mu.Unlock()
	}()
	return r
}

// WaitRunning waits until the session has a runner or ctx ends, and
// reports whether it has one.
func (l *Loop) WaitRunning(ctx context.Context, sessionID string) bool {
	for {
		l.mu.Lock()
		r, started := l.runners[sessionID], l.started
		l.mu.Unlock()
		if r != nil {
			return true
		}
		select {
		case <-started:
		case <-ctx.Done():
			return false
		}
	}
}

// running returns the session's runner, or nil.
func (l *Loop) running(sessionID string) *runner {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runners[sessionID]
}

// stopped reports whether the loop's context ended (the server stops).
func (l *Loop) stopped() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctx == nil || l.ctx.Err() != nil
}

// base is the context runners derive from, without its cancel: what must
// be written even while the server stops (a session's end).
func (l *Loop) base() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		return context.Background()
	}
	return context.WithoutCancel(l.ctx)
}

// StopSession stops the session's runner, if any.
func (l *Loop) StopSession(sessionID string) {
	if r := l.running(sessionID); r != nil {
		r.cancel()
	}
}

// Deliver hands a result frame of c, with the output events before it
// that are not on the transcript yet, to the session's runner, starting
// one if none runs. The hand-over is unbuffered, so a result is either
// taken by a running runner or not at all; it reports whether it was
// taken. A taken result's output is recorded with it, or on its own when
// the result is not. A result is acknowledged only once it is stored, or
// when the session is over and nobody will ever want it.
func (l *Loop) Deliver(ctx context.Context, sessionID string, c Conn, f api.Frame, output []api.Event) bool {
	for range 3 {
		r := l.running(sessionID)
		if r == nil {
			sess, err := l.opts.Store.GetSession(ctx, sessionID)
			if err != nil {
				return false // the remote resends it after it reconnects
			}
			if api.IsFinal(sess.Status) {
				_ = c.Ack(ctx, f.Seq)
				return false
			}
			if r = l.ensure(sessionID); r == nil {
				return false // stopping
			}
		}
		select {
		case r.results <- resultMsg{conn: c, frame: f, output: output}:
			return true
		case <-r.done:
		case <-ctx.Done():
			return false
		}
	}
	return false
}

// errSessionEnded stops a runner whose session ended under it.
var errSessionEnded = errors.New("session ended")
