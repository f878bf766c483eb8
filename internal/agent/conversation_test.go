package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/llm"
)

// TestConversationFromTranscript rebuilds a conversation from transcript
// events: tool results follow their calls even when a user message
// arrived meanwhile, output and exit codes make the exec result, long
// results are cut, and a move to another machine is told to the model.
func TestConversationFromTranscript(t *testing.T) {
	t.Parallel()
	ok, bad := true, false
	code := 2
	evs := []api.Event{
		{Seq: 1, Type: api.EventStatus},
		{Seq: 2, Type: api.EventMessage, Role: api.RoleUser, Text: "do it"},
		{Seq: 3, Type: api.EventMessage, Role: api.RoleAssistant, Text: "running", Seen: 2, ToolCalls: []api.ToolCallRef{
			{ID: "a", Tool: "exec", Arguments: `{"command":"make"}`, CallSeq: 1},
			{ID: "b", Tool: "read_file", Arguments: `{"path":"x"}`, CallSeq: 2}}},
		{Seq: 4, Type: api.EventCall, CallSeq: 1},
		{Seq: 5, Type: api.EventOutput, CallSeq: 1, Text: strings.Repeat("x", 50)},
		{Seq: 6, Type: api.EventMessage, Role: api.RoleUser, Text: "also the docs"},
		{Seq: 7, Type: api.EventResult, CallSeq: 1, OK: &bad, ExitCode: &code, Error: "exit code 2"},
		{Seq: 8, Type: api.EventResume, Reason: "The session moved to a new machine (w2)."},
		{Seq: 9, Type: api.EventResult, CallSeq: 2, OK: &ok, Value: json.RawMessage(`{"content":"hi"}`)},
	}
	c := newConversation(40)
	for _, ev := range evs {
		c.apply(ev)
	}
	var roles []string
	for _, m := range c.msgs {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, ","); got != "user,assistant,tool,tool" {
		t.Fatalf("history roles %s", got)
	}
	roles = nil
	for _, m := range c.request() {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, ","); got != "user,assistant,tool,tool,user,user" {
		t.Fatalf("request roles %s", got)
	}
	if m := c.msgs[2]; m.ToolCallID != "a" || !m.IsError || !strings.Contains(m.Text, "more characters cut") {
		t.Errorf("exec result %+v", m)
	}
	if m := c.msgs[3]; m.ToolCallID != "b" || m.IsError || !strings.Contains(m.Text, `"content":"hi"`) {
		t.Errorf("read_file result %+v", m)
	}
	if req := c.request(); req[4].Text != "also the docs" || !strings.Contains(req[5].Text, "new machine") {
		t.Errorf("waiting messages %+v", req[4:])
	}
	// An answer that had seen the first of them places it before itself.
	c.apply(api.Event{Seq: 10, Type: api.EventMessage, Role: api.RoleAssistant, Text: "ok", Seen: 6})
	if len(c.inbox) != 1 || c.msgs[4].Text != "also the docs" || c.msgs[5].Role != llm.RoleAssistant {
		t.Errorf("after an answer that saw seq 6: history %+v inbox %+v", c.msgs[4:], c.inbox)
	}
	if c.lastSeen != 10 || c.lastCall != 2 || c.steps != 2 || len(c.pending) != 0 || c.lastAssistantDone() {
		t.Errorf("state: seen %d call %d steps %d pending %v", c.lastSeen, c.lastCall, c.steps, c.pending)
	}
	if problem := toolCallProblem(llm.ToolCall{Name: "exec", Arguments: json.RawMessage(`{"command":`)}); !strings.Contains(problem, "not valid JSON") {
		t.Errorf("malformed arguments: %q", problem)
	}
	if problem := toolCallProblem(llm.ToolCall{Name: "exec", Arguments: json.RawMessage(`{"command":1}`)}); !strings.Contains(problem, "not valid") || strings.Contains(problem, "JSON (") {
		t.Errorf("arguments that do not fit: %q", problem)
	}
	if problem := toolCallProblem(llm.ToolCall{Name: "exec", Arguments: json.RawMessage(`{"command":"ls"} junk`)}); !strings.Contains(problem, "after the JSON") {
		t.Errorf("trailing data: %q", problem)
	}
	if problem := toolCallProblem(llm.ToolCall{Name: "teleport"}); !strings.Contains(problem, "no tool") {
		t.Errorf("unknown tool: %q", problem)
	}
}

// TestSyncAfterLagAndGap follows a session's events through the feed:
// events that come in order need no read of the store, a follower that
// lost events reads what it missed from the store, and so does one that
// sees an event past a gap.
func TestSyncAfterLagAndGap(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.session("ses_sync", api.SessionSpec{Agent: api.Agent{Kind: api.AgentScript}})
	h.stop() // the test plays the runner (the script, of no steps, has ended)
	r := &runner{l: h.loop, sessionID: "ses_sync"}
	conv := newConversation(100)
	r.conv = conv
	reads := func() int64 { return h.store.listEvents.Load() }
	if err := r.sync(t.Context(), conv); err != nil || reads() != 1 {
		t.Fatalf("first sync: %v, %d reads, want the transcript read once", err, reads())
	}
	h.message("ses_sync", "one")
	if err := r.sync(t.Context(), conv); err != nil || reads() != 1 || len(conv.inbox) != 1 {
		t.Fatalf("sync in order: %v, %d reads, inbox %+v", err, reads(), conv.inbox)
	}
	for i := range 100 { // more than the feed holds for a follower
		h.message("ses_sync", strings.Repeat("x", i+1))
	}
	if err := r.sync(t.Context(), conv); err != nil || reads() != 2 || len(conv.inbox) != 101 {
		t.Fatalf("sync after a lag: %v, %d reads, %d in the inbox, want 2 reads and 101", err, reads(), len(conv.inbox))
	}
	// An event committed but not published, then one that is: a gap.
	h.recordMessage("ses_sync", "unpublished")
	h.message("ses_sync", "published")
	if err := r.sync(t.Context(), conv); err != nil || reads() != 3 || len(conv.inbox) != 103 || conv.inbox[101].msg.Text != "unpublished" {
		t.Fatalf("sync after a gap: %v, %d reads, %d in the inbox", err, reads(), len(conv.inbox))
	}
	r.sub.Close()
}

// TestExecResultText: the model reads an exec's result as a shell shows
// it: the output, then the exit status, with the error only when it says
// more than the status does.
func TestExecResultText(t *testing.T) {
	bad := false
	for _, tc := range []struct {
		code    int
		err     string
		want    string
		without string
	}{
		{code: 1, err: "exit code 1", want: "make: *** [all] Error 1\nexit status 1", without: "exit code"},
		{code: 0, want: "make: *** [all] Error 1\nexit status 0"},
		{code: -1, err: "timed out after 1m0s", want: "make: *** [all] Error 1\ntimed out after 1m0s", without: "exit status"},
	} {
		c := newConversation(1000)
		c.apply(api.Event{Seq: 1, Type: api.EventMessage, Role: api.RoleAssistant, ToolCalls: []api.ToolCallRef{{ID: "a", Tool: "exec", CallSeq: 1}}})
		c.apply(api.Event{Seq: 2, Type: api.EventOutput, CallSeq: 1, Text: "make: *** [all] Error 1"})
		code := tc.code
		c.apply(api.Event{Seq: 3, Type: api.EventResult, CallSeq: 1, OK: &bad, ExitCode: &code, Error: tc.err})
		got := c.msgs[len(c.msgs)-1].Text
		if got != tc.want || (tc.without != "" && strings.Contains(got, tc.without)) {
			t.Errorf("exit %d, error %q: the model reads %q, want %q", tc.code, tc.err, got, tc.want)
		}
	}
}

// TestDescribeMachine: the system prompt tells the model the machine's OS,
// CPUs and memory, and its GPUs when the worker reports them; a worker
// that reports none of the newer facts is described without them.
func TestDescribeMachine(t *testing.T) {
	full := `{"os":"linux","arch":"amd64","os_version":"Ubuntu 24.04 LTS","cpus":16,"cpu_model":"AMD EPYC 9554","memory_bytes":137438953472,
		"disk_free_bytes":68719476736,"git":"git version 2.43.0","gpus":[{"vendor":"nvidia","model":"NVIDIA H200","memory_bytes":150754820096}]}`
	want := "The machine: linux/amd64 (Ubuntu 24.04 LTS), 16 CPUs (AMD EPYC 9554), 128.0 GiB of memory, 64.0 GiB free on the workspace's disk, " +
		"GPU NVIDIA H200 with 140.4 GiB of memory, git version 2.43.0.\n"
	if got := describeMachine([]byte(full)); got != want {
		t.Errorf("describeMachine =\n %q\nwant\n %q", got, want)
	}
	raw, _ := json.Marshal(api.Capabilities{OS: "darwin", Arch: "arm64", CPUs: 8, MemoryBytes: 16 << 30, Git: "git version 2.39.5"})
	if got, want := describeMachine(raw), "The machine: darwin/arm64, 8 CPUs, 16.0 GiB of memory, git version 2.39.5.\n"; got != want {
		t.Errorf("describeMachine without GPUs = %q, want %q", got, want)
	}
	if got := describeMachine([]byte(`{}`)); got != "" {
		t.Errorf("describeMachine of nothing = %q, want no line", got)
	}
}
