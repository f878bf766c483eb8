package llm

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestAnthropicRequestAndResponse(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, reply{body: `{
		"id": "msg_1", "type": "message", "role": "assistant", "model": "test-model",
		"content": [
			{"type": "text", "text": "Running it."},
			{"type": "tool_use", "id": "toolu_3", "name": "exec", "input": {"command": "go build ./..."}},
			{"type": "tool_use", "id": "toolu_4", "name": "list_dir", "input": {"path": "cmd"}}
		],
		"stop_reason": "tool_use", "stop_sequence": null,
		"usage": {"input_tokens": 300, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 1, "output_tokens": 45}}`})
	p := newTestProvider(t, Config{Provider: "Anthropic", BaseURL: f.url(), APIKey: "sk-ant-test"})

	req := conversation()
	req.Messages = append([]Message{{Role: RoleSystem, Text: "Be brief."}}, req.Messages...)
	req.MaxTokens = 0 // Anthropic requires one: the default is sent
	resp, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}

	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.method != "POST" || r.path != "/v1/messages" {
		t.Errorf("request %s %s, want POST /v1/messages", r.method, r.path)
	}
	if got := r.header.Get("Authorization"); got != "Bearer sk-ant-test" {
		t.Errorf("Authorization %q", got)
	}
	if got := r.header.Get("Anthropic-Version"); got == "" {
		t.Error("no anthropic-version header")
	}
	// The system prompt is top-level; the two tool results are one user
	// message; temperature and top_p are not sent (the API rejects them).
	assertJSON(t, "request body", r.body, `{
		"model": "test-model",
		"max_tokens": 4096,
		"system": [{"type": "text", "text": "You are Outpost's agent.\n\nBe brief."}],
		"messages": [
			{"role": "user", "content": [{"type": "text", "text": "List the workspace, then read go.mod."}]},
			{"role": "assistant", "content": [
				{"type": "text", "text": "Looking."},
				{"type": "tool_use", "id": "call_1", "name": "list_dir", "input": {"path": "."}},
				{"type": "tool_use", "id": "call_2", "name": "read_file", "input": {"path": "go.mod"}}
			]},
			{"role": "user", "content": [
				{"type": "tool_result", "tool_use_id": "call_1", "is_error": false,
					"content": [{"type": "text", "text": "{\"entries\":[{\"name\":\"go.mod\",\"type\":\"file\",\"size\":42}]}"}]},
				{"type": "tool_result", "tool_use_id": "call_2", "is_error": true,
					"content": [{"type": "text", "text": "no such file"}]}
			]}
		],
		"tools": [
			{"name": "list_dir", "description": "Lists a directory.", "input_schema":
				{"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": false}},
			{"name": "exec", "description": "Runs a command.", "input_schema":
				{"type": "object", "properties": {"command": {"type": "string"}, "timeout_s": {"type": "integer", "minimum": 1}}}}
		]
	}`)

	want := Response{
		Message: Message{Role: RoleAssistant, Text: "Running it.", ToolCalls: []ToolCall{
			{ID: "toolu_3", Name: "exec", Arguments: json.RawMessage(`{"command": "go build ./..."}`)},
			{ID: "toolu_4", Name: "list_dir", Arguments: json.RawMessage(`{"path": "cmd"}`)},
		}},
		Usage:      Usage{PromptTokens: 321, CompletionTokens: 45},
		StopReason: "tool_use",
	}
	assertResponse(t, resp, want)
}

// TestAnthropicMergesAndReplays checks the merging of a tool result with the
// user's next words, the explicit max_tokens, and that arguments which are
// not valid JSON are replayed wrapped in an object (tool_use input must be
// one) that still shows the model what it wrote.
func TestAnthropicMergesAndReplays(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, reply{body: `{"id":"msg_2","type":"message","role":"assistant","model":"m",
		"content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn","usage":{"input_tokens":7,"output_tokens":2}}`})
	p := newTestProvider(t, Config{Provider: "anthropic", BaseURL: f.url(), Model: "m"})
	resp, err := p.Complete(context.Background(), Request{
		MaxTokens: 64000,
		Messages: []Message{
			{Role: RoleUser, Text: "go"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "t1", Name: "exec", Arguments: json.RawMessage(`{"command": "ls`)}}},
			{Role: RoleTool, ToolCallID: "t1", Text: "malformed arguments", IsError: true},
			{Role: RoleUser, Text: "try again"},
		},
	})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if resp.Message.Text != "Done." || resp.StopReason != "end_turn" || resp.Usage != (Usage{7, 2}) {
		t.Errorf("response %+v", resp)
	}
	r := f.requests()[0]
	if got := r.header.Get("Authorization") + r.header.Get("X-Api-Key"); got != "" {
		t.Errorf("credentials %q sent without an API key", got)
	}
	assertJSON(t, "request body", r.body, `{
		"model": "m",
		"max_tokens": 64000,
		"messages": [
			{"role": "user", "content": [{"type": "text", "text": "go"}]},
			{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "exec", "input": {"_invalid_arguments": "{\"command\": \"ls"}}]},
			{"role": "user", "content": [
				{"type": "tool_result", "tool_use_id": "t1", "is_error": true, "content": [{"type": "text", "text": "malformed arguments"}]},
				{"type": "text", "text": "try again"}
			]}
		]
	}`)
}

// TestObjectArguments checks how arguments are replayed where only an object
// is taken: objects as they are, none as {}, anything else wrapped.
func TestObjectArguments(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ args, want string }{
		{`{"path": "."}`, `{"path": "."}`},
		{" {}\n", `{}`},
		{"", `{}`},
		{" \t", `{}`},
		{`{"command": "ls`, `{"_invalid_arguments":"{\"command\": \"ls"}`},
		{`{"a":1} junk`, `{"_invalid_arguments":"{\"a\":1} junk"}`},
		{`["ls"]`, `{"_invalid_arguments":"[\"ls\"]"}`},
		{`"ls"`, `{"_invalid_arguments":"\"ls\""}`},
		{"null", `{"_invalid_arguments":"null"}`},
		{"\xff{", `{"_invalid_arguments":"\ufffd{"}`},
	} {
		got := objectArguments(json.RawMessage(tc.args))
		if string(got) != tc.want || !json.Valid(got) {
			t.Errorf("objectArguments(%q) = %s, want %s", tc.args, got, tc.want)
		}
	}
}

// TestAnthropicToolResultImage: a tool result's images reach Anthropic as
// image blocks of the tool_result, after its text; OpenAI-compatible
// servers set to text images get a line saying the image was left out.
func TestAnthropicToolResultImage(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, reply{body: `{"id":"msg_3","type":"message","role":"assistant","model":"m",
		"content":[{"type":"text","text":"I see it."}],"stop_reason":"end_turn","usage":{"input_tokens":7,"output_tokens":2}}`})
	p := newTestProvider(t, Config{Provider: "anthropic", BaseURL: f.url(), Model: "m"})
	_, err := p.Complete(context.Background(), Request{
		MaxTokens: 1000,
		Messages: []Message{
			{Role: RoleUser, Text: "look"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "t1", Name: "computer", Arguments: json.RawMessage(`{"action":"screenshot"}`)}}},
			{Role: RoleTool, ToolCallID: "t1", Text: `{"width":2,"height":1}`, Images: []Image{{MediaType: "image/png", Data: "iVBORw0K"}}},
		},
	})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	assertJSON(t, "request body", f.requests()[0].body, `{
		"model": "m",
		"max_tokens": 1000,
		"messages": [
			{"role": "user", "content": [{"type": "text", "text": "look"}]},
			{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "computer", "input": {"action": "screenshot"}}]},
			{"role": "user", "content": [
				{"type": "tool_result", "tool_use_id": "t1", "is_error": false, "content": [
					{"type": "text", "text": "{\"width\":2,\"height\":1}"},
					{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"}}
				]}
			]}
		]
	}`)
	msg := openAIMessage(Message{Role: RoleTool, ToolCallID: "t1", Text: "{}", Images: []Image{{MediaType: "image/png", Data: "iVBORw0K"}}}, true)
	b, _ := json.Marshal(msg)
	if !strings.Contains(string(b), "an image (image/png, 8 bytes base64)") || strings.Contains(string(b), "iVBORw0K") {
		t.Errorf("OpenAI tool message %s", b)
	}
}
