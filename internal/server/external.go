package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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

// callExternal runs one tool call of an outside agent through the
// session's runner and waits for its result.
func (s *Server) callExternal(ctx context.Context, sessionID, tool string, args json.RawMessage) (api.ToolResult, error) {
	sess, err := s.sessionFor(ctx, sessionID)
	if err != nil {
		return api.ToolResult{}, err
	}
	if sess.Spec.Agent.Kind != api.AgentExternal {
		return api.ToolResult{}, errConflict("Session %s runs a %s agent; only external sessions take tool calls from outside.", sessionID, sess.Spec.Agent.Kind)
	}
	if api.IsFinal(sess.Status) {
		return api.ToolResult{}, errConflict("Session %s has ended (%s).", sessionID, sess.Status)
	}
	s.mu.Lock()
	r := s.runners[sessionID]
	s.mu.Unlock()
	if r == nil {
		return api.ToolResult{}, &httpError{http.StatusServiceUnavailable, api.CodeUnavailable,
			fmt.Sprintf("Session %s has no machine connected yet (status %s); try again when it is running.", sessionID, sess.Status)}
	}
	req := externalReq{tool: tool, args: args, reply: make(chan externalReply, 1)}
	select {
	case r.external <- req:
	case <-r.done:
		return api.ToolResult{}, errConflict("Session %s has ended.", sessionID)
	case <-ctx.Done():
		return api.ToolResult{}, ctx.Err()
	}
	select {
	case rep := <-req.reply:
		return rep.result, rep.err
	case <-r.done:
		return api.ToolResult{}, errConflict("Session %s ended while the call ran.", sessionID)
	case <-ctx.Done():
		return api.ToolResult{}, ctx.Err()
	}
}

// runExternal serves an outside agent's tool calls until it ends the
// session, the idle limit passes, or the session ends otherwise.
func (r *runner) runExternal(ctx context.Context, sess store.Session, done map[int64]store.Call) {
	idle := defaultIdle
	if sess.Spec.Limits.IdleS > 0 {
		idle = time.Duration(sess.Spec.Limits.IdleS) * time.Second
	}
	var last int64
	for seq := range done {
		last = max(last, seq)
	}
	// Calls recorded but without a result (a restart) are finished first.
	var calls []store.Call
	if err := r.retry(ctx, "load calls", func() (err error) {
		calls, err = r.s.store.ListCalls(ctx, r.sessionID)
		return err
	}); err != nil {
		r.fail(ctx, err)
		return
	}
	for _, c := range calls {
		last = max(last, c.Seq)
		if !c.Done {
			if _, _, err := r.execute(ctx, c.Seq, step{tool: c.Tool, args: c.Args}, nil); err != nil {
				r.fail(ctx, err)
				return
			}
		}
	}
	timer := time.NewTimer(idle)
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
		case <-timer.C:
			r.end(ctx, api.StatusExit, api.DetailInactivity, fmt.Sprintf("No tool call from the outside agent for %s (limits.idle_s).", idle))
			return
		case req := <-r.external:
			if req.tool == ToolEndSession {
				req.reply <- externalReply{result: api.ToolResult{OK: true, Output: "The session is ending."}}
				r.end(ctx, api.StatusExit, api.DetailFinished, "The outside agent ended the session.")
				return
			}
			if problem := toolCallProblem(llm.ToolCall{Name: req.tool, Arguments: req.args}); problem != "" {
				req.reply <- externalReply{err: errBadRequest("%s", problem)}
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
		return api.ToolResult{}, err
	}
	conv.lastSeen = callEvent // collect the output and result that follow
	conv.pending[seq] = "call"
	call, _, err := r.execute(ctx, seq, st, nil)
	if err != nil {
		return api.ToolResult{}, err
	}
	if err := r.catchUp(ctx, conv); err != nil {
		return api.ToolResult{}, err
	}
	res := api.ToolResult{Seq: seq, OK: call.OK, Value: call.Value, Error: call.Error}
	if n := len(conv.msgs); n > 0 {
		res.Output = conv.msgs[n-1].Text
	}
	return res, nil
}

// toolHandler answers POST /v1/sessions/{id}/tools/{tool}: the body is the
// tool's arguments.
func (s *Server) toolHandler(w http.ResponseWriter, r *http.Request) error {
	var args json.RawMessage
	if err := decodeOptional(w, r, &args); err != nil {
		return err
	}
	res, err := s.callExternal(r.Context(), r.PathValue("session"), r.PathValue("tool"), args)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// mcpHandler serves each session's MCP endpoint (Streamable HTTP,
// stateless): its tools are the remote's and end_session.
func (s *Server) mcpHandler() http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		return s.mcpServer(r.PathValue("session"))
	}, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, Logger: s.log})
	return h
}

// mcpServer builds the MCP server of one session.
func (s *Server) mcpServer(sessionID string) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "outpost", Title: "Outpost session " + sessionID, Version: "1"}, nil)
	for _, t := range api.Tools() {
		srv.AddTool(&mcp.Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema}, s.mcpTool(sessionID, t.Name))
	}
	srv.AddTool(&mcp.Tool{Name: ToolEndSession, Description: "End the session when the work is done. Its machine is released.",
		InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`)}, s.mcpTool(sessionID, ToolEndSession))
	return srv
}

func (s *Server) mcpTool(sessionID, tool string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := s.callExternal(ctx, sessionID, tool, req.Params.Arguments)
		if err != nil {
			var he *httpError
			if errors.As(err, &he) {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: he.message}}}, nil
			}
			return nil, err
		}
		text := res.Output // holds the error too
		if text == "" && len(res.Value) > 0 {
			text = string(res.Value)
		}
		return &mcp.CallToolResult{IsError: !res.OK, Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
	}
}
