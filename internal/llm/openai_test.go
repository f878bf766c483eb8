package llm

import (
	"context"
	"encoding/json"
	"testing"
)

func TestOpenAIRequestAndResponse(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, reply{body: `{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "test-model",
		"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
			"role": "assistant", "content": "Running it.",
			"tool_calls": [
				{"id": "call_3", "type": "function", "function": {"name": "exec", "arguments": "{\"command\":\"go build ./...\"}"}},
				{"id": "call_4", "type": "function", "function": {"name": "list_dir", "arguments": "{\"path\":\"cmd\"}"}}
			]}}],
		"usage": {"prompt_tokens": 321, "completion_tokens": 45, "total_tokens": 366}}`})
	p := newTestProvider(t, Config{Provider: "openai", BaseURL: f.url() + "/v1", APIKey: "sk-test"})

	resp, err := p.Complete(context.Background(), conversation())
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}

	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.method != "POST" || r.path != "/v1/chat/completions" {
		t.Errorf("request %s %s, want POST /v1/chat/completions", r.method, r.path)
	}
	if got := r.header.Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization %q", got)
	}
	assertJSON(t, "request body", r.body, `{
		"model": "test-model",
		"messages": [
			{"role": "system", "content": "You are Outpost's agent."},
			{"role": "user", "content": "List the workspace, then read go.mod."},
			{"role": "assistant", "content": "Looking.", "tool_calls": [
				{"id": "call_1", "type": "function", "function": {"name": "list_dir", "arguments": "{\"path\":\".\"}"}},
				{"id": "call_2", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"go.mod\"}"}}
			]},
			{"role": "tool", "tool_call_id": "call_1", "content": "{\"entries\":[{\"name\":\"go.mod\",\"type\":\"file\",\"size\":42}]}"},
			{"role": "tool", "tool_call_id": "call_2", "content": "Error: no such file"}
		],
		"tools": [
			{"type": "function", "function": {"name": "list_dir", "description": "Lists a directory.", "parameters":
				{"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": false}}},
			{"type": "function", "function": {"name": "exec", "description": "Runs a command.", "parameters":
				{"type": "object", "properties": {"command": {"type": "string"}, "timeout_s": {"type": "integer", "minimum": 1}}}}}
		],
		"temperature": 0.25,
		"top_p": 0.5,
		"max_tokens": 1000
	}`)

	want := Response{
		Message: Message{Role: RoleAssistant, Text: "Running it.", ToolCalls: []ToolCall{
			{ID: "call_3", Name: "exec", Arguments: json.RawMessage(`{"command":"go build ./..."}`)},
			{ID: "call_4", Name: "list_dir", Arguments: json.RawMessage(`{"path":"cmd"}`)},
		}},
		Usage:      Usage{PromptTokens: 321, CompletionTokens: 45},
		StopReason: "tool_calls",
	}
	assertResponse(t, resp, want)
}

// TestOpenAIMalformedArguments checks that arguments that are not JSON come
// back raw, without an error, and are replayed byte for byte.
func TestOpenAIMalformedArguments(t *testing.T) {
	t.Parallel()
	const bad = `{"command": "ls -la` // cut off mid-string
	f := newFakeServer(t,
		reply{body: `{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
			"tool_calls":[{"id":"call_9","type":"function","function":{"name":"exec","arguments":"{\"command\": \"ls -la"}}]}}],
			"usage":{"prompt_tokens":10,"completion_tokens":5}}`},
		reply{body: `{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"Sorry."}}],"usage":{"prompt_tokens":20,"completion_tokens":2}}`},
	)
	p := newTestProvider(t, Config{Provider: "openai", BaseURL: f.url(), Model: "default-model"})
	req := Request{Messages: []Message{{Role: RoleUser, Text: "list"}}}

	resp, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if len(resp.Message.ToolCalls) != 1 || string(resp.Message.ToolCalls[0].Arguments) != bad {
		t.Fatalf("tool calls %+v, want raw arguments %q", resp.Message.ToolCalls, bad)
	}
	if resp.Message.Text != "" {
		t.Errorf("text %q, want empty for null content", resp.Message.Text)
	}

	req.Messages = append(req.Messages, resp.Message,
		Message{Role: RoleTool, ToolCallID: "call_9", Text: "malformed arguments: unexpected end of JSON input", IsError: true})
	resp, err = p.Complete(context.Background(), req)
	if err != nil {
		t.Fatalf("second Complete: %v", err)
	}
	if resp.Message.Text != "Sorry." || resp.StopReason != "stop" || len(resp.Message.ToolCalls) != 0 {
		t.Errorf("second response %+v", resp)
	}
	reqs := f.requests()
	if got := reqs[0].header.Get("Authorization"); got != "" {
		t.Errorf("Authorization %q sent without an API key", got)
	}
	assertJSON(t, "replay body", reqs[1].body, `{
		"model": "default-model",
		"messages": [
			{"role": "user", "content": "list"},
			{"role": "assistant", "tool_calls": [
				{"id": "call_9", "type": "function", "function": {"name": "exec", "arguments": "{\"command\": \"ls -la"}}]},
			{"role": "tool", "tool_call_id": "call_9", "content": "Error: malformed arguments: unexpected end of JSON input"}
		]
	}`)
}

// TestOpenAIOfficialMaxCompletionTokens checks that OpenAI's own API gets
// max_completion_tokens, which its reasoning models require.
func TestOpenAIOfficialMaxCompletionTokens(t *testing.T) {
	t.Parallel()
	b := newOpenAI("", "", nil)
	p, err := b.params(Request{Model: "m", MaxTokens: 77})
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "params", body, `{"model":"m","max_completion_tokens":77}`)
}

// assertResponse compares responses, arguments as bytes.
func assertResponse(t *testing.T, got, want Response) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("response\n got: %s\nwant: %s", g, w)
	}
}
