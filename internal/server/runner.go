package server

import (
	"context"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/agent"
	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/store"
)

// newAgentLoop builds the agent loop of s: the runners of the sessions,
// which reach the server only through these dependencies.
func (s *Server) newAgentLoop() *agent.Loop {
	var clock clockwork.Clock = clockwork.NewRealClock()
	if s.opts.Now != nil {
		clock = nowClock{clock, s.opts.Now}
	}
	return agent.New(agent.Options{
		Store:           s.loopStore(),
		Feed:            agentFeed{s},
		Gateway:         s.hub.Agents(),
		Messages:        agentMessages{s},
		Ender:           s.life,
		LLM:             s.opts.LLM,
		ApprovalRules:   s.outpostApprovalRules,
		ToolResultLimit: s.opts.ToolResultLimit,
		Clock:           clock,
		Logger:          s.log,
		OnToolCall: func(tool string, ok bool) {
			s.metrics.toolCalls.WithLabelValues(tool, fmt.Sprint(ok)).Inc()
		},
		Interrupted:   s.suspends.TakeInterrupted,
		Prices:        s.prices,
		OutpostBudget: s.outpostBudgetReached,
		BudgetReached: s.budgetReached,
		BeforeFinish:  s.opts.beforeFinish,
	})
}

// nowClock is a real clock that tells the time of Options.Now.
type nowClock struct {
	clockwork.Clock
	now func() time.Time
}

func (c nowClock) Now() time.Time { return c.now() }

// agentFeed is the committed-event feed of the agent loop: what the
// server's own transactions publish.
type agentFeed struct{ s *Server }

func (f agentFeed) Publish(sessionID string, m store.Mutation) { f.s.committed(sessionID, m) }

func (f agentFeed) Subscribe(sessionID string) agent.Subscription {
	return &agentSub{t: f.s.topics, sessionID: sessionID, sub: f.s.topics.subscribe(sessionID)}
}

// agentSub is a follower of one session's events for the agent loop.
type agentSub struct {
	t         *topics
	sessionID string
	sub       *subscriber
}

func (a *agentSub) Events() <-chan api.Event { return a.sub.ch }
func (a *agentSub) Lagged() <-chan struct{}  { return a.sub.lagged }
func (a *agentSub) Close()                   { a.t.unsubscribe(a.sessionID, a.sub) }

// agentMessages gives the agent loop the message locks and the wake-up of
// user messages.
type agentMessages struct{ s *Server }

func (m agentMessages) Lock(ctx context.Context, sessionID string) (func(), error) {
	return m.s.messageLock(ctx, sessionID)
}

func (m agentMessages) Arrived() <-chan struct{} { return m.s.userMessages.Wait() }

// messageLock takes the lock that orders recording a user message of the
// session against ending the session because its model is done: the
// store's, so the message and the end may come through different servers.
func (s *Server) messageLock(ctx context.Context, sessionID string) (func(), error) {
	unlock, err := s.store.Lock(ctx, "message:"+sessionID, false)
	if err != nil {
		return nil, fmt.Errorf("take the message lock of %s: %w", sessionID, err)
	}
	return unlock, nil
}

// ensureRunner starts the session's runner unless it runs already.
func (s *Server) ensureRunner(sessionID string) { s.agents.Ensure(sessionID) }

// stopRunner stops the session's runner, if any, and drops its output.
func (s *Server) stopRunner(sessionID string) {
	s.agents.StopSession(sessionID)
	s.output.Drop(sessionID)
}

// deliverResult hands a result frame and the output before it to the
// session's runner; false when no runner took them.
func (s *Server) deliverResult(ctx context.Context, c *gateway.Conn, f api.Frame, output []api.Event) bool {
	return s.agents.Deliver(ctx, c.SessionID, gateway.AgentConn(c), f, output)
}
