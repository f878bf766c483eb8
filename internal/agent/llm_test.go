package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/llm"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// rebuiltAt folds the transcript's events up to seq into a new
// conversation: the recovery path.
func rebuiltAt(evs []api.Event, seq int64, limit int) *conversation {
	c := newConversation(limit)
	for _, ev := range evs {
		if ev.Seq <= seq {
			c.apply(ev)
		}
	}
	return c
}

// checkPathsAgree checks that every request the model got — built from
// the conversation the runner kept in memory — is what a conversation
// rebuilt from the transcript gives at the point that answer had seen.
func checkPathsAgree(t *testing.T, evs []api.Event, reqs []llm.Request) {
	t.Helper()
	var answers []api.Event
	for _, ev := range evs {
		if ev.Type == api.EventMessage && ev.Role == api.RoleAssistant {
			answers = append(answers, ev)
		}
	}
	if len(answers) != len(reqs) {
		t.Fatalf("%d answers on the transcript, %d model calls", len(answers), len(reqs))
	}
	for i, a := range answers {
		want := rebuiltAt(evs, a.Seen, 2000).request()
		if !reflect.DeepEqual(reqs[i].Messages, want) {
			t.Errorf("model call %d:\n kept:    %+v\n rebuilt: %+v", i+1, reqs[i].Messages, want)
		}
	}
}

// TestLLMConversationPathsAgree runs an llm session through tool calls
// with output, a call with broken arguments and a user message that comes
// while a call runs. Every model call sees what a conversation rebuilt
// from the transcript shows, while the runner read the transcript from
// the store only when it started and when it ended the session.
func TestLLMConversationPathsAgree(t *testing.T) {
	t.Parallel()
	model := newFakeOpenAI(t,
		use([3]string{"a", "exec", `{"command":"make"}`}, [3]string{"b", "read_file", `{"path":`}),
		use([3]string{"c", "list_dir", `{}`}),
		say("Done, docs too."))
	p := newProvider(t, model)
	h := newHarness(t, p)
	c := h.session("ses_llm", api.SessionSpec{Prompt: "Build it.", Agent: api.Agent{Kind: api.AgentLLM}})

	if call := c.expectCall(t); call.Seq != 1 || call.Tool != api.ToolExec {
		t.Fatalf("first call %+v", call)
	}
	h.output("ses_llm", 1, "building\n")
	h.output("ses_llm", 1, "done\n")
	h.answer(c, 1, true, `{"exit_code": 0}`, "")
	// Call 2 has broken arguments: it gets its error result without
	// reaching the remote.
	if call := c.expectCall(t); call.Seq != 3 || call.Tool != api.ToolListDir {
		t.Fatalf("second call sent %+v, want 3 (list_dir)", call)
	}
	h.message("ses_llm", "Also the docs.")
	h.answer(c, 3, true, `{"entries": []}`, "") // the store keeps it compact

	sess := h.waitEnd("ses_llm")
	if sess.Status != api.StatusExit || sess.StatusDetail != api.DetailFinished || sess.Usage.ModelCalls != 3 {
		t.Fatalf("session %s/%s after %d model calls: %s", sess.Status, sess.StatusDetail, sess.Usage.ModelCalls, sess.Reason)
	}
	reqs := p.requests()
	checkPathsAgree(t, h.events("ses_llm"), reqs)
	last := reqs[len(reqs)-1].Messages
	var texts []string
	for _, m := range last {
		texts = append(texts, m.Role+":"+m.Text)
	}
	got := strings.Join(texts, "|")
	for _, want := range []string{"user:Build it.", "tool:building\ndone\nexit status 0", "not valid JSON", `tool:{"entries":[]}`, "user:Also the docs."} {
		if !strings.Contains(got, want) {
			t.Errorf("last request lacks %q: %s", want, got)
		}
	}
	if n := h.store.listEvents.Load(); n != 2 {
		t.Errorf("the runner read the transcript %d times, want 2 (at its start and at the end)", n)
	}
	if n := h.store.listCalls.Load(); n != 1 {
		t.Errorf("the runner read the calls %d times, want 1 (at its start)", n)
	}
}

// TestLLMRestartRebuildsConversation stops the loop while a model's call
// runs and starts a new one on the same store: the new runner rebuilds
// the conversation from the transcript, sends the call again and goes on,
// and what the model sees agrees with the transcript on both sides of the
// restart.
func TestLLMRestartRebuildsConversation(t *testing.T) {
	t.Parallel()
	model := newFakeOpenAI(t, use([3]string{"a", "exec", `{"command":"make"}`}), say("Built."))
	p := newProvider(t, model)
	h := newHarness(t, p)
	c := h.session("ses_kill", api.SessionSpec{Prompt: "Build it.", Agent: api.Agent{Kind: api.AgentLLM}})
	c.expectCall(t)
	h.output("ses_kill", 1, "half of the output\n")
	h.stop()

	h.start(p)
	c2 := h.connect("ses_kill")
	if call := c2.expectCall(t); call.Seq != 1 || call.Tool != api.ToolExec {
		t.Fatalf("call after the restart %+v, want call 1 again", call)
	}
	h.output("ses_kill", 1, "the rest\n")
	h.answer(c2, 1, true, `{"exit_code":0}`, "")
	if sess := h.waitEnd("ses_kill"); sess.StatusDetail != api.DetailFinished {
		t.Fatalf("session %s/%s: %s", sess.Status, sess.StatusDetail, sess.Reason)
	}
	reqs := p.requests()
	checkPathsAgree(t, h.events("ses_kill"), reqs)
	if n := len(reqs); n != 2 {
		t.Fatalf("%d model calls, want 2", n)
	}
	if m := reqs[1].Messages; len(m) != 3 || m[2].Text != "half of the output\nthe rest\nexit status 0" {
		t.Errorf("second request %+v", m)
	}
}

// TestLLMWaitsForUserThenIdles runs an interactive session on a fake
// clock: the model asks a question, the session waits for the user, a
// message gives the model another turn, and when the idle limit passes
// with no message the session ends for inactivity.
func TestLLMWaitsForUserThenIdles(t *testing.T) {
	t.Parallel()
	model := newFakeOpenAI(t, say("Which branch?"), say("OK, on main."))
	p := newProvider(t, model)
	h := newHarness(t, p)
	h.session("ses_chat", api.SessionSpec{Prompt: "Fix the bug.", Limits: api.Limits{IdleS: 60},
		Agent: api.Agent{Kind: api.AgentLLM, Interactive: true}})
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := h.clock.BlockUntilContext(ctx, 1); err != nil { // the idle timer
		t.Fatalf("the runner never waited for the user: %v", err)
	}
	if sess, _ := h.store.GetSession(ctx, "ses_chat"); sess.StatusDetail != api.DetailWaitingForUser {
		t.Fatalf("detail %q, want %q", sess.StatusDetail, api.DetailWaitingForUser)
	}
	h.message("ses_chat", "main")
	waitfor.Within(t, waitTimeout, "the second model call", func() bool { return len(p.requests()) == 2 })
	if err := h.clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("the runner never waited for the user again: %v", err)
	}
	h.clock.Advance(61 * time.Second)
	sess := h.waitEnd("ses_chat")
	if sess.StatusDetail != api.DetailInactivity || !strings.Contains(sess.Reason, "No message from the user for 1m0s") {
		t.Fatalf("session %s/%s: %s", sess.Status, sess.StatusDetail, sess.Reason)
	}
	if m := p.requests()[1].Messages; m[len(m)-1].Text != "main" {
		t.Errorf("second request ends with %+v", m[len(m)-1])
	}
}

// TestExternalRunner serves an outside agent's calls: a call runs on the
// remote and returns its output with its result, a call of no tool is
// refused without reaching the remote, and end_session ends the session.
func TestExternalRunner(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	if _, err := h.loop.External(t.Context(), "ses_none", api.ToolExec, nil); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("call to a session without a runner: %v", err)
	}
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	if h.loop.WaitRunning(short, "ses_ext") {
		t.Fatal("WaitRunning reported a runner before any started")
	}
	cancel()
	waited := make(chan bool, 1)
	go func() { waited <- h.loop.WaitRunning(t.Context(), "ses_ext") }()
	c := h.session("ses_ext", api.SessionSpec{Agent: api.Agent{Kind: api.AgentExternal}})
	select {
	case ok := <-waited:
		if !ok {
			t.Fatal("WaitRunning: false once the runner started")
		}
	case <-time.After(waitTimeout):
		t.Fatal("WaitRunning did not return when the runner started")
	}
	type reply struct {
		res api.ToolResult
		err error
	}
	replies := make(chan reply, 1)
	go func() {
		res, err := h.loop.External(t.Context(), "ses_ext", api.ToolExec, json.RawMessage(`{"command":"echo hi"}`))
		replies <- reply{res, err}
	}()
	call := c.expectCall(t)
	h.output("ses_ext", call.Seq, "hi\n")
	h.answer(c, call.Seq, true, `{"exit_code":0}`, "")
	select {
	case r := <-replies:
		if r.err != nil || !r.res.OK || r.res.Output != "hi\nexit status 0" {
			t.Fatalf("result %+v, %v", r.res, r.err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no result")
	}
	var bad *ToolCallError
	if _, err := h.loop.External(t.Context(), "ses_ext", "teleport", nil); !errors.As(err, &bad) || !strings.Contains(bad.Problem, "no tool") {
		t.Fatalf("call of no tool: %v", err)
	}
	if res, err := h.loop.External(t.Context(), "ses_ext", ToolEndSession, nil); err != nil || !res.OK {
		t.Fatalf("end_session: %+v, %v", res, err)
	}
	if sess := h.waitEnd("ses_ext"); sess.StatusDetail != api.DetailFinished {
		t.Fatalf("session %s/%s: %s", sess.Status, sess.StatusDetail, sess.Reason)
	}
}

// TestExternalRestartDuringClone restarts the loop while an external
// session's clone runs: the new runner finishes the clone once, and the
// outside agent's next call is numbered after it.
func TestExternalRestartDuringClone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	c := h.session("ses_extclone", api.SessionSpec{Repos: []api.Repo{{URL: "https://example.com/app.git", Name: "app"}},
		Agent: api.Agent{Kind: api.AgentExternal}})
	if call := c.expectCall(t); call.Seq != 1 || call.Tool != api.ToolGitClone {
		t.Fatalf("first call %+v, want the clone", call)
	}
	h.stop()
	h.start(nil)
	c2 := h.connect("ses_extclone")
	if call := c2.expectCall(t); call.Seq != 1 {
		t.Fatalf("call after the restart %+v, want the clone again", call)
	}
	h.answer(c2, 1, true, `{}`, "")
	replies := make(chan api.ToolResult, 1)
	go func() {
		res, _ := h.loop.External(t.Context(), "ses_extclone", api.ToolListDir, nil)
		replies <- res
	}()
	call := c2.expectCall(t)
	if call.Seq != 2 || call.Tool != api.ToolListDir {
		t.Fatalf("the outside agent's call went out as %+v, want seq 2 list_dir (the clone is not run again)", call)
	}
	h.answer(c2, 2, true, `{"entries":[]}`, "")
	select {
	case res := <-replies:
		if res.Seq != 2 || !res.OK {
			t.Fatalf("result %+v", res)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no result")
	}
}

// TestLLMMessageBeforeTheEnd commits a user message just as the runner of
// a non-interactive session is about to end it because the model is done,
// before the message is published: the runner, reading the transcript
// under the message lock, finds it and gives the model another turn.
func TestLLMMessageBeforeTheEnd(t *testing.T) {
	t.Parallel()
	model := newFakeOpenAI(t, say("Done."), say("Done, changelog too."))
	p := newProvider(t, model)
	paused, resume := make(chan struct{}), make(chan struct{})
	first := true
	h := newHarnessWith(t, p, func(string) {
		if first { // the runner's goroutine alone calls it
			first = false
			close(paused)
			<-resume
		}
	})
	h.session("ses_msg", api.SessionSpec{Prompt: "Do the task.", Agent: api.Agent{Kind: api.AgentLLM}})
	select {
	case <-paused:
	case <-time.After(waitTimeout):
		t.Fatal("the runner never got to the end of the first answer")
	}
	msg := h.recordMessage("ses_msg", "Also the changelog.") // not published
	close(resume)
	sess := h.waitEnd("ses_msg")
	if sess.StatusDetail != api.DetailFinished || sess.Usage.ModelCalls != 2 {
		t.Fatalf("session %s/%s after %d model calls, want finished after 2", sess.Status, sess.StatusDetail, sess.Usage.ModelCalls)
	}
	reqs := p.requests()
	if m := reqs[1].Messages; m[len(m)-1].Text != "Also the changelog." {
		t.Fatalf("second request ends with %+v", m[len(m)-1])
	}
	checkPathsAgree(t, h.events("ses_msg"), reqs)
	if evs := h.events("ses_msg"); evs[len(evs)-1].Type != api.EventEnd || msg.Events[0].Seq == 0 {
		t.Fatalf("transcript ends with %+v", evs[len(evs)-1])
	}
}

// TestLLMComputerScreenshotIsAnImage: a computer call's screenshot reaches
// the model as an image of the tool result, and its text holds the sizes
// without the base64; the transcript keeps the whole result.
func TestLLMComputerScreenshotIsAnImage(t *testing.T) {
	t.Parallel()
	model := newFakeOpenAI(t,
		use([3]string{"a", api.ToolComputer, `{"action":"screenshot"}`}),
		say("I see the desktop."))
	p := newProvider(t, model)
	h := newHarness(t, p)
	c := h.session("ses_cu", api.SessionSpec{Prompt: "Look at the screen.", Agent: api.Agent{Kind: api.AgentLLM}})
	if call := c.expectCall(t); call.Seq != 1 || call.Tool != api.ToolComputer {
		t.Fatalf("first call %+v", call)
	}
	h.answer(c, 1, true, `{"image":{"media_type":"image/png","data":"iVBORw0KGgo="},"width":1280,"height":800,"display_width":1280,"display_height":800}`, "")
	if sess := h.waitEnd("ses_cu"); sess.Status != api.StatusExit {
		t.Fatalf("session %s: %s", sess.Status, sess.Reason)
	}
	reqs := p.requests()
	checkPathsAgree(t, h.events("ses_cu"), reqs)
	var tool *llm.Message
	for i, m := range reqs[len(reqs)-1].Messages {
		if m.Role == llm.RoleTool {
			tool = &reqs[len(reqs)-1].Messages[i]
		}
	}
	if tool == nil || len(tool.Images) != 1 || tool.Images[0].Data != "iVBORw0KGgo=" || tool.Images[0].MediaType != "image/png" {
		t.Fatalf("tool message %+v, want the screenshot as an image", tool)
	}
	if strings.Contains(tool.Text, "iVBORw0KGgo=") || !strings.Contains(tool.Text, `"width":1280`) {
		t.Errorf("tool text %q, want the sizes without the base64", tool.Text)
	}
	var kept bool
	for _, ev := range h.events("ses_cu") {
		if ev.Type == api.EventResult && strings.Contains(string(ev.Value), "iVBORw0KGgo=") {
			kept = true
		}
	}
	if !kept {
		t.Error("the transcript lost the screenshot")
	}
}

// TestLLMKeepsTheLastScreenshots: a session that takes five screenshots
// sends the model only the newest keepImages of them; the older results
// say theirs was left out, and the transcript keeps all five.
func TestLLMKeepsTheLastScreenshots(t *testing.T) {
	t.Parallel()
	const shots = 5
	var turns []map[string]any
	for i := range shots {
		turns = append(turns, use([3]string{fmt.Sprintf("s%d", i), api.ToolComputer, `{"action":"screenshot"}`}))
	}
	model := newFakeOpenAI(t, append(turns, say("Seen enough."))...)
	p := newProvider(t, model)
	h := newHarness(t, p)
	c := h.session("ses_shots", api.SessionSpec{Prompt: "Watch the screen.", Agent: api.Agent{Kind: api.AgentLLM}})
	for seq := int64(1); seq <= shots; seq++ {
		if call := c.expectCall(t); call.Seq != seq {
			t.Fatalf("call %+v, want %d", call, seq)
		}
		h.answer(c, seq, true, fmt.Sprintf(`{"image":{"media_type":"image/png","data":"c2hvdC0%d"},"width":2,"height":1,"display_width":2,"display_height":1}`, seq), "")
	}
	if sess := h.waitEnd("ses_shots"); sess.Status != api.StatusExit {
		t.Fatalf("session %s: %s", sess.Status, sess.Reason)
	}
	reqs := p.requests()
	checkPathsAgree(t, h.events("ses_shots"), reqs)
	var kept []string
	var left int
	for _, m := range reqs[len(reqs)-1].Messages {
		for _, img := range m.Images {
			kept = append(kept, img.Data)
		}
		if strings.Contains(m.Text, imageLeftOut) {
			left++
		}
	}
	if !slices.Equal(kept, []string{"c2hvdC03", "c2hvdC04", "c2hvdC05"}) || left != shots-keepImages {
		t.Errorf("last request: images %v and %d left out, want the last %d and %d", kept, left, keepImages, shots-keepImages)
	}
	var onTranscript int
	for _, ev := range h.events("ses_shots") {
		if ev.Type == api.EventResult && strings.Contains(string(ev.Value), `"data":"c2hvdC0`) {
			onTranscript++
		}
	}
	if onTranscript != shots {
		t.Errorf("the transcript keeps %d screenshots, want %d", onTranscript, shots)
	}
}

// TestLLMOutageRetried: an llm session rides out a short outage of its
// provider (a dropped connection, a 503, a 429): the model call is tried
// again until it answers, each retry is on the transcript, and the session
// finishes as if nothing had happened.
func TestLLMOutageRetried(t *testing.T) {
	t.Parallel()
	model := newFakeOpenAI(t, say("All done."))
	model.fail(0, 503, 429)
	p, err := llm.New(llm.Config{Provider: llm.ProviderOpenAI, BaseURL: model.srv.URL + "/v1", Model: "test-model", RetryFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, p)
	h.session("ses_outage", api.SessionSpec{Prompt: "Say done.", Agent: api.Agent{Kind: api.AgentLLM}})
	sess := h.waitEnd("ses_outage")
	if sess.Status != api.StatusExit || sess.StatusDetail != api.DetailFinished || sess.Usage.ModelCalls != 1 {
		t.Fatalf("session %s/%s after %d model calls: %s", sess.Status, sess.StatusDetail, sess.Usage.ModelCalls, sess.Reason)
	}
	var retries []api.Event
	for _, ev := range h.events("ses_outage") {
		if ev.Type == api.EventModelRetry {
			retries = append(retries, ev)
		}
	}
	if len(retries) != 3 {
		t.Fatalf("%d retries on the transcript, want 3: %+v", len(retries), retries)
	}
	for i, want := range []string{"connection error", "HTTP 503", "HTTP 429"} {
		r := retries[i]
		if !strings.Contains(r.Reason, want) || !strings.Contains(r.Reason, fmt.Sprintf("retry %d", i+1)) || !strings.Contains(r.Reason, "trying again in") || r.Error == "" {
			t.Errorf("retry %d = %q (error %q), want it to name %q and the wait", i+1, r.Reason, r.Error, want)
		}
	}
}
