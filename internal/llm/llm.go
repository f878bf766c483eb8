package llm

import (
	"context"
	"encoding/json"
)

// Roles of a [Message].
const (
	// RoleSystem is an instruction to the model. Providers that take the
	// system prompt apart from the conversation (Anthropic) append it to
	// [Request.System].
	RoleSystem = "system"
	// RoleUser is a message from the user.
	RoleUser = "user"
	// RoleAssistant is a message from the model, possibly with tool calls.
	RoleAssistant = "assistant"
	// RoleTool is the result of one tool call, answering ToolCallID.
	RoleTool = "tool"
)

// Message is one turn of a conversation.
type Message struct {
	// Role is RoleSystem, RoleUser, RoleAssistant or RoleTool.
	Role string `json:"role"`
	// Text is the message's text; for RoleTool, the tool's result.
	Text string `json:"text,omitempty"`
	// ToolCalls are the calls the model asked for (RoleAssistant only).
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the ToolCall.ID this message answers (RoleTool only).
	ToolCallID string `json:"tool_call_id,omitempty"`
	// IsError marks a tool result as a failure (RoleTool only). Anthropic
	// receives it as is_error; OpenAI-compatible servers have no such flag
	// and receive the text prefixed with "Error: " instead.
	IsError bool `json:"is_error,omitempty"`
	// Images go with a tool result (RoleTool only): Anthropic receives
	// them as image blocks of the tool_result; OpenAI-compatible tool
	// messages carry text only, so those servers get them as image_url
	// parts of a user message after the turn's tool messages (or, with
	// [Config.ToolImages] text, a line per image saying it was left out).
	Images []Image `json:"images,omitempty"`
}

// Image is an image of a tool result, base64-encoded.
type Image struct {
	// MediaType is image/png, image/jpeg, image/gif or image/webp.
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// ToolCall is one call of a tool that the model asked for.
type ToolCall struct {
	// ID identifies the call; the tool result answers it by this ID.
	ID string `json:"id"`
	// Name is the tool's name.
	Name string `json:"name"`
	// Arguments are the arguments exactly as the model produced them. They
	// are usually a JSON object but may be anything, even invalid JSON or
	// empty: check with json.Valid before decoding or embedding them (a
	// json.RawMessage that is not valid JSON fails json.Marshal).
	//
	// Replayed in a later request, they go to OpenAI-compatible servers
	// byte for byte (function.arguments is a string). Anthropic's
	// tool_use.input must be an object: empty arguments go as {}, and
	// anything else that is not a JSON object as
	// {"_invalid_arguments": "<the text as the model sent it>"}, so the
	// model sees what it wrote with either provider.
	Arguments json.RawMessage `json:"arguments"`
}

// Tool is a tool the model may call.
type Tool struct {
	// Name is the tool's name, as the model will call it.
	Name string `json:"name"`
	// Description tells the model what the tool does.
	Description string `json:"description,omitempty"`
	// InputSchema is the JSON schema of the arguments, an object schema;
	// empty means a tool without arguments.
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// Request is one call of the model.
type Request struct {
	// Model names the model; empty means [Config.Model].
	Model string
	// System is the system prompt; empty means none.
	System string
	// Messages is the conversation so far, oldest first.
	Messages []Message
	// Tools are the tools the model may call; none means a plain chat.
	Tools []Tool
	// Temperature is the sampling temperature; nil leaves the provider's
	// default. Anthropic's current API (version 2026-10-21, which the v2 SDK
	// sends) rejects sampling parameters, so the Anthropic provider ignores
	// Temperature and TopP.
	Temperature *float64
	// TopP is the nucleus-sampling mass; nil leaves the provider's default.
	TopP *float64
	// MaxTokens caps the tokens of the answer; 0 means the provider's default
	// (OpenAI-compatible: none sent; Anthropic, which requires one: 4096).
	MaxTokens int
	// Computer describes the display behind the tool of Tools named
	// ComputerToolName; nil means there is none. A provider that offers
	// computer use natively (Anthropic, unless [Config.ComputerTool] says
	// function) sends its own tool type for it, sized by Computer, in place
	// of that tool's schema; the others send the tool as it is in Tools.
	Computer *ComputerDisplay
	// OnRetry, when not nil, is called before each wait to try the request
	// again after a retryable failure, so that callers can show it; it is
	// not sent. It runs on the goroutine of Complete, which waits for it.
	OnRetry func(Retry) `json:"-"`
}

// ComputerToolName is the name of the tool that [Request.Computer]
// describes, the name Anthropic's native computer-use tool has.
const ComputerToolName = "computer"

// ComputerDisplay is the display a computer tool drives.
type ComputerDisplay struct {
	// Width and Height are the size of the screenshots the model gets,
	// the space of the coordinates it sends (smaller than the display's
	// own when that is larger than a model takes in).
	Width, Height int
}

// Usage counts the tokens of one call.
type Usage struct {
	// PromptTokens counts the input, cached input included.
	PromptTokens int64 `json:"prompt_tokens"`
	// CompletionTokens counts the output.
	CompletionTokens int64 `json:"completion_tokens"`
}

// Response is the model's answer to a [Request].
type Response struct {
	// Message is the answer, with Role RoleAssistant. It has no ToolCalls
	// when the model is done.
	Message Message
	// Usage counts the tokens of this call.
	Usage Usage
	// StopReason is why the model stopped, as the provider said it
	// (OpenAI finish_reason such as "stop", "tool_calls" or "length";
	// Anthropic stop_reason such as "end_turn", "tool_use" or "max_tokens").
	StopReason string
}

// Provider calls a model.
type Provider interface {
	// Complete sends req and returns the model's answer. It retries what is
	// worth retrying, returns ctx.Err() when ctx ends first, and otherwise
	// fails with an [*Error].
	Complete(ctx context.Context, req Request) (Response, error)
}
