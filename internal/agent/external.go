package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/llm"
	"github.com/outpost-sh/outpost/internal/store"
)

// ToolEndSession ends an external session; outside agents call it when
// they are done.
const ToolEndSession = "end_session"

// externalReq is a tool call from an outside agent, handed to the
// session's runner, which runs calls one at a time.
type externalReq struct {
	tool  string
	args  json.RawMessage
	reply chan externalReply // buffered
}

// externalReply is the outcome of an outside agent's call.
type externalReply struct {
	result api.ToolResult
	err    error
}

// Errors of Loop.External. The server words them for its callers.
var (
	// ErrNotRunning: the session has no runner (no remote connected yet).
	ErrNotRunning = errors.New("the session has no runner")
	// ErrEnded: the session's runner ended before it took the call.
	ErrEnded = errors.New("the session has ended")
	// ErrEndedDuringCall: the session's runner ended while the call ran.
	ErrEndedDuringCall = errors.New("the session ended while the call ran")
)

// ToolCallError is a call the runner refused: its tool or arguments are
// not valid. Problem says why, in a sentence for the caller.
type ToolCallError struct {
	Problem string
}

func (e *ToolCallError) Error() string { return e.Problem }

// ExternalOutpost returns the outpost of the session when this loop runs
// it for an outside agent and takes its calls: a caller may authorize a
// call by it, and know the session's kind, without reading the session
// (neither ever changes).
func (l *Loop) ExternalOutpost(sessionID string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.runners[sessionID]; r != nil && r.externalOutpost != "" {
		return r.externalOutpost, true
	}
	return "", false
}

// External runs one tool call of an outside agent through the session's
// runner and waits for its result. The caller checks that the session is
// an external one that has not ended.
func (l *Loop) External(ctx context.Context, sessionID, tool string, args json.RawMessage) (api.ToolResult, error) {
	r := l.running(sessionID)
	if r == nil {
		return api.ToolResult{}, ErrNotRunning
	}
	req := externalReq{tool: tool, args: args, reply: make(chan externalReply, 1)}
	select {
	case r.external <- req:
	case <-r.done:
		return api.ToolResult{}, ErrEnded
	case <-ctx.Done():
		return api.ToolResult{}, ctx.Err()
	}
	select {
	case rep := <-req.reply:
		return rep.result, rep.err
	case <-r.done:
		return api.ToolResult{}, ErrEndedDuringCall
	case <-ctx.Done():
		return api.ToolResult{}, ctx.Err()
	}
}

// runExternal serves an outside agent's tool calls until it ends the
// session, the idle limit passes, or the session ends otherwise.
// calls are the session's calls as run found them.
func (r *runner) runExternal(ctx context.Context, sess store.Session, calls []store.Call, done map[int64]store.Call) {
	idle := defaultIdle
	if sess.Spec.Limits.IdleS > 0 {
		idle = time.Duration(sess.Spec.Limits.IdleS) * time.Second
	}
	r.l.mu.Lock()
	r.externalOutpost = sess.OutpostID
	r.l.mu.Unlock()
	var last int64
	for seq := range done {
		last = max(last, seq)
	}
	// Calls recorded but without a result (a restart) are finished first;
	// done holds the planned ones as runSteps left them.
	for _, c := range calls {
		last = max(last, c.Seq)
		if d, ok := done[c.Seq]; ok && d.Done {
			continue
		}
		if !c.Done {
			if _, _, err := r.execute(ctx, c.Seq, step{tool: c.Tool, args: c.Args}, nil); err != nil {
				r.fail(ctx, err)
				return
			}
		}
	}
	timer := r.l.clock.NewTimer(idle)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			r.fail(ctx, ctx.Err())
			return
		case msg := <-r.results:
			if err := r.lateResult(ctx, msg); err != nil {
				r.fail(ctx, err)
				return
			}
		case <-timer.Chan():
			r.end(ctx, api.StatusExit, api.DetailInactivity, fmt.Sprintf("No tool call from the outside agent for %s (limits.idle_s).", idle))
			return
		case req := <-r.external:
			if req.tool == ToolEndSession {
				req.reply <- externalReply{result: api.ToolResult{OK: true, Output: "The session is ending."}}
				r.end(ctx, api.StatusExit, api.DetailFinished, "The outside agent ended the session.")
				return
			}
			if problem := toolCallProblem(llm.ToolCall{Name: req.tool, Arguments: req.args}); problem != "" {
				req.reply <- externalReply{err: &ToolCallError{Problem: problem}}
				continue
			}
			if len(req.args) == 0 {
				req.args = json.RawMessage("{}")
			}
			last++
			res, err := r.runOne(ctx, last, step{tool: req.tool, args: req.args})
			req.reply <- externalReply{result: res, err: err}
			if err != nil {
				r.fail(ctx, err)
				return
			}
			timer.Reset(idle)
		}
	}
}

// runOne records, runs and collects one call, returning its result with
// the output the transcript holds for it.
func (r *runner) runOne(ctx context.Context, seq int64, st step) (api.ToolResult, error) {
	conv := newConversation(1 << 20)
	var callEvent int64
	if err := r.retry(ctx, "record call", func() (err error) {
		callEvent, err = r.record(ctx, seq, st)
		return err
	}); err != nil {
		if errors.Is(err, errSessionEnded) {
			// The caller hears ErrEnded; fail still sees errSessionEnded.
			err = fmt.Errorf("%w: %w", ErrEnded, err)
		}
		return api.ToolResult{}, err
	}
	conv.lastSeen = callEvent // collect the output and result that follow
	conv.pending[seq] = "call"
	// The result's transaction carries the call's output as the gateway
	// last held it: conv takes its events there (committed), and the
	// store is read only when they leave a gap (output written earlier,
	// another writer's events) or the result is not among them.
	r.conv = conv
	call, _, err := r.execute(ctx, seq, st, nil)
	r.conv = nil
	if err != nil {
		if errors.Is(err, errSessionEnded) {
			err = fmt.Errorf("%w: %w", ErrEndedDuringCall, err)
		}
		return api.ToolResult{}, err
	}
	if gap := conv.applyAhead(); gap || len(conv.pending) > 0 {
		if err := r.catchUp(ctx, conv); err != nil {
			return api.ToolResult{}, err
		}
	}
	res := api.ToolResult{Seq: seq, OK: call.OK, Value: call.Value, Error: call.Error}
	if n := len(conv.msgs); n > 0 {
		res.Output = conv.msgs[n-1].Text
	}
	return res, nil
}
