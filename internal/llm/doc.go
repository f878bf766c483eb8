// Package llm is Outpost's provider layer for model calls: one
// provider-neutral request/response shape ([Request], [Response], [Message],
// [ToolCall], [Tool]) and a [Provider] that sends it to either an
// OpenAI-compatible Chat Completions endpoint (OpenAI, vLLM, Ollama,
// llama.cpp, LiteLLM, …) or Anthropic's Messages API, through the official
// Go SDKs.
//
// The agent loop of a session builds a [Request] from the conversation so
// far and the remote's tools (their JSON schemas), calls
// [Provider.Complete], executes the tool calls of the returned assistant
// [Message] and appends their results as [RoleTool] messages, in order.
// This package does not run that loop; it only translates and transports
// one step of it.
//
// Failure handling lives here, in one place for both providers:
//
//   - The SDKs' own retries are disabled. Complete retries 429, 5xx and
//     connection errors itself, with exponential backoff and jitter, and
//     waits exactly as long as a Retry-After (or Retry-After-Ms) header asks
//     when there is one.
//   - Each attempt has its own timeout ([Config.Timeout]); a timed-out attempt
//     is not retried.
//   - Cancelling the context aborts the call at once, mid-request or
//     mid-backoff, and Complete returns ctx.Err() itself.
//   - Every other error is an [*Error] carrying the provider's own message
//     from the error body, the HTTP status and whether it was retryable.
//
// Tool-call arguments are passed through exactly as the model produced them,
// even when they are not valid JSON, so that the loop can answer the model
// with a "malformed arguments" tool error instead of failing. Replayed, they
// keep the conversation valid for the provider and still show the model what
// it wrote: verbatim to OpenAI-compatible servers, and to Anthropic, whose
// tool_use.input must be an object, wrapped as
// {"_invalid_arguments": "<raw text>"} (see [ToolCall.Arguments]).
//
// Computer use: a request whose tools include one named [ComputerToolName]
// says the size of its screenshots in [Request.Computer]. Anthropic models
// then get Anthropic's native computer-use tool type with its beta header
// ([Config.ComputerTool], [Config.ComputerToolVersion]); OpenAI-compatible
// servers get the function tool, and tool results' images in a user
// message of image_url parts after the turn's tool messages
// ([Config.ToolImages]).
package llm
