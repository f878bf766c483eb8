package llm

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

const endTurn = `{"id":"msg_c","type":"message","role":"assistant","model":"m",
	"content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`

// computerRequest offers exec and the computer tool (as a function tool
// schema) for a 1280×800 display.
func computerRequest() Request {
	return Request{
		Model:    "m",
		Messages: []Message{{Role: RoleUser, Text: "click the button"}},
		Tools: []Tool{
			{Name: "exec", InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}}}`)},
			{Name: ComputerToolName, Description: "Drives the desktop.", InputSchema: json.RawMessage(`{"type":"object","properties":{"action":{"type":"string"}}}`)},
		},
		Computer: &ComputerDisplay{Width: 1280, Height: 800},
	}
}

// TestAnthropicNativeComputerTool: with a display, Anthropic models get
// the computer tool as the native computer-use type of the configured
// version, with its beta header; set to function, or without a display,
// they get the function tool and no beta header.
func TestAnthropicNativeComputerTool(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     Config
		display bool
		beta    string
		tool    string // the computer tool's JSON, compacted
	}{
		{"default", Config{}, true, "computer-use-2025-01-24",
			`{"display_height_px":800,"display_width_px":1280,"name":"computer","type":"computer_20250124"}`},
		{"20251124", Config{ComputerToolVersion: "computer_20251124", ComputerTool: "Native"}, true, "computer-use-2025-11-24",
			`{"display_height_px":800,"display_width_px":1280,"enable_zoom":true,"name":"computer","type":"computer_20251124"}`},
		{"function", Config{ComputerTool: "function"}, true, "",
			`{"description":"Drives the desktop.","input_schema":{"properties":{"action":{"type":"string"}},"type":"object"},"name":"computer"}`},
		{"no display", Config{}, false, "",
			`{"description":"Drives the desktop.","input_schema":{"properties":{"action":{"type":"string"}},"type":"object"},"name":"computer"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeServer(t, reply{body: endTurn})
			cfg := tc.cfg
			cfg.Provider, cfg.BaseURL = ProviderAnthropic, f.url()
			p := newTestProvider(t, cfg)
			req := computerRequest()
			if !tc.display {
				req.Computer = nil
			}
			if _, err := p.Complete(context.Background(), req); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			r := f.requests()[0]
			if got := strings.Join(r.header.Values("Anthropic-Beta"), ","); got != tc.beta {
				t.Errorf("anthropic-beta %q, want %q", got, tc.beta)
			}
			var body struct {
				Tools []json.RawMessage `json:"tools"`
			}
			if err := json.Unmarshal(r.body, &body); err != nil || len(body.Tools) != 2 {
				t.Fatalf("tools of %s: %v", r.body, err)
			}
			if !strings.Contains(string(body.Tools[0]), `"name":"exec"`) {
				t.Errorf("first tool %s, want exec", body.Tools[0])
			}
			assertJSON(t, "computer tool", body.Tools[1], tc.tool)
		})
	}
}

// TestOpenAIToolImages: the images of a turn's tool results follow its
// tool messages in one user message of image_url parts, each after a line
// naming its call; set to text, servers get a line per image instead.
func TestOpenAIToolImages(t *testing.T) {
	t.Parallel()
	const answer = `{"id":"c","object":"chat.completion","created":1,"model":"m",
		"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"ok"}}]}`
	req := Request{Model: "m", Messages: []Message{
		{Role: RoleUser, Text: "look"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{
			{ID: "c1", Name: "computer", Arguments: json.RawMessage(`{"action":"screenshot"}`)},
			{ID: "c2", Name: "exec", Arguments: json.RawMessage(`{"command":"true"}`)},
			{ID: "c3", Name: "computer", Arguments: json.RawMessage(`{"action":"zoom","region":[0,0,1,1]}`)},
		}},
		{Role: RoleTool, ToolCallID: "c1", Text: `{"width":2}`, Images: []Image{{MediaType: "image/png", Data: "AAAA"}}},
		{Role: RoleTool, ToolCallID: "c2", Text: "[exit code 0]"},
		{Role: RoleTool, ToolCallID: "c3", Text: `{"width":1}`, Images: []Image{{MediaType: "image/png", Data: "BBBB"}}},
		{Role: RoleUser, Text: "and now?"},
	}}

	f := newFakeServer(t, reply{body: answer}, reply{body: answer})
	p := newTestProvider(t, Config{Provider: ProviderOpenAI, BaseURL: f.url() + "/v1"})
	if _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	var body struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(f.requests()[0].body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Messages) != 7 {
		t.Fatalf("%d messages, want 7 (the images' message after the three tool messages): %s", len(body.Messages), f.requests()[0].body)
	}
	assertJSON(t, "images message", body.Messages[5], `{"role":"user","content":[
		{"type":"text","text":"The images of the tool results above, each after the id of its tool call:"},
		{"type":"text","text":"Tool call c1:"},
		{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},
		{"type":"text","text":"Tool call c3:"},
		{"type":"image_url","image_url":{"url":"data:image/png;base64,BBBB"}}]}`)
	if s := string(body.Messages[2]); !strings.Contains(s, `"role":"tool"`) || !strings.Contains(s, "follows in the next user message") || strings.Contains(s, "AAAA") {
		t.Errorf("tool message %s", s)
	}
	if !strings.Contains(string(body.Messages[6]), "and now?") {
		t.Errorf("last message %s", body.Messages[6])
	}

	p = newTestProvider(t, Config{Provider: ProviderOpenAI, BaseURL: f.url() + "/v1", ToolImages: "text"})
	if _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	b := string(f.requests()[1].body)
	if strings.Contains(b, "image_url") || strings.Contains(b, "AAAA") || !strings.Contains(b, "an image (image/png, 4 bytes base64)") {
		t.Errorf("text mode request %s", b)
	}
}

// TestComputerConfigRefused: unknown modes and versions fail New with a
// message naming the variable.
func TestComputerConfigRefused(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{Provider: ProviderAnthropic, ComputerTool: "beta"},
		{Provider: ProviderAnthropic, ComputerToolVersion: "computer_20241022"},
		{Provider: ProviderOpenAI, ToolImages: "inline"},
	} {
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), "OUTPOST_LLM_") {
			t.Errorf("New(%+v) = %v, want an error naming the variable", cfg, err)
		}
	}
	got := ConfigFromEnv(func(k string) string {
		return map[string]string{EnvComputerTool: " function ", EnvComputerToolVersion: "computer_20251124", EnvToolImages: "text"}[k]
	})
	if got.ComputerTool != "function" || got.ComputerToolVersion != "computer_20251124" || got.ToolImages != "text" {
		t.Errorf("ConfigFromEnv = %+v", got)
	}
}
