package agent

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// externalCall runs one call of an outside agent in the background and
// returns where its reply arrives.
func externalCall(h *harness, sessionID, tool, args string) <-chan api.ToolResult {
	replies := make(chan api.ToolResult, 1)
	go func() {
		res, err := h.loop.External(h.t.Context(), sessionID, tool, json.RawMessage(args))
		if err != nil {
			h.t.Errorf("call: %v", err)
		}
		replies <- res
	}()
	return replies
}

func expectReply(t *testing.T, replies <-chan api.ToolResult) api.ToolResult {
	t.Helper()
	select {
	case r := <-replies:
		return r
	case <-time.After(waitTimeout):
		t.Fatal("no result")
		return api.ToolResult{}
	}
}

// transcriptTypes lists the session's events as type:call seq, in order,
// and fails unless their seqs run without a gap.
func transcriptTypes(t *testing.T, h *harness, sessionID string) []api.Event {
	t.Helper()
	evs, err := h.store.Store.ListEvents(t.Context(), sessionID, 0, 1000)
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the transcript has a gap", i+1, ev.Seq)
		}
	}
	return evs
}

// TestOutputComesWithItsResult: the output the gateway still held when a
// call's result came is written in the result's transaction, before the
// result, and the outside agent's reply is made from what that
// transaction wrote: a call costs two transactions (the call's record and
// its result) and no read of the transcript or of the session.
func TestOutputComesWithItsResult(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	c := h.session("ses_out", api.SessionSpec{Agent: api.Agent{Kind: api.AgentExternal}})
	// The first call settles the runner (its start reads the session).
	first := externalCall(h, "ses_out", api.ToolExec, `{"command":"true"}`)
	h.answer(c, c.expectCall(t).Seq, true, `{"exit_code":0}`, "")
	expectReply(t, first)

	updates, appends, lists, gets := h.store.updates.Load(), h.store.appends.Load(), h.store.listEvents.Load(), h.store.getSessions.Load()
	replies := externalCall(h, "ses_out", api.ToolExec, `{"command":"make"}`)
	call := c.expectCall(t)
	if !h.answerWithOutput(c, call.Seq, true, `{"exit_code":2}`, h.outputEvent(call.Seq, "building\n"), h.outputEvent(call.Seq, "error: no rule\n")) {
		t.Fatal("the runner did not take the result")
	}
	if seq := c.expectAck(t); seq != call.Seq {
		t.Fatalf("ack of %d, want %d", seq, call.Seq)
	}
	res := expectReply(t, replies)
	if want := "building\nerror: no rule\nexit status 2"; res.Output != want || !res.OK {
		t.Fatalf("reply %+v, want output %q", res, want)
	}
	if n := h.store.updates.Load() - updates; n != 2 {
		t.Errorf("%d transactions for the call, want 2 (its record, its result with the output)", n)
	}
	if n := h.store.appends.Load() - appends; n != 0 {
		t.Errorf("the output took %d transactions of its own, want none", n)
	}
	if n := h.store.listEvents.Load() - lists; n != 0 {
		t.Errorf("the reply read the transcript %d times, want none", n)
	}
	if n := h.store.getSessions.Load() - gets; n != 0 {
		t.Errorf("the call read the session %d times, want none (its record read it)", n)
	}
	evs := transcriptTypes(t, h, "ses_out")
	tail := evs[len(evs)-4:]
	want := []string{api.EventCall, api.EventOutput, api.EventOutput, api.EventResult}
	for i, ev := range tail {
		if ev.Type != want[i] || ev.CallSeq != call.Seq {
			t.Fatalf("transcript ends %+v, want the call, its two outputs and its result", tail)
		}
	}
}

// TestOutputBeforeAndWithResult: output the gateway flushed while the call
// ran and output that came with the result both reach the reply, in order;
// the events between the call and the result that the runner did not
// write make it read the transcript once.
func TestOutputBeforeAndWithResult(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	c := h.session("ses_gap", api.SessionSpec{Agent: api.Agent{Kind: api.AgentExternal}})
	replies := externalCall(h, "ses_gap", api.ToolExec, `{"command":"make"}`)
	call := c.expectCall(t)
	h.output("ses_gap", call.Seq, "flushed\n")
	lists := h.store.listEvents.Load()
	if !h.answerWithOutput(c, call.Seq, true, `{"exit_code":0}`, h.outputEvent(call.Seq, "held\n")) {
		t.Fatal("the runner did not take the result")
	}
	c.expectAck(t)
	if res := expectReply(t, replies); res.Output != "flushed\nheld\nexit status 0" {
		t.Fatalf("output %q", res.Output)
	}
	if n := h.store.listEvents.Load() - lists; n != 1 {
		t.Errorf("%d reads of the transcript, want 1 (to fill the gap)", n)
	}
	transcriptTypes(t, h, "ses_gap")
}

// TestOutputOfUnrecordedResultKept: a result the runner does not record
// (a resend of a call answered already) still has the output it came with
// written, and a session that is over takes no result: Deliver says so,
// for the gateway to write the output itself.
func TestOutputOfUnrecordedResultKept(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	c := h.session("ses_resend", api.SessionSpec{Agent: api.Agent{Kind: api.AgentExternal}})
	replies := externalCall(h, "ses_resend", api.ToolExec, `{"command":"true"}`)
	call := c.expectCall(t)
	h.answer(c, call.Seq, true, `{"exit_code":0}`, "")
	expectReply(t, replies)

	if !h.answerWithOutput(c, call.Seq, true, `{"exit_code":0}`, h.outputEvent(call.Seq+1, "another call's output\n")) {
		t.Fatal("the runner did not take the resent result")
	}
	if seq := c.expectAck(t); seq != call.Seq {
		t.Fatalf("ack of %d, want %d", seq, call.Seq)
	}
	// The ack comes after the write: the output is on the transcript.
	evs := transcriptTypes(t, h, "ses_resend")
	last := evs[len(evs)-1]
	if last.Type != api.EventOutput || last.Text != "another call's output\n" {
		t.Fatalf("transcript ends with %+v, want the output of the resent result", last)
	}
	calls, err := h.store.ListCalls(t.Context(), "ses_resend")
	if err != nil || len(calls) != 1 || !calls[0].Done {
		t.Fatalf("calls %+v, %v: want the one call, done once", calls, err)
	}

	if res, err := h.loop.External(t.Context(), "ses_resend", ToolEndSession, nil); err != nil || !res.OK {
		t.Fatalf("end_session: %+v, %v", res, err)
	}
	h.waitEnd("ses_resend")
	if h.answerWithOutput(c, call.Seq, true, `{}`, h.outputEvent(call.Seq, "late\n")) {
		t.Fatal("a session that is over took a result")
	}
}

// TestScriptGateUsesTheRecordingRead: a script's next call is recorded in
// the previous result's transaction, and its gate decides on the session
// as that transaction read it, with the session's own rules: the steps
// after the first read no session, and a deny rule of the session still
// refuses its step without it reaching the remote.
func TestScriptGateUsesTheRecordingRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	no := false
	step := func(tool, args string) api.Step { return api.Step{Tool: tool, Args: json.RawMessage(args)} }
	c := h.session("ses_gate", api.SessionSpec{
		Agent: api.Agent{Kind: api.AgentScript, StopOnError: &no, Steps: []api.Step{
			step(api.ToolExec, `{"command":"echo one"}`), step(api.ToolExec, `{"command":"echo two"}`), step(api.ToolListDir, `{}`)}},
		ApprovalRules: []api.ApprovalRule{{Action: api.ApprovalDeny, Tool: api.ToolListDir, Reason: "No listing here."}}})
	first := c.expectCall(t)
	gets := h.store.getSessions.Load()
	h.answer(c, first.Seq, true, `{"exit_code":0}`, "")
	second := c.expectCall(t)
	if second.Tool != api.ToolExec {
		t.Fatalf("second call %+v", second)
	}
	h.answer(c, second.Seq, true, `{"exit_code":0}`, "")
	sess := h.waitEnd("ses_gate")
	select {
	case f := <-c.calls:
		t.Fatalf("the denied step reached the remote: %+v", f)
	default:
	}
	if n := h.store.getSessions.Load() - gets; n != 1 {
		t.Errorf("%d reads of the session after the first call, want 1 (waitEnd's own)", n)
	}
	calls, err := h.store.ListCalls(t.Context(), "ses_gate")
	if err != nil || len(calls) != 3 || calls[2].OK || !calls[2].Done {
		t.Fatalf("calls %+v, %v: want the third refused", calls, err)
	}
	if sess.Status == api.StatusRunning {
		t.Fatalf("session still running: %+v", sess)
	}
}

// outputTexts is the text of the session's output events, in order.
func outputTexts(t *testing.T, h *harness, sessionID string) []string {
	t.Helper()
	var texts []string
	for _, ev := range transcriptTypes(t, h, sessionID) {
		if ev.Type == api.EventOutput {
			texts = append(texts, ev.Text)
		}
	}
	return texts
}

// TestOutputOfStashedResultWrittenAtOnce: results that come before their
// call is awaited (a remote resending after a restart) are kept for their
// call, and the output they came with is written at once, in the order it
// came: a second result of the same call replaces the first, not its
// output.
func TestOutputOfStashedResultWrittenAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	step := api.Step{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"echo"}`)}
	c := h.session("ses_stash", api.SessionSpec{Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{step, step}}})
	first := c.expectCall(t)
	for _, text := range []string{"A\n", "B\n"} {
		if !h.answerWithOutput(c, first.Seq+1, true, `{"exit_code":0}`, h.outputEvent(first.Seq+1, text)) {
			t.Fatal("the runner did not take the early result")
		}
	}
	waitfor.True(t, "the early results' output on the transcript", func() bool {
		return strings.Join(outputTexts(t, h, "ses_stash"), "") == "A\nB\n"
	})
	h.answer(c, first.Seq, true, `{"exit_code":0}`, "")
	if got := c.expectAck(t); got != first.Seq+1 {
		t.Fatalf("ack of %d, want the early result's %d", got, first.Seq+1)
	}
	if sess := h.waitEnd("ses_stash"); sess.StatusDetail != api.DetailFinished {
		t.Fatalf("session %s/%s: %s", sess.Status, sess.StatusDetail, sess.Reason)
	}
	if got := strings.Join(outputTexts(t, h, "ses_stash"), ""); got != "A\nB\n" {
		t.Errorf("output on the transcript %q, want each early result's once", got)
	}
}

// TestOutputKeptWhenSessionEndsDuringCall: a session that ends while a
// call runs does not record the call's result, but the output that came
// with it is written; the outside agent hears that the session ended
// during the call, and a call after that that it has ended.
func TestOutputKeptWhenSessionEndsDuringCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	c := h.session("ses_end", api.SessionSpec{Agent: api.Agent{Kind: api.AgentExternal}})
	errs := make(chan error, 1)
	go func() {
		_, err := h.loop.External(t.Context(), "ses_end", api.ToolExec, json.RawMessage(`{"command":"make"}`))
		errs <- err
	}()
	call := c.expectCall(t)
	// Ended by another server: this runner learns it from its own write.
	now := h.clock.Now()
	if _, err := h.store.UpdateSession(t.Context(), "ses_end", func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		sess.Status, sess.StatusDetail, sess.EndedAt = api.StatusExit, api.DetailUserRequest, &now
		return store.Mutation{Session: &sess}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if !h.answerWithOutput(c, call.Seq, true, `{"exit_code":0}`, h.outputEvent(call.Seq, "half done\n")) {
		t.Fatal("the runner did not take the result")
	}
	if got := c.expectAck(t); got != call.Seq {
		t.Fatalf("ack of %d, want %d", got, call.Seq)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, ErrEndedDuringCall) {
			t.Fatalf("the call's error: %v, want ErrEndedDuringCall", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no answer")
	}
	if got := outputTexts(t, h, "ses_end"); len(got) != 1 || got[0] != "half done\n" {
		t.Fatalf("output on the transcript %q, want the call's", got)
	}
}
