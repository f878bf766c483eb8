package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/budget"
	"github.com/outpost-sh/outpost/internal/llm"
	"github.com/outpost-sh/outpost/internal/netpolicy"
	"github.com/outpost-sh/outpost/internal/store"
)

// Defaults of an llm agent.
const (
	defaultMaxSteps = 50
	defaultIdle     = time.Hour
)

// systemPrompt tells the model its task, machine, workspace, tools and rules.
func systemPrompt(sess store.Session) string {
	var b strings.Builder
	b.WriteString("You are an agent working on a machine of the outpost " + sess.Spec.Outpost + ".\n")
	if c := sess.Capabilities; c != nil {
		raw, _ := json.Marshal(c)
		b.WriteString(describeMachine(raw))
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

// machineFacts are the capabilities describeMachine reads. GPUs, the CPU
// model, the OS release and the free disk are reported only by workers
// that know them: they are read from the capabilities' wire form, so a
// machine (or a build) that has none of them is described without them.
type machineFacts struct {
	OS            string `json:"os"`
	OSVersion     string `json:"os_version"`
	Arch          string `json:"arch"`
	CPUs          int    `json:"cpus"`
	CPUModel      string `json:"cpu_model"`
	MemoryBytes   int64  `json:"memory_bytes"`
	DiskFreeBytes int64  `json:"disk_free_bytes"`
	Git           string `json:"git"`
	GPUs          []struct {
		Model       string `json:"model"`
		MemoryBytes int64  `json:"memory_bytes"`
	} `json:"gpus"`
}

// describeMachine is the system prompt's line about the machine whose
// capabilities (api.Capabilities as JSON) are raw: the model plans builds
// and tests by it (how many jobs, whether a GPU can train).
func describeMachine(raw []byte) string {
	var m machineFacts
	if err := json.Unmarshal(raw, &m); err != nil || m.OS == "" {
		return ""
	}
	os := m.OS + "/" + m.Arch
	if m.OSVersion != "" {
		os += " (" + m.OSVersion + ")"
	}
	parts := []string{os}
	cpus := fmt.Sprintf("%d CPUs", m.CPUs)
	if m.CPUModel != "" {
		cpus += " (" + m.CPUModel + ")"
	}
	parts = append(parts, cpus)
	if m.MemoryBytes > 0 {
		parts = append(parts, gib(m.MemoryBytes)+" of memory")
	}
	if m.DiskFreeBytes > 0 {
		parts = append(parts, gib(m.DiskFreeBytes)+" free on the workspace's disk")
	}
	for _, g := range m.GPUs {
		gpu := "GPU " + g.Model
		if g.MemoryBytes > 0 {
			gpu += " with " + gib(g.MemoryBytes) + " of memory"
		}
		parts = append(parts, gpu)
	}
	if m.Git != "" {
		parts = append(parts, m.Git)
	}
	return "The machine: " + strings.Join(parts, ", ") + ".\n"
}

// gib is n bytes in GiB, as people size machines.
func gib(n int64) string {
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// modelTools are the tools offered to models: the remote's, with schemas
// generated from the types the remote decodes. The computer tool is
// offered only when the machine gives the session a desktop.
//
// The computer tool goes with its schema; a request also describes its
// display (llm.Request.Computer), so that a provider with a native
// computer-use tool type (Anthropic's) offers that instead. Either way its
// screenshots reach the model as images (splitImages).
func modelTools(caps *api.Capabilities) []llm.Tool {
	var tools []llm.Tool
	for _, t := range api.Tools() {
		if t.Name == api.ToolComputer && (caps == nil || !caps.Desktop) {
			continue
		}
		tools = append(tools, llm.Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	return tools
}

// runLLM drives an llm session: the model plans, the remote executes.
// calls are the session's calls as run found them.
func (r *runner) runLLM(ctx context.Context, sess store.Session, calls []store.Call, done map[int64]store.Call) {
	if r.l.opts.LLM == nil {
		r.end(ctx, api.StatusError, api.DetailError, "This server has no model provider configured (OUTPOST_LLM_PROVIDER).")
		return
	}
	conv := newConversation(r.l.opts.ToolResultLimit)
	conv.takeCalls(calls)
	for seq, c := range done { // the clones come first
		if c.Done {
			conv.calls[seq] = c
		}
		conv.lastCall = max(conv.lastCall, seq)
	}
	r.conv = conv
	r.model = sess.Spec.Agent.Model
	defer func() {
		if r.sub != nil {
			r.sub.Close()
		}
	}()
	// The first sync reads the whole transcript: the recovery path.
	if err := r.retry(ctx, "load transcript", func() error { return r.sync(ctx, conv) }); err != nil {
		r.fail(ctx, err)
		return
	}
	maxSteps := sess.Spec.Agent.MaxSteps
	if maxSteps <= 0 {
		maxSteps = defaultMaxSteps
	}
	tools := modelTools(sess.Capabilities)
	// The model sees what the transcript shows: never a secret's value.
	system := r.secrets.String(systemPrompt(sess))
	// cur is the session as the runner's last transaction left it (its
	// usage); only the runner changes what it reads of it.
	cur := sess
	for {
		if err := r.retry(ctx, "read transcript", func() error { return r.sync(ctx, conv) }); err != nil {
			r.fail(ctx, err)
			return
		}
		// A final answer finishes the session even past a limit: the work
		// is done. Anything else stops there.
		if !conv.lastAssistantDone() || len(conv.pending) > 0 {
			// cur lacks the spec, which write transactions do not read.
			now := cur
			now.Spec, now.Secrets = sess.Spec, sess.Secrets
			if rch, ok := r.budgetReached(ctx, now, len(conv.pending) > 0); ok {
				r.stopAtLimit(ctx, now, rch)
				return
			}
		}
		// Calls of the last answer still without a result (a restart, a
		// new machine) run first, in order.
		if len(conv.pending) > 0 {
			if err := r.runPending(ctx, conv); err != nil {
				r.fail(ctx, err)
				return
			}
			continue
		}
		if conv.lastAssistantDone() {
			if !sess.Spec.Agent.Interactive {
				if hook := r.l.opts.BeforeFinish; hook != nil {
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
			if err := r.waitForUser(ctx, conv, sess, &cur); err != nil {
				r.fail(ctx, err)
				return
			}
			continue
		}
		if conv.steps >= maxSteps {
			r.end(ctx, api.StatusExit, api.DetailUsageLimitExceeded, fmt.Sprintf("The agent reached its limit of %d model calls (agent.max_steps).", maxSteps))
			return
		}
		seen := conv.lastSeen
		req := llm.Request{
			Model: sess.Spec.Agent.Model, System: system, Messages: conv.request(), Tools: tools,
			Temperature: sess.Spec.Agent.Temperature, TopP: sess.Spec.Agent.TopP, MaxTokens: sess.Spec.Agent.MaxOutputTokens,
		}
		if slices.ContainsFunc(tools, func(t llm.Tool) bool { return t.Name == api.ToolComputer }) {
			req.Computer = conv.computerDisplay(sess.Spec.Desktop)
		}
		req.OnRetry = func(rt llm.Retry) { r.recordModelRetry(ctx, rt) }
		resp, err := r.l.opts.LLM.Complete(ctx, req)
		if err != nil {
			var le *llm.Error
			if errors.As(err, &le) && ctx.Err() == nil {
				r.end(ctx, api.StatusError, api.DetailError, "The model provider failed: "+le.Message)
				return
			}
			r.fail(ctx, err)
			return
		}
		if err := r.retry(ctx, "record answer", func() error { return r.recordAnswer(ctx, conv, resp, seen, &cur) }); err != nil {
			r.fail(ctx, err)
			return
		}
		if len(resp.Message.ToolCalls) == 0 && (resp.StopReason == "length" || resp.StopReason == "max_tokens") {
			// Cut off by the output limit: not an answer; let it go on.
			note := api.Event{Type: api.EventMessage, Role: api.RoleUser, Time: r.l.clock.Now().UnixMilli(),
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
//
// cur gets the session as the transaction left it.
func (r *runner) recordAnswer(ctx context.Context, conv *conversation, resp llm.Response, seen int64, cur *store.Session) error {
	now := r.l.clock.Now()
	red := r.secrets
	cost := r.l.opts.Prices.Cost(r.model, resp.Usage.PromptTokens, resp.Usage.CompletionTokens)
	msg := api.Event{Type: api.EventMessage, Role: api.RoleAssistant, Text: red.String(resp.Message.Text), Time: now.UnixMilli(), Seen: seen,
		Usage: &api.Usage{PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens, ModelCalls: 1,
			ToolCalls: int64(len(resp.Message.ToolCalls)), CostUSD: cost}}
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
		if problem == "" && tc.Name == api.ToolNetworkAccessRequest {
			if ev, ok := networkRequestEvent(now, seq, args, red); ok {
				after = append(after, ev)
			}
		}
		if problem != "" {
			ok := false
			call.Done, call.Error, call.DoneAt = true, problem, &now
			after = append(after, api.Event{Type: api.EventResult, Time: now.UnixMilli(), CallSeq: seq, Tool: tc.Name, OK: &ok, Error: problem})
		}
		calls = append(calls, call)
	}
	m, err := r.l.opts.Store.UpdateSession(ctx, r.sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if api.IsFinal(sess.Status) {
			return store.Mutation{}, errSessionEnded
		}
		sess.Usage.PromptTokens += resp.Usage.PromptTokens
		sess.Usage.CompletionTokens += resp.Usage.CompletionTokens
		sess.Usage.ModelCalls++
		sess.Usage.ToolCalls += int64(len(resp.Message.ToolCalls))
		sess.Usage.CostUSD += cost
		sess.UpdatedAt = now
		return store.Mutation{Session: &sess, Calls: calls, Events: append([]api.Event{msg}, after...)}, nil
	})
	if err != nil {
		return fmt.Errorf("record model answer: %w", err)
	}
	*cur = *m.Session
	r.committed(m)
	return nil
}

// recordModelRetry puts a retried model call on the transcript, so that
// a person following the session sees the provider's outage and how long
// the runner keeps trying. It is a note: when it cannot be written the
// retry goes on, logged.
func (r *runner) recordModelRetry(ctx context.Context, rt llm.Retry) {
	what := rt.Err.Message
	if rt.Err.StatusCode != 0 {
		what = fmt.Sprintf("HTTP %d: %s", rt.Err.StatusCode, what)
	}
	reason := fmt.Sprintf("The model provider failed (%s); trying again in %s (retry %d, retries go on for %s more).",
		what, rt.Delay.Round(time.Millisecond), rt.Attempt, rt.Left.Round(time.Second))
	ev := api.Event{Type: api.EventModelRetry, Time: r.l.clock.Now().UnixMilli(),
		Reason: r.secrets.String(reason), Error: r.secrets.String(rt.Err.Error())}
	if err := r.appendEvents(ctx, ev); err != nil && ctx.Err() == nil {
		r.l.log.Warn("cannot record a model call's retry", "session_id", r.sessionID, "err", err)
	}
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
	if tc.Name == api.ToolNetworkAccessRequest {
		if _, err := netpolicy.ParseRequest(raw); err != nil {
			return fmt.Sprintf("The arguments of %s are not valid: %v.", tc.Name, err)
		}
	}
	return ""
}

// runPending executes the calls of the last answer that have no result,
// in order.
func (r *runner) runPending(ctx context.Context, conv *conversation) error {
	seqs := make([]int64, 0, len(conv.pending))
	for seq := range conv.pending {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	for _, seq := range seqs {
		c, ok := conv.calls[seq]
		if !ok {
			// Not one the runner recorded or loaded: the store has it.
			if err := r.retry(ctx, "load calls", func() error {
				calls, err := r.l.opts.Store.ListCalls(ctx, r.sessionID)
				conv.takeCalls(calls)
				return err
			}); err != nil {
				return err
			}
			if c, ok = conv.calls[seq]; !ok {
				return fmt.Errorf("call %d of the model's answer is not in the store", seq)
			}
		}
		if c.Done {
			continue // its result is on the transcript; sync applies it
		}
		if _, _, err := r.execute(ctx, seq, step{tool: c.Tool, args: c.Args}, nil); err != nil {
			return err
		}
	}
	return r.sync(ctx, conv)
}

// waitForUser parks the session as waiting_for_user until a message comes
// or the idle limit passes.
func (r *runner) waitForUser(ctx context.Context, conv *conversation, sess store.Session, cur *store.Session) error {
	idle := defaultIdle
	if sess.Spec.Limits.IdleS > 0 {
		idle = time.Duration(sess.Spec.Limits.IdleS) * time.Second
	}
	if err := r.retry(ctx, "set detail", func() error {
		return r.setDetail(ctx, api.DetailWaitingForUser, "Waiting for a message from the user.", cur)
	}); err != nil {
		return err
	}
	deadline := r.l.clock.NewTimer(idle)
	defer deadline.Stop()
	for {
		wake := r.l.opts.Messages.Arrived()
		if err := r.retry(ctx, "read transcript", func() error { return r.sync(ctx, conv) }); err != nil {
			return err
		}
		if len(conv.inbox) > 0 {
			return r.retry(ctx, "set detail", func() error {
				return r.setDetail(ctx, api.DetailWorking, "Working on the user's message.", cur)
			})
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.Chan():
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
		case ev := <-r.feedEvents():
			conv.take(ev)
		case <-r.feedLagged():
			r.dropFeed(conv)
		}
	}
}

// finish ends the session, unless a user message came that conv has not
// taken in yet; it reports whether the session ended. It reads the
// transcript and ends under the session's message lock, which sendMessage
// holds while it records a message: a message is either read here (and the
// model gets another turn) or refused because the session is over. None is
// accepted and then left unanswered.
func (r *runner) finish(ctx context.Context, conv *conversation, status, detail, reason string) (bool, error) {
	var unlock func()
	if err := r.retry(ctx, "take the message lock", func() (err error) {
		unlock, err = r.l.opts.Messages.Lock(ctx, r.sessionID)
		return err
	}); err != nil {
		return false, err
	}
	// The store, not the feed: a message recorded just before the lock was
	// taken may not be published yet.
	r.drainFeed(conv)
	conv.applyAhead()
	if err := r.retry(ctx, "read transcript", func() error { return r.catchUp(ctx, conv) }); err != nil {
		unlock()
		return false, err
	}
	if len(conv.inbox) > 0 {
		unlock()
		return false, nil
	}
	after := func() {}
	_ = r.retry(r.l.base(), "end session", func() error {
		var err error
		after, err = r.l.opts.Ender.End(context.WithoutCancel(ctx), r.sessionID, status, detail, reason)
		return err
	})
	// Messages wait only for the transition, not for the remote to hear
	// of it.
	unlock()
	after()
	return true, nil
}

// setDetail changes a running session's status detail.
// cur gets the session as the transaction left it.
func (r *runner) setDetail(ctx context.Context, detail, reason string, cur *store.Session) error {
	now := r.l.clock.Now()
	m, err := r.l.opts.Store.UpdateSession(ctx, r.sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if api.IsFinal(sess.Status) {
			return store.Mutation{}, errSessionEnded
		}
		sess.StatusDetail, sess.Reason, sess.UpdatedAt = detail, reason, now
		return store.Mutation{Session: &sess, Events: []api.Event{statusEvent(sess, now)}}, nil
	})
	if err != nil {
		return err
	}
	*cur = *m.Session
	r.committed(m)
	return nil
}

// statusEvent records a session's current status on the transcript.
func statusEvent(sess store.Session, now time.Time) api.Event {
	return api.Event{Type: api.EventStatus, Time: now.UnixMilli(), Status: sess.Status, StatusDetail: sess.StatusDetail, Reason: sess.Reason}
}

// appendEvents writes events to the transcript and publishes them.
func (r *runner) appendEvents(ctx context.Context, evs ...api.Event) error {
	if err := r.l.opts.Store.AppendEvents(ctx, r.sessionID, evs); err != nil {
		return err
	}
	r.committed(store.Mutation{Events: evs})
	return nil
}

// budgetReached reports whether the session, as cur (spec included) has it, reached one of
// its limits or its outpost its monthly budget. pending says the last
// answer has calls still to run.
func (r *runner) budgetReached(ctx context.Context, cur store.Session, pending bool) (budget.Reached, bool) {
	if rch, ok := budget.Session(cur.Spec.Limits, cur.Usage, pending); ok {
		return rch, true
	}
	if check := r.l.opts.OutpostBudget; check != nil {
		return check(ctx, cur.OutpostID)
	}
	return budget.Reached{}, false
}

// stopAtLimit stops the session that reached rch: through the server's
// BudgetReached, which suspends or ends it, or by ending it.
func (r *runner) stopAtLimit(ctx context.Context, cur store.Session, rch budget.Reached) {
	if hook := r.l.opts.BudgetReached; hook != nil {
		hook(ctx, cur, rch)
		return
	}
	r.end(ctx, api.StatusExit, api.DetailUsageLimitExceeded, LimitReason(rch))
}

// LimitReason is the sentence a session stopped by rch reads.
func LimitReason(rch budget.Reached) string {
	return strings.ToUpper(rch.Reason[:1]) + rch.Reason[1:] + "."
}
