package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/llm"
	"github.com/outpost-sh/outpost/internal/store"
)

// Defaults of an llm agent.
const (
	defaultMaxSteps = 50
	defaultIdle     = time.Hour
)

// conversation is an llm session's messages, rebuilt from its transcript:
// the transcript is the one durable record of the conversation, so a
// restarted server or a new machine continues where it was.
type conversation struct {
	limit    int // characters of one tool result shown to the model
	msgs     []llm.Message
	lastSeen int64 // the last transcript event applied
	lastCall int64 // the highest call seq seen
	steps    int   // model calls made
	// pending maps the calls of the last assistant message that have no
	// result yet to their tool-call ids.
	pending map[int64]string
	// inbox holds user messages and notes the model has not seen yet, with
	// their event seqs. They join the conversation at the next model call
	// (after the results of outstanding tool calls): an assistant message
	// records the last event its model had seen, so a rebuild places each
	// message where the model saw it.
	inbox  []inboxMsg
	output map[int64]*strings.Builder // output of running exec calls
}

// inboxMsg is a message waiting for the model.
type inboxMsg struct {
	seq int64
	msg llm.Message
}

// request returns the messages to send the model now.
func (c *conversation) request() []llm.Message {
	msgs := append([]llm.Message(nil), c.msgs...)
	for _, m := range c.inbox {
		msgs = append(msgs, m.msg)
	}
	return msgs
}

func newConversation(limit int) *conversation {
	return &conversation{limit: limit, pending: map[int64]string{}, output: map[int64]*strings.Builder{}}
}

// apply folds one transcript event into the conversation.
func (c *conversation) apply(ev api.Event) {
	c.lastSeen = max(c.lastSeen, ev.Seq)
	switch ev.Type {
	case api.EventMessage:
		switch ev.Role {
		case api.RoleUser:
			c.inbox = append(c.inbox, inboxMsg{ev.Seq, llm.Message{Role: llm.RoleUser, Text: ev.Text}})
		case api.RoleAssistant:
			// What the model had seen when it answered joins the history
			// before its answer; later messages wait for the next call.
			var later []inboxMsg
			for _, m := range c.inbox {
				if ev.Seen == 0 || m.seq <= ev.Seen {
					c.msgs = append(c.msgs, m.msg)
				} else {
					later = append(later, m)
				}
			}
			c.inbox = later
			c.steps++
			m := llm.Message{Role: llm.RoleAssistant, Text: ev.Text}
			for _, tc := range ev.ToolCalls {
				m.ToolCalls = append(m.ToolCalls, llm.ToolCall{ID: tc.ID, Name: tc.Tool, Arguments: json.RawMessage(tc.Arguments)})
				c.pending[tc.CallSeq] = tc.ID
				c.lastCall = max(c.lastCall, tc.CallSeq)
			}
			c.msgs = append(c.msgs, m)
		}
	case api.EventResume:
		// The session moved to another machine: the model is told, as a
		// user note, derived from the transcript like everything else.
		c.inbox = append(c.inbox, inboxMsg{ev.Seq, llm.Message{Role: llm.RoleUser, Text: "[outpost] " + ev.Reason +
			" Files of this session outside its repositories, and uncommitted work, may be missing on this machine; check before you go on."}})
	case api.EventRestore:
		// How the new machine cloned the session's repositories again.
		c.inbox = append(c.inbox, inboxMsg{ev.Seq, llm.Message{Role: llm.RoleUser, Text: "[outpost] " + ev.Reason}})
	case api.EventOutput:
		if _, ok := c.pending[ev.CallSeq]; ok {
			b := c.output[ev.CallSeq]
			if b == nil {
				b = &strings.Builder{}
				c.output[ev.CallSeq] = b
			}
			if b.Len() < 4*c.limit {
				b.WriteString(ev.Text)
			}
		}
	case api.EventResult:
		id, ok := c.pending[ev.CallSeq]
		if !ok {
			return
		}
		delete(c.pending, ev.CallSeq)
		c.msgs = append(c.msgs, llm.Message{Role: llm.RoleTool, ToolCallID: id, Text: c.resultText(ev), IsError: ev.OK == nil || !*ev.OK})
		delete(c.output, ev.CallSeq)
	}
}

// resultText renders a call's result for the model, cut to the limit; the
// whole result stays on the transcript.
func (c *conversation) resultText(ev api.Event) string {
	var b strings.Builder
	if out := c.output[ev.CallSeq]; out != nil {
		b.WriteString(out.String())
	}
	switch {
	case ev.ExitCode != nil:
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "[exit code %d]", *ev.ExitCode)
	case ev.Error != "":
		b.WriteString(ev.Error)
	case len(ev.Value) > 0:
		b.Write(ev.Value)
	}
	if ev.Error != "" && ev.ExitCode != nil {
		fmt.Fprintf(&b, " %s", ev.Error)
	}
	text := b.String()
	if len(text) > c.limit {
		cut := len(text) - c.limit
		text = text[:c.limit] + fmt.Sprintf("\n[%d more characters cut; the whole result is on the session's transcript]", cut)
	}
	return text
}

// lastAssistantDone reports whether the model's last answer asked for no
// tool calls (the model is done or waits for the user).
func (c *conversation) lastAssistantDone() bool {
	if len(c.inbox) > 0 {
		return false // something new for the model
	}
	for i := len(c.msgs) - 1; i >= 0; i-- {
		switch c.msgs[i].Role {
		case llm.RoleAssistant:
			return len(c.msgs[i].ToolCalls) == 0
		case llm.RoleUser:
			return false
		}
	}
	return false
}

// catchUp applies the transcript events written since the last one seen.
func (r *runner) catchUp(ctx context.Context, conv *conversation) error {
	for {
		evs, err := r.s.store.ListEvents(ctx, r.sessionID, conv.lastSeen, 500)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			conv.apply(ev)
		}
		if len(evs) < 500 {
			return nil
		}
	}
}

// systemPrompt tells the model its task, machine, workspace, tools and rules.
func systemPrompt(sess store.Session) string {
	var b strings.Builder
	b.WriteString("You are an agent working on a machine of the outpost " + sess.Spec.Outpost + ".\n")
	if c := sess.Capabilities; c != nil {
		fmt.Fprintf(&b, "The machine: %s/%s, %d CPUs, %s.\n", c.OS, c.Arch, c.CPUs, c.Git)
	}
	b.WriteString("Your working directory is the session's workspace; relative paths are relative to it.\n")
	if len(sess.Spec.Repos) > 0 {
		b.WriteString("The repositories are cloned already:\n")
		for _, repo := range sess.Spec.Repos {
			fmt.Fprintf(&b, "- repos/%s (from %s)\n", repo.Name, repo.URL)
		}
	}
	b.WriteString("Use the tools to do the task. Run commands with exec, read and change files with the file tools. " +
		"Check your work (build, run the tests) before you finish. When you are done, answer with a short summary and no tool calls.\n")
	if sess.Spec.Agent.Interactive {
		b.WriteString("When you need the user, ask in plain text without tool calls and wait for the answer.\n")
	}
	return b.String()
}

// modelTools are the tools offered to models: the remote's, with schemas
// generated from the types the remote decodes.
func modelTools() []llm.Tool {
	var tools []llm.Tool
	for _, t := range api.Tools() {
		tools = append(tools, llm.Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	return tools
}

// runLLM drives an llm session: the model plans, the remote executes.
func (r *runner) runLLM(ctx context.Context, sess store.Session, done map[int64]store.Call) {
	s := r.s
	if s.opts.LLM == nil {
		r.end(ctx, api.StatusError, api.DetailError, "This server has no model provider configured (OUTPOST_LLM_PROVIDER).")
		return
	}
	conv := newConversation(s.opts.ToolResultLimit)
	for seq := range done { // the clones come first
		conv.lastCall = max(conv.lastCall, seq)
	}
	if err := r.retry(ctx, "load transcript", func() error { return r.catchUp(ctx, conv) }); err != nil {
		r.fail(ctx, err)
		return
	}
	maxSteps := sess.Spec.Agent.MaxSteps
	if maxSteps <= 0 {
		maxSteps = defaultMaxSteps
	}
	tools := modelTools()
	// The model sees what the transcript shows: never a secret's value.
	system := r.secrets.String(systemPrompt(sess))
	for {
		if err := r.retry(ctx, "read transcript", func() error { return r.catchUp(ctx, conv) }); err != nil {
			r.fail(ctx, err)
			return
		}
		// Calls of the last answer still without a result (a restart, a
		// new machine) run first, in order.
		if len(conv.pending) > 0 {
			if err := r.runPending(ctx, conv, done); err != nil {
				r.fail(ctx, err)
				return
			}
			continue
		}
		if conv.lastAssistantDone() {
			if !sess.Spec.Agent.Interactive {
				if hook := s.opts.beforeFinish; hook != nil {
					hook(r.sessionID)
				}
				ended, err := r.finish(ctx, conv, api.StatusExit, api.DetailFinished, "The agent finished.")
				if err != nil {
					r.fail(ctx, err)
					return
				}
				if ended {
					return
				}
				continue // a message came after the answer: another turn
			}
			if err := r.waitForUser(ctx, conv, sess); err != nil {
				r.fail(ctx, err)
				return
			}
			continue
		}
		var cur store.Session
		if err := r.retry(ctx, "load session", func() (err error) {
			cur, err = s.store.GetSession(ctx, r.sessionID)
			return err
		}); err != nil {
			r.fail(ctx, err)
			return
		}
		if conv.steps >= maxSteps {
			r.end(ctx, api.StatusExit, api.DetailUsageLimitExceeded, fmt.Sprintf("The agent reached its limit of %d model calls (agent.max_steps).", maxSteps))
			return
		}
		if max := sess.Spec.Limits.MaxTokens; max > 0 && cur.Usage.PromptTokens+cur.Usage.CompletionTokens >= max {
			r.end(ctx, api.StatusExit, api.DetailUsageLimitExceeded, fmt.Sprintf("The session used its %d tokens (limits.max_tokens).", max))
			return
		}
		seen := conv.lastSeen
		resp, err := s.opts.LLM.Complete(ctx, llm.Request{
			Model: sess.Spec.Agent.Model, System: system, Messages: conv.request(), Tools: tools,
			Temperature: sess.Spec.Agent.Temperature, TopP: sess.Spec.Agent.TopP, MaxTokens: sess.Spec.Agent.MaxOutputTokens,
		})
		if err != nil {
			var le *llm.Error
			if errors.As(err, &le) && ctx.Err() == nil {
				r.end(ctx, api.StatusError, api.DetailError, "The model provider failed: "+le.Message)
				return
			}
			r.fail(ctx, err)
			return
		}
		if err := r.retry(ctx, "record answer", func() error { return r.recordAnswer(ctx, conv, resp, seen) }); err != nil {
			r.fail(ctx, err)
			return
		}
		if len(resp.Message.ToolCalls) == 0 && (resp.StopReason == "length" || resp.StopReason == "max_tokens") {
			// Cut off by the output limit: not an answer; let it go on.
			note := api.Event{Type: api.EventMessage, Role: api.RoleUser, Time: s.now().UnixMilli(),
				Text: "[outpost] Your answer was cut off by the output token limit. Continue, more briefly."}
			if err := r.retry(ctx, "record note", func() error { return r.appendEvents(ctx, note) }); err != nil {
				r.fail(ctx, err)
				return
			}
		}
	}
}

// recordAnswer writes the model's answer, its usage and the calls it asks
// for in one transaction. Calls whose arguments are not valid, or of tools
// that do not exist, get their error result at once: the model reads it
// and can correct itself. The calls keep their arguments as the model wrote
// them, to be sent to the remote; the answer's text and tool calls on the
// transcript, which is also what the model reads back, have secret values
// redacted.
func (r *runner) recordAnswer(ctx context.Context, conv *conversation, resp llm.Response, seen int64) error {
	now := r.s.now()
	red := r.secrets
	msg := api.Event{Type: api.EventMessage, Role: api.RoleAssistant, Text: red.String(resp.Message.Text), Time: now.UnixMilli(), Seen: seen,
		Usage: &api.Usage{PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens, ModelCalls: 1}}
	var calls []store.Call
	var after []api.Event
	seq := conv.lastCall
	for _, tc := range resp.Message.ToolCalls {
		if tc.Name == "" {
			tc.Name = "unnamed_tool" // an empty name would be refused when replayed
		}
		seq++
		msg.ToolCalls = append(msg.ToolCalls, api.ToolCallRef{ID: tc.ID, Tool: tc.Name, Arguments: string(red.JSON(tc.Arguments)), CallSeq: seq})
		problem := red.String(toolCallProblem(tc))
		args := json.RawMessage(tc.Arguments)
		if !json.Valid(args) {
			args = nil
		}
		call := store.Call{SessionID: r.sessionID, Seq: seq, Tool: tc.Name, Args: args, CreatedAt: now}
		after = append(after, api.Event{Type: api.EventCall, Time: now.UnixMilli(), CallSeq: seq, Tool: tc.Name, Args: red.JSON(args)})
		if problem != "" {
			ok := false
			call.Done, call.Error, call.DoneAt = true, problem, &now
			after = append(after, api.Event{Type: api.EventResult, Time: now.UnixMilli(), CallSeq: seq, Tool: tc.Name, OK: &ok, Error: problem})
		}
		calls = append(calls, call)
	}
	m, err := r.s.store.UpdateSession(ctx, r.sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if api.IsFinal(sess.Status) {
			return store.Mutation{}, errSessionEnded
		}
		sess.Usage.PromptTokens += resp.Usage.PromptTokens
		sess.Usage.CompletionTokens += resp.Usage.CompletionTokens
		sess.Usage.ModelCalls++
		sess.UpdatedAt = now
		return store.Mutation{Session: &sess, Calls: calls, Events: append([]api.Event{msg}, after...)}, nil
	})
	if err != nil {
		return fmt.Errorf("record model answer: %w", err)
	}
	r.s.committed(r.sessionID, m)
	return nil
}

// toolCallProblem says why a model's tool call cannot run, or "".
func toolCallProblem(tc llm.ToolCall) string {
	args, ok := api.NewToolArgs(tc.Name)
	if !ok {
		return fmt.Sprintf("There is no tool %q; the tools are %s.", tc.Name, strings.Join(api.ToolNames(), ", "))
	}
	raw := tc.Arguments
	if len(strings.TrimSpace(string(raw))) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(args); err != nil {
		if !json.Valid(raw) {
			return fmt.Sprintf("The arguments of %s are not valid JSON (%v). Send one JSON object matching the tool's schema.", tc.Name, err)
		}
		return fmt.Sprintf("The arguments of %s are not valid: %v. Send a JSON object matching the tool's schema.", tc.Name, err)
	}
	if dec.More() {
		return fmt.Sprintf("The arguments of %s are not valid: data after the JSON object. Send one JSON object.", tc.Name)
	}
	return ""
}

// runPending executes the calls of the last answer that have no result.
func (r *runner) runPending(ctx context.Context, conv *conversation, done map[int64]store.Call) error {
	var calls []store.Call
	if err := r.retry(ctx, "load calls", func() (err error) {
		calls, err = r.s.store.ListCalls(ctx, r.sessionID)
		return err
	}); err != nil {
		return err
	}
	for _, c := range calls {
		if _, ok := conv.pending[c.Seq]; !ok || c.Done {
			continue
		}
		if _, _, err := r.execute(ctx, c.Seq, step{tool: c.Tool, args: c.Args}, nil); err != nil {
			return err
		}
	}
	return r.catchUp(ctx, conv)
}

// waitForUser parks the session as waiting_for_user until a message comes
// or the idle limit passes.
func (r *runner) waitForUser(ctx context.Context, conv *conversation, sess store.Session) error {
	idle := defaultIdle
	if sess.Spec.Limits.IdleS > 0 {
		idle = time.Duration(sess.Spec.Limits.IdleS) * time.Second
	}
	if err := r.retry(ctx, "set detail", func() error {
		return r.setDetail(ctx, api.DetailWaitingForUser, "Waiting for a message from the user.")
	}); err != nil {
		return err
	}
	deadline := time.NewTimer(idle)
	defer deadline.Stop()
	for {
		wake := r.s.userMessages.wait()
		if err := r.retry(ctx, "read transcript", func() error { return r.catchUp(ctx, conv) }); err != nil {
			return err
		}
		if len(conv.inbox) > 0 {
			return r.retry(ctx, "set detail", func() error {
				return r.setDetail(ctx, api.DetailWorking, "Working on the user's message.")
			})
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			// A message may have come with the deadline: finish reads once more.
			ended, err := r.finish(ctx, conv, api.StatusExit, api.DetailInactivity, fmt.Sprintf("No message from the user for %s (limits.idle_s).", idle))
			if err != nil {
				return err
			}
			if !ended {
				continue
			}
			return errSessionEnded
		case <-wake:
		}
	}
}

// messageLock returns the lock that orders recording a user message of the
// session against ending the session because its model is done.
func (s *Server) messageLock(sessionID string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sessionID))
	return &s.messageLocks[h.Sum32()%uint32(len(s.messageLocks))]
}

// finish ends the session, unless a user message came that conv has not
// taken in yet; it reports whether the session ended. It reads the
// transcript and ends under the session's message lock, which sendMessage
// holds while it records a message: a message is either read here (and the
// model gets another turn) or refused because the session is over. None is
// accepted and then left unanswered.
func (r *runner) finish(ctx context.Context, conv *conversation, status, detail, reason string) (bool, error) {
	mu := r.s.messageLock(r.sessionID)
	mu.Lock()
	if err := r.retry(ctx, "read transcript", func() error { return r.catchUp(ctx, conv) }); err != nil {
		mu.Unlock()
		return false, err
	}
	if len(conv.inbox) > 0 {
		mu.Unlock()
		return false, nil
	}
	after := func() {}
	_ = r.retry(context.WithoutCancel(r.s.runCtx), "end session", func() error {
		var err error
		after, err = r.s.commitEnd(context.WithoutCancel(ctx), r.sessionID, status, detail, reason)
		return err
	})
	// Messages wait only for the transition, not for the remote to hear
	// of it.
	mu.Unlock()
	after()
	return true, nil
}

// setDetail changes a running session's status detail.
func (r *runner) setDetail(ctx context.Context, detail, reason string) error {
	now := r.s.now()
	m, err := r.s.store.UpdateSession(ctx, r.sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if api.IsFinal(sess.Status) {
			return store.Mutation{}, errSessionEnded
		}
		sess.StatusDetail, sess.Reason, sess.UpdatedAt = detail, reason, now
		return store.Mutation{Session: &sess, Events: []api.Event{statusEvent(sess, now)}}, nil
	})
	if err != nil {
		return err
	}
	r.s.committed(r.sessionID, m)
	return nil
}

// appendEvents writes events to the transcript and publishes them.
func (r *runner) appendEvents(ctx context.Context, evs ...api.Event) error {
	if err := r.s.store.AppendEvents(ctx, r.sessionID, evs); err != nil {
		return err
	}
	r.s.topics.publish(r.sessionID, evs...)
	return nil
}
