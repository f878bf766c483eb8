package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/internal/api"
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
		{Seq: 3, Type: api.EventMessage, Role: api.RoleAssistant, Text: "running", ToolCalls: []api.ToolCallRef{
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
	if got := strings.Join(roles, ","); got != "user,assistant,tool,tool,user,user" {
		t.Fatalf("roles %s", got)
	}
	if m := c.msgs[2]; m.ToolCallID != "a" || !m.IsError || !strings.Contains(m.Text, "more characters cut") {
		t.Errorf("exec result %+v", m)
	}
	if m := c.msgs[3]; m.ToolCallID != "b" || m.IsError || !strings.Contains(m.Text, `"content":"hi"`) {
		t.Errorf("read_file result %+v", m)
	}
	if c.msgs[4].Text != "also the docs" || !strings.Contains(c.msgs[5].Text, "new machine") {
		t.Errorf("deferred messages %+v", c.msgs[4:])
	}
	if c.lastSeen != 9 || c.lastCall != 2 || c.steps != 1 || len(c.pending) != 0 || c.lastAssistantDone() {
		t.Errorf("state: seen %d call %d steps %d pending %v", c.lastSeen, c.lastCall, c.steps, c.pending)
	}
	if problem := toolCallProblem(llm.ToolCall{Name: "exec", Arguments: json.RawMessage(`{"command":`)}); !strings.Contains(problem, "not valid") {
		t.Errorf("malformed arguments: %q", problem)
	}
	if problem := toolCallProblem(llm.ToolCall{Name: "teleport"}); !strings.Contains(problem, "no tool") {
		t.Errorf("unknown tool: %q", problem)
	}
}
