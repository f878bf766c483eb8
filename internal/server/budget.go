package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/agent"
	"github.com/outpost-sh/outpost/internal/budget"
	"github.com/outpost-sh/outpost/internal/loop"
	"github.com/outpost-sh/outpost/internal/store"
)

// Budgets. A session's limits (max_tokens, max_cost_usd, max_tool_calls)
// are checked by its llm runner before each model call, and so is its
// outpost's monthly budget; the budget sweep checks the outposts' budgets
// for every running session (script and external ones, and session-hours,
// which grow without model calls). A session that reached a limit is
// stopped once (budgetStops): counted, told to the budget.reached
// webhooks, then suspended — when its on_limit says so and it can be — or
// ended. An outpost over its budget refuses new sessions (409
// budget_exceeded).

// outpostBudget returns an outpost's budget and its usage this month; nil
// for both when it has none.
func (s *Server) outpostBudget(ctx context.Context, outpostID string) (*api.OutpostBudget, *api.OutpostBudgetUsage, error) {
	b, err := s.store.OutpostBudget(ctx, outpostID)
	if err != nil || b == nil {
		return nil, nil, err
	}
	now := s.now()
	spans, err := s.store.OutpostSessionSpans(ctx, outpostID, budget.MonthStart(now))
	if err != nil {
		return nil, nil, err
	}
	u := budget.Month(spans, now)
	if rch, ok := budget.Outpost(*b, u); ok {
		u.Reached = rch.Kind
	}
	return b, &u, nil
}

// outpostBudgetReached reports whether an outpost reached its monthly
// budget. A failure to tell is logged and reads as not reached: the next
// check (or the sweep) tells.
func (s *Server) outpostBudgetReached(ctx context.Context, outpostID string) (budget.Reached, bool) {
	b, u, err := s.outpostBudget(ctx, outpostID)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("read an outpost's budget", "outpost", outpostID, "err", err)
		}
		return budget.Reached{}, false
	}
	if b == nil {
		return budget.Reached{}, false
	}
	return budget.Outpost(*b, *u)
}

// checkOutpostBudget refuses a new session on an outpost over its budget.
func (s *Server) checkOutpostBudget(ctx context.Context, o store.Outpost) error {
	rch, ok := s.outpostBudgetReached(ctx, o.ID)
	if !ok {
		return nil
	}
	return &httpError{http.StatusConflict, api.CodeBudgetExceeded, fmt.Sprintf(
		"Outpost %s takes no new sessions: %s. Raise its budget (outpost outposts update %s --monthly-hours/--monthly-cost) or wait for the next month.",
		o.Name, rch.Reason, o.Name)}
}

// checkResumeBudget refuses to resume a suspended session of an outpost
// over its budget: it would only be stopped again, by its next model call
// or the sweep, after a machine was claimed for it and ran a while.
func (s *Server) checkResumeBudget(ctx context.Context, sess store.Session) error {
	if sess.Status != api.StatusSuspended {
		return nil // lifecycle's resume answers why it cannot be resumed
	}
	rch, ok := s.outpostBudgetReached(ctx, sess.OutpostID)
	if !ok {
		return nil
	}
	name := s.outpostName(ctx, sess.OutpostID)
	return &httpError{http.StatusConflict, api.CodeBudgetExceeded, fmt.Sprintf(
		"Session %s cannot be resumed: %s. Raise the budget of outpost %s (outpost outposts update %s --monthly-hours/--monthly-cost) or wait for the next month.",
		sess.ID, rch.Reason, name, name)}
}

// budgetReached stops a session that reached a limit, in the background
// (the agent loop's BudgetReached): once, however often it is told.
func (s *Server) budgetReached(_ context.Context, sess store.Session, rch budget.Reached) {
	if _, busy := s.budgetStops.LoadOrStore(sess.ID, true); busy {
		return
	}
	if !s.track() {
		s.budgetStops.Delete(sess.ID)
		return
	}
	go func() {
		defer s.wg.Done()
		defer s.budgetStops.Delete(sess.ID)
		s.stopAtLimit(s.runCtx, sess.ID, rch)
	}()
}

// stopAtLimit suspends or ends session id, which reached rch, unless it no
// longer runs.
func (s *Server) stopAtLimit(ctx context.Context, id string, rch budget.Reached) {
	sess, err := s.store.GetSession(ctx, id)
	if err != nil || sess.Status != api.StatusRunning {
		return
	}
	reason := agent.LimitReason(rch)
	s.metrics.budgetReached.WithLabelValues(s.outpostName(ctx, sess.OutpostID), rch.Kind).Inc()
	s.emitBudgetReached(ctx, sess, rch)
	s.log.Info("session reached a limit", "session", id, "kind", rch.Kind, "on_limit", rch.OnLimit, "reason", rch.Reason)
	if rch.OnLimit != api.OnLimitEnd {
		err := s.suspender().Suspend(ctx, id, reason)
		if err == nil || ctx.Err() != nil {
			return
		}
		if cur, gerr := s.store.GetSession(ctx, id); gerr == nil && cur.Status != api.StatusRunning {
			return // suspended (or ended) meanwhile by someone else
		}
		reason = fmt.Sprintf("%s It could not be suspended (%s), so it ended.", reason, clientMessage(err))
	}
	if err := s.endSession(ctx, id, api.StatusExit, api.DetailUsageLimitExceeded, reason); err != nil && ctx.Err() == nil {
		s.log.Warn("end a session at its limit", "session", id, "err", err)
	}
}

// budgetEvent is the "budget" object of a budget.reached event.
type budgetEvent struct {
	Kind    string  `json:"kind"`
	Limit   float64 `json:"limit"`
	Used    float64 `json:"used"`
	OnLimit string  `json:"on_limit"`
	Reason  string  `json:"reason"`
}

// emitBudgetReached queues the budget.reached event of a session.
func (s *Server) emitBudgetReached(ctx context.Context, sess store.Session, rch budget.Reached) {
	raw, err := store.WebhookSessionData(sess, nil)
	var data api.WebhookData
	if err == nil {
		err = json.Unmarshal(raw, &data)
	}
	if err != nil {
		s.log.Warn("queue webhook event", "event", api.EventBudgetReached, "session", sess.ID, "err", err)
		return
	}
	b, _ := json.Marshal(budgetEvent{Kind: rch.Kind, Limit: rch.Limit, Used: rch.Used, OnLimit: rch.OnLimit, Reason: agent.LimitReason(rch)})
	data.Extra = map[string]json.RawMessage{"budget": b}
	s.emitWebhook(ctx, api.EventBudgetReached, sess.OutpostID, sess.ID, data)
}

// budgetSweep, every five sweep intervals (at most a minute), stops the
// running sessions of outposts over their monthly budget
// (sweepBudgetsOnce).
func (s *Server) budgetSweep(ctx context.Context) {
	loop.Every(ctx, min(5*s.opts.SweepInterval, time.Minute), s.sweepBudgetsOnce)
}

// sweepBudgetsOnce stops the running sessions of outposts over their
// monthly budget. A session another replica owns is left to that replica's
// sweep: its remote is connected there, so only there can it be suspended
// (here the suspend would fail and the session be ended instead).
func (s *Server) sweepBudgetsOnce(ctx context.Context) {
	active, err := s.store.ListStartedSessions(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("budget sweep: list started sessions", "err", err)
		}
		return
	}
	over := map[string]*budget.Reached{} // by outpost id; nil: under
	for _, sess := range active {
		id := sess.ID
		if sess.Status != api.StatusRunning {
			continue
		}
		rch, seen := over[sess.OutpostID]
		if !seen {
			if r, ok := s.outpostBudgetReached(ctx, sess.OutpostID); ok {
				rch = &r
			}
			over[sess.OutpostID] = rch
		}
		if rch == nil {
			continue
		}
		if s.hub.Get(id) == nil {
			if e, err := s.store.GetQueueEntry(ctx, id); err != nil || (e.Owner != "" && e.Owner != s.opts.ReplicaID) {
				continue
			}
		}
		s.budgetReached(ctx, sess, *rch)
	}
}
