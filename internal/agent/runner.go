package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/backoff"
	"github.com/outpost-sh/outpost/internal/redact"
	"github.com/outpost-sh/outpost/internal/steptrace"
	"github.com/outpost-sh/outpost/internal/store"
)

// runner drives one session's agent: it decides the tool calls, sends each
// to whichever remote is connected, and records results. It outlives
// remote reconnects and machine changes; it ends with the session or the
// server.
type runner struct {
	l         *Loop
	sessionID string
	cancel    context.CancelFunc
	results   chan resultMsg
	external  chan externalReq // calls of an outside agent
	// externalOutpost is the outpost of an external session once its
	// runner takes calls ("" before, and for other kinds). Guarded by
	// l.mu.
	externalOutpost string
	done            chan struct{} // closed when run has returned
	// early holds results that arrived before their call was awaited
	// (a remote resending after a server restart). Owned by run.
	early map[int64]resultMsg
	// secrets redacts the session's secret values from what the runner
	// writes on the transcript; the remote still gets calls as they are.
	// Set by run before the first call.
	secrets *redact.Set
	// conv is an llm session's conversation, which takes the events of the
	// runner's transactions; nil for other kinds. sub follows the session's
	// committed events for it. Both owned by run.
	conv *conversation
	sub  Subscription
	// A script session ends in the transaction of its last call's result,
	// one commit less per session: finalSeq is that call (0: none, other kinds),
	// finalEnd gives the end its result makes, and endedHere is set once
	// that transaction ended the session. Owned by run.
	finalSeq    int64
	finalEnd    func(c store.Call) (status, detail, reason string)
	endedHere   bool
	scriptSteps int // len(agent.steps)
	// model is an llm session's model ("": the server's default), which
	// prices its calls. Set by run.
	model string
	// recorded is the session as the transaction that recorded a call
	// (record's, or the previous result's) read it, locked, with spec, for
	// the gate of that call (recordedSeq), which runs next: no other
	// writer touches a call's approval before its gate holds it, so the
	// gate need not read the session again. spec is the session's spec
	// as run loaded it (a transaction's read leaves it out: it never
	// changes). Owned by run.
	recorded    *store.Session
	recordedSeq int64
	spec        api.SessionSpec
}

// resultMsg is a result frame and the connection it came on.
type resultMsg struct {
	conn  Conn
	frame api.Frame
	// events are written before the result in its transaction: a call the
	// runner refused says why (an approval rule's refusal).
	events []api.Event
	// output are the output events the gateway had not written when the
	// result came (the call's last, and any other call's since the last
	// flush): the result's transaction writes them first. A result the
	// runner does not record still has its output written (keepOutput).
	output []api.Event
}

// step is one planned tool call.
type step struct {
	tool string
	args json.RawMessage
	// stop ends the session at once when the call fails: a repo's clone,
	// and a script step unless stop_on_error is false or the step has
	// continue_on_error.
	stop bool
	// tolerated is a script step whose failure does not fail the session
	// (continue_on_error).
	tolerated bool
	// script is the step's number in agent.steps, from 1; 0 for a clone.
	script int
	// setup is a clone of the session's repos, which its creator asked
	// for: approval rules, which govern the agent's calls, pass it.
	setup bool
}

// storeBackoff spaces the retries of a store operation: the store's
// failures are usually brief (a busy database).
var storeBackoff = backoff.Policy{Base: 50 * time.Millisecond, Max: 5 * time.Second}

// retry runs op until it succeeds or ctx ends, backing off between tries.
func (r *runner) retry(ctx context.Context, what string, op func() error) error {
	for n := 1; ; n++ {
		err := op()
		if err == nil || errors.Is(err, errSessionEnded) || ctx.Err() != nil {
			return err
		}
		delay := storeBackoff.Delay(n)
		r.l.log.Warn("session runner: retrying", "session", r.sessionID, "op", what, "err", err, "in", delay)
		if err := backoff.Sleep(ctx, r.l.clock, delay); err != nil {
			return err
		}
	}
}

// end gives the session its final status, retrying on store failures.
func (r *runner) end(ctx context.Context, status, detail, reason string) {
	reason = r.secrets.String(reason)
	after := func() {}
	_ = r.retry(r.l.base(), "end session", func() (err error) {
		after, err = r.l.opts.Ender.End(context.WithoutCancel(ctx), r.sessionID, status, detail, reason)
		return err
	})
	after()
}

// committed publishes what a transaction of the runner wrote and hands its
// events and calls to the conversation, if any.
func (r *runner) committed(m store.Mutation) {
	r.l.opts.Feed.Publish(r.sessionID, m)
	if r.conv != nil {
		r.conv.takeCalls(m.Calls)
		r.conv.take(m.Events...)
	}
}

// plan lists the session's tool calls: a clone of each repo, then the
// script's steps. Call sequence numbers are plan positions from 1.
func plan(sess store.Session) []step {
	var steps []step
	for _, r := range sess.Spec.Repos {
		args, _ := json.Marshal(api.GitCloneArgs{URL: r.URL, Name: r.Name, Ref: r.Ref})
		steps = append(steps, step{tool: api.ToolGitClone, args: args, stop: true, setup: true})
	}
	stops := sess.Spec.Agent.StopsOnError()
	for i, st := range sess.Spec.Agent.Steps {
		steps = append(steps, step{tool: st.Tool, args: st.Args, stop: stops && !st.ContinueOnError,
			tolerated: st.ContinueOnError, script: i + 1})
	}
	return steps
}

func (r *runner) run(ctx context.Context) {
	steptrace.Mark("server.runner", r.sessionID)
	st := r.l.opts.Store
	var sess store.Session
	if err := r.retry(ctx, "load session", func() (err error) {
		sess, err = st.GetSession(ctx, r.sessionID)
		return err
	}); err != nil || api.IsFinal(sess.Status) {
		return
	}
	r.secrets = redact.NewSet(sess.Secrets)
	r.spec = sess.Spec
	if max := sess.Spec.Limits.MaxDurationS; max > 0 && sess.StartedAt != nil {
		var cancel context.CancelFunc
		ctx, cancel = clockwork.WithDeadline(ctx, r.l.clock, sess.StartedAt.Add(time.Duration(max)*time.Second))
		defer cancel()
	}
	var calls []store.Call
	if err := r.retry(ctx, "load calls", func() (err error) {
		calls, err = st.ListCalls(ctx, r.sessionID)
		return err
	}); err != nil {
		r.fail(ctx, err)
		return
	}
	done := map[int64]store.Call{}
	for _, c := range calls {
		done[c.Seq] = c
	}
	steps := plan(sess)
	if k := sess.Spec.Agent.Kind; k != api.AgentLLM && k != api.AgentExternal && len(steps) > 0 {
		r.finalSeq = int64(len(steps))
	}
	r.scriptSteps = len(sess.Spec.Agent.Steps)
	out, ok := r.runSteps(ctx, steps, done)
	if !ok {
		return
	}
	switch sess.Spec.Agent.Kind {
	case api.AgentLLM:
		r.runLLM(ctx, sess, calls, done)
		return
	case api.AgentExternal:
		r.runExternal(ctx, sess, calls, done)
		return
	}
	if len(out.failed) > 0 {
		r.end(ctx, api.StatusError, api.DetailError, failedStepsText(out.failed, len(sess.Spec.Agent.Steps)))
		return
	}
	r.end(ctx, api.StatusExit, api.DetailFinished, finishedText(len(sess.Spec.Agent.Steps), out.tolerated))
}

// fail ends the session when the runner cannot go on, unless the runner
// stops because the session ended or the server is stopping.
func (r *runner) fail(ctx context.Context, err error) {
	switch {
	case errors.Is(err, errSessionEnded):
		return
	case errors.Is(err, context.DeadlineExceeded) && !r.l.stopped():
		sess, gerr := r.l.opts.Store.GetSession(context.WithoutCancel(ctx), r.sessionID)
		if gerr == nil && !api.IsFinal(sess.Status) {
			r.end(ctx, api.StatusExit, api.DetailUsageLimitExceeded,
				fmt.Sprintf("The session reached its limit of %d s (limits.max_duration_s).", sess.Spec.Limits.MaxDurationS))
		}
		return
	case ctx.Err() != nil:
		return
	}
	r.l.log.Error("session runner failed", "session", r.sessionID, "err", err)
	r.end(ctx, api.StatusError, api.DetailError, "The control plane failed to run the session; see its log.")
}

// record writes a call and its transcript event before it is sent. The
// call keeps its arguments as they are, to be sent (and, on a resume, sent
// again); the event shows them with secret values redacted.
func (r *runner) record(ctx context.Context, seq int64, st step) (eventSeq int64, err error) {
	now := r.l.clock.Now()
	var read store.Session
	m, err := r.l.opts.Store.UpdateSession(ctx, r.sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if api.IsFinal(sess.Status) {
			return store.Mutation{}, errSessionEnded
		}
		read = sess
		read.Spec = r.spec
		m := store.Mutation{
			Calls:  []store.Call{{SessionID: r.sessionID, Seq: seq, Tool: st.tool, Args: st.args, CreatedAt: now}},
			Events: []api.Event{{Type: api.EventCall, Time: now.UnixMilli(), CallSeq: seq, Tool: st.tool, Args: r.secrets.JSON(st.args)}},
		}
		if st.tool == api.ToolNetworkAccessRequest {
			if ev, ok := networkRequestEvent(now, seq, st.args, r.secrets); ok {
				m.Events = append(m.Events, ev)
			}
		}
		return m, nil
	})
	if err != nil {
		return 0, fmt.Errorf("record call %d: %w", seq, err)
	}
	steptrace.Mark("server.call_recorded", r.sessionID)
	r.recorded, r.recordedSeq = &read, seq
	r.committed(m)
	return m.Events[0].Seq, nil
}

// execute sends call seq to the connected remote and waits for its result,
// resending on each new connection until a result arrives. The remote's
// journal makes a resend harmless: a call it ran already is answered from
// the journal, one still running is not started again.
func (r *runner) execute(ctx context.Context, seq int64, st step, next *step) (store.Call, bool, error) {
	if api.IsServerTool(st.tool) {
		return r.awaitAnswer(ctx, seq, st)
	}
	if !st.setup {
		if c, recordedNext, stop, err := r.gate(ctx, seq, st, next); stop || err != nil {
			return c, recordedNext, err
		}
	}
	for {
		if msg, ok := r.early[seq]; ok {
			delete(r.early, seq)
			return r.complete(ctx, seq, st, msg, next)
		}
		conn, err := r.waitConn(ctx)
		if err != nil {
			return store.Call{}, false, err
		}
		if err := ctx.Err(); err != nil {
			return store.Call{}, false, err
		}
		// A failed send breaks the connection; the wait below sees it end
		// (and keeps taking results meanwhile) and resends on the next one.
		steptrace.Mark("server.call_send", r.sessionID)
		_ = conn.Call(ctx, seq, st.tool, st.args)
		steptrace.Mark("server.call_sent", r.sessionID)
	wait:
		for {
			select {
			case <-ctx.Done():
				return store.Call{}, false, ctx.Err()
			case <-conn.Done():
				break wait
			case ev := <-r.feedEvents():
				r.conv.take(ev)
			case <-r.feedLagged():
				r.dropFeed(r.conv)
			case msg := <-r.results:
				switch {
				case msg.frame.Seq == seq:
					return r.complete(ctx, seq, st, msg, next)
				case msg.frame.Seq > seq:
					r.stash(msg)
				default:
					if err := r.lateResult(ctx, msg); err != nil {
						return store.Call{}, false, err
					}
				}
			}
		}
	}
}

// waitConn returns the session's live connection, waiting for one.
func (r *runner) waitConn(ctx context.Context) (Conn, error) {
	for {
		c, wake := r.l.opts.Gateway.Conn(r.sessionID)
		if c != nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wake:
		}
	}
}

// complete stores a call's result durably, with the next call's record
// when the script goes on, then acknowledges the result to the remote,
// which may then forget it. It reports whether next was recorded.
func (r *runner) complete(ctx context.Context, seq int64, st step, msg resultMsg, next *step) (store.Call, bool, error) {
	now := r.l.clock.Now()
	f := msg.frame
	if hook := r.l.opts.Interrupted; hook != nil {
		if why, ok := hook(r.sessionID, seq); ok {
			f.OK, f.Error = false, why
		}
	}
	call := store.Call{SessionID: r.sessionID, Seq: seq, Tool: st.tool, Args: st.args, Done: true, OK: f.OK, Value: f.Value, Error: f.Error, CreatedAt: now, DoneAt: &now}
	ev := api.Event{Type: api.EventResult, Time: now.UnixMilli(), CallSeq: seq, Tool: st.tool, OK: &call.OK, Value: f.Value, Error: f.Error}
	if st.tool == api.ToolExec {
		var res api.ExecResult
		if json.Unmarshal(f.Value, &res) == nil {
			code := res.ExitCode
			ev.ExitCode = &code
		}
	}
	recordNext := next != nil && (f.OK || !st.stop)
	// The last step's result ends a script session in its own commit.
	var endStatus, endDetail, endReason string
	ending := seq == r.finalSeq && r.finalEnd != nil && next == nil
	if ending {
		endStatus, endDetail, endReason = r.finalEnd(call)
		endReason = r.secrets.String(endReason)
	}
	var m store.Mutation
	var read store.Session
	err := r.retry(ctx, "record result", func() (err error) {
		m, err = r.l.opts.Store.UpdateSession(ctx, r.sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
			if api.IsFinal(sess.Status) {
				return store.Mutation{}, errSessionEnded
			}
			read = sess
			read.Spec = r.spec
			sess.LastSeq = max(sess.LastSeq, seq)
			sess.UpdatedAt = now
			evs := make([]api.Event, 0, len(msg.output)+len(msg.events)+2)
			evs = append(append(append(evs, msg.output...), msg.events...), ev)
			m := store.Mutation{Session: &sess, Calls: []store.Call{call}, Events: evs}
			if recordNext {
				m.Calls = append(m.Calls, store.Call{SessionID: r.sessionID, Seq: seq + 1, Tool: next.tool, Args: next.args, CreatedAt: now})
				m.Events = append(m.Events, api.Event{Type: api.EventCall, Time: now.UnixMilli(), CallSeq: seq + 1, Tool: next.tool, Args: r.secrets.JSON(next.args)})
			}
			if ending {
				r.l.opts.Ender.EndIn(&sess, e, &m, now, endStatus, endDetail, endReason)
			}
			return m, nil
		})
		return err
	})
	if errors.Is(err, errSessionEnded) {
		// Nobody needs the result any more; let the remote forget it.
		r.keepOutput(msg)
		_ = msg.conn.Ack(ctx, seq)
		return store.Call{}, false, err
	}
	if err != nil {
		r.keepOutput(msg)
		return store.Call{}, false, fmt.Errorf("record result of call %d: %w", seq, err)
	}
	if hook := r.l.opts.OnToolCall; hook != nil {
		hook(st.tool, f.OK)
	}
	if recordNext {
		r.recorded, r.recordedSeq = &read, seq+1 // for the next call's gate
	}
	r.committed(m)
	_ = msg.conn.Ack(ctx, seq)
	if ending {
		r.endedHere = true
		r.l.opts.Ender.Ended(r.sessionID, endStatus, endDetail, endReason)()
	}
	return call, recordNext, nil
}

// runSteps runs planned calls in order, skipping those with a stored
// result. It ends the session at the first failed call that stops it, and
// returns the other failures, and false when the session ended or the
// runner must stop.
func (r *runner) runSteps(ctx context.Context, steps []step, done map[int64]store.Call) (out stepOutcome, goOn bool) {
	for i, st := range steps {
		seq := int64(i + 1)
		c, ok := done[seq]
		if !ok || !c.Done {
			if !ok {
				if err := r.retry(ctx, "record call", func() error { _, err := r.record(ctx, seq, st); return err }); err != nil {
					r.fail(ctx, err)
					return out, false
				}
			}
			// The next call is recorded in the same transaction as this
			// result: one commit per call.
			var next *step
			if i+1 < len(steps) {
				if _, known := done[seq+1]; !known {
					next = &steps[i+1]
				}
			}
			if seq == r.finalSeq {
				r.finalEnd = func(c store.Call) (string, string, string) { return r.endAfter(out, st, c, seq) }
			}
			var err error
			var recordedNext bool
			if c, recordedNext, err = r.execute(ctx, seq, st, next); err != nil {
				r.fail(ctx, err)
				return out, false
			}
			if r.endedHere {
				return out, false
			}
			done[seq] = c // later calls are numbered after it
			if recordedNext {
				done[seq+1] = store.Call{Seq: seq + 1}
			}
		}
		if c.OK {
			continue
		}
		switch {
		case st.stop:
			r.end(ctx, api.StatusError, api.DetailError, stoppedText(st, c, seq, steps[i+1:]))
			return out, false
		case st.tolerated:
			out.tolerated++
		default:
			out.failed = append(out.failed, stepFailure{st, c})
		}
	}
	return out, true
}

// endAfter is the end of a script session whose last step st (call seq)
// came back as c, out being what the steps before it left: the end runSteps
// and run give it otherwise.
func (r *runner) endAfter(out stepOutcome, st step, c store.Call, seq int64) (status, detail, reason string) {
	switch {
	case c.OK:
	case st.stop:
		return api.StatusError, api.DetailError, stoppedText(st, c, seq, nil)
	case st.tolerated:
		out.tolerated++
	default:
		out.failed = append(out.failed[:len(out.failed):len(out.failed)], stepFailure{st, c})
	}
	if len(out.failed) > 0 {
		return api.StatusError, api.DetailError, failedStepsText(out.failed, r.scriptSteps)
	}
	return api.StatusExit, api.DetailFinished, finishedText(r.scriptSteps, out.tolerated)
}

// lateResult handles a result for a call the runner is not waiting for (a
// remote resending after a restart): it is stored if the store lacks it,
// then acknowledged.
func (r *runner) lateResult(ctx context.Context, msg resultMsg) error {
	// Its output is written first, in the order it came, whatever
	// becomes of the result.
	r.keepOutput(msg)
	msg.output = nil
	calls, err := r.l.opts.Store.ListCalls(ctx, r.sessionID)
	if err != nil {
		return err
	}
	for _, c := range calls {
		if c.Seq != msg.frame.Seq {
			continue
		}
		// A call the control plane answers is never the remote's to
		// complete, whatever it sends.
		if !c.Done && !api.IsServerTool(c.Tool) {
			_, _, err := r.complete(ctx, c.Seq, step{tool: c.Tool, args: c.Args}, msg, nil)
			return err
		}
		break
	}
	_ = msg.conn.Ack(ctx, msg.frame.Seq)
	return nil
}

// stash keeps a result that came before its call was awaited (a remote
// resending after a restart). Its output is written now, in the order it
// came, rather than when (or whether) the call is awaited: a later
// result of the same seq replaces this one, not its output.
func (r *runner) stash(msg resultMsg) {
	r.keepOutput(msg)
	msg.output = nil
	r.early[msg.frame.Seq] = msg
}

// keepOutputTimeout bounds keepOutput's write, which may run while the
// runner stops.
const keepOutputTimeout = 10 * time.Second

// keepOutput writes the output that came with a result the runner does
// not record in the result's transaction (the session ended, the call was
// answered already, the result is stashed or late): it belongs on the
// transcript whatever becomes of the result, and may hold other calls'
// output too.
func (r *runner) keepOutput(msg resultMsg) {
	if len(msg.output) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.l.base()), keepOutputTimeout)
	defer cancel()
	if err := r.l.opts.Store.AppendEvents(ctx, r.sessionID, msg.output); err != nil {
		r.l.log.Warn("record output", "session", r.sessionID, "err", err)
		return
	}
	r.committed(store.Mutation{Events: msg.output})
}

// FirstCall is the first call of sess's plan (a repository's clone or
// the script's first step) as the runner would record it, for the commit
// of the remote's first hello to record with the arrival
// (lifecycle.Arrival.FirstCall): the runner then finds it recorded and
// sends it at once, rather than after a commit of its own. sess is the
// whole session, with its spec and secrets. false when the plan has no
// step, or its first is one the control plane answers itself.
func FirstCall(sess store.Session, now time.Time) (store.Call, api.Event, bool) {
	steps := plan(sess)
	if len(steps) == 0 || api.IsServerTool(steps[0].tool) {
		return store.Call{}, api.Event{}, false
	}
	st := steps[0]
	return store.Call{SessionID: sess.ID, Seq: 1, Tool: st.tool, Args: st.args, CreatedAt: now},
		api.Event{Type: api.EventCall, Time: now.UnixMilli(), CallSeq: 1, Tool: st.tool, Args: redact.NewSet(sess.Secrets).JSON(st.args)}, true
}
