package llm

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"
)

// anthropicDefaultMaxTokens is sent when a Request sets no MaxTokens:
// Anthropic requires max_tokens.
const anthropicDefaultMaxTokens = 4096

// Versions of Anthropic's native computer-use tool ([Config.ComputerToolVersion]).
const (
	ComputerUse20250124 = "computer_20250124"
	ComputerUse20251124 = "computer_20251124"
)

// computerVersion is a version of Anthropic's computer-use tool type with
// the beta header it needs.
type computerVersion struct {
	typ  string
	beta string
	// zoom says the version has the zoom action, which the tool
	// definition must switch on (enable_zoom).
	zoom bool
}

// computerVersions are the native tool versions, with the anthropic-beta
// values that Anthropic's computer-use tool documentation gives for them
// (https://platform.claude.com/docs/en/agents-and-tools/tool-use/computer-use-tool):
// "computer-use-2025-11-24" for computer_20251124 (Claude Opus 4.5 and
// later, Sonnet 4.6), "computer-use-2025-01-24" for computer_20250124
// (Claude Sonnet 4.5, Haiku 4.5, Opus 4.1, Sonnet 4, Opus 4). Only
// computer_20251124 has zoom, switched on by enable_zoom.
var computerVersions = map[string]computerVersion{
	ComputerUse20250124: {typ: ComputerUse20250124, beta: "computer-use-2025-01-24"},
	ComputerUse20251124: {typ: ComputerUse20251124, beta: "computer-use-2025-11-24", zoom: true},
}

// anthropicBackend speaks the Messages API through anthropic-sdk-go.
type anthropicBackend struct {
	client anthropic.Client
	// computer is the native computer-use tool offered for a request's
	// computer tool; nil offers it as a function tool.
	computer *computerVersion
}

func newAnthropic(baseURL, apiKey string, hc *http.Client, timeout time.Duration) *anthropicBackend {
	if timeout <= 0 {
		timeout = 365 * 24 * time.Hour // no limit of our own; see below
	}
	opts := []option.RequestOption{
		// No ANTHROPIC_* variables, profiles or federation from the
		// environment: the Config is all there is.
		option.WithoutEnvironmentDefaults(),
		option.WithHTTPClient(hc),
		// Must stay 0: Complete retries, and errorMiddleware turns error
		// statuses into errors the SDK would otherwise retry, 4xx included.
		option.WithMaxRetries(0),
		option.WithMiddleware(errorMiddleware(ProviderAnthropic)),
		// Complete bounds each attempt itself. Setting the SDK's timeout too
		// keeps Messages.New from refusing large max_tokens values with
		// "streaming is required" before sending anything.
		option.WithRequestTimeout(timeout),
	}
	if baseURL != "" {
		opts = append(opts, option.WithBaseURL(baseURL))
	}
	if apiKey != "" {
		opts = append(opts, option.WithAPIKey(apiKey))
	}
	return &anthropicBackend{client: anthropic.NewClient(opts...)}
}

func (b *anthropicBackend) complete(ctx context.Context, req Request) (Response, error) {
	native := b.computer
	if req.Computer == nil {
		native = nil
	}
	params, err := anthropicParams(req, native)
	if err != nil {
		return Response{}, &Error{Provider: ProviderAnthropic, Message: err.Error()}
	}
	var opts []option.RequestOption
	if native != nil && slices.ContainsFunc(req.Tools, func(t Tool) bool { return t.Name == ComputerToolName }) {
		opts = append(opts, option.WithHeaderAdd("anthropic-beta", native.beta))
	}
	res, err := b.client.Messages.New(ctx, params, opts...)
	if err != nil {
		return Response{}, err
	}
	return anthropicResponse(res), nil
}

// anthropicParams translates req into Messages parameters. System messages
// join the system prompt; consecutive messages of one Anthropic role (such as
// the results of parallel tool calls) are merged into one message, as the API
// requires. Temperature and TopP are not sent: API version 2026-10-21
// rejects them. With native set, the computer tool goes as that
// computer-use tool type, sized by req.Computer.
func anthropicParams(req Request, native *computerVersion) (anthropic.MessageNewParams, error) {
	p := anthropic.MessageNewParams{Model: anthropic.Model(req.Model), MaxTokens: int64(req.MaxTokens)}
	if p.MaxTokens == 0 {
		p.MaxTokens = anthropicDefaultMaxTokens
	}
	var system []string
	if req.System != "" {
		system = append(system, req.System)
	}
	var lastRole string
	for _, m := range req.Messages {
		if m.Role == RoleSystem {
			if m.Text != "" {
				system = append(system, m.Text)
			}
			continue
		}
		role, blocks := anthropicBlocks(m)
		if len(blocks) == 0 {
			continue
		}
		if role == lastRole {
			last := p.Messages[len(p.Messages)-1]
			if last.OfUser != nil {
				last.OfUser.Content = append(last.OfUser.Content, blocks...)
			} else {
				last.OfAssistant.Content = append(last.OfAssistant.Content, blocks...)
			}
			continue
		}
		if role == RoleUser {
			p.Messages = append(p.Messages, anthropic.NewUserMessage(blocks...))
		} else {
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(blocks...))
		}
		lastRole = role
	}
	if len(system) > 0 {
		p.System = []anthropic.TextBlockParam{{Text: strings.Join(system, "\n\n")}}
	}
	for _, t := range req.Tools {
		if native != nil && t.Name == ComputerToolName {
			p.Tools = append(p.Tools, nativeComputerTool(*native, *req.Computer))
			continue
		}
		fields, err := schemaObject(t)
		if err != nil {
			return p, err
		}
		schema := anthropic.ToolInputSchemaParam{ExtraFields: map[string]any{}}
		for k, v := range fields {
			switch k {
			case "type": // always "object"
			case "properties":
				schema.Properties = v
			case "required":
				if err := json.Unmarshal(v, &schema.Required); err != nil {
					schema.ExtraFields[k] = v
				}
			default:
				schema.ExtraFields[k] = v
			}
		}
		tool := anthropic.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tool.Description = anthropic.String(t.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}
	return p, nil
}

// anthropicBlocks returns the Anthropic role and content blocks of m.
func anthropicBlocks(m Message) (string, []anthropic.ContentBlockParamUnion) {
	var blocks []anthropic.ContentBlockParamUnion
	switch m.Role {
	case RoleAssistant:
		if m.Text != "" {
			blocks = append(blocks, anthropic.NewTextBlock(m.Text))
		}
		for _, tc := range m.ToolCalls {
			blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, objectArguments(tc.Arguments), tc.Name))
		}
		return RoleAssistant, blocks
	case RoleTool:
		if m.Text == "" { // the API rejects empty text blocks
			return RoleUser, append(blocks, anthropic.ContentBlockParamUnion{OfToolResult: &anthropic.ToolResultBlockParam{
				ToolUseID: m.ToolCallID,
				IsError:   anthropic.Bool(m.IsError),
			}})
		}
		res := anthropic.NewToolResultBlock(m.ToolCallID, m.Text, m.IsError)
		for _, img := range m.Images {
			res.OfToolResult.Content = append(res.OfToolResult.Content, anthropic.ToolResultBlockParamContentUnion{
				OfImage: &anthropic.ImageBlockParam{Source: anthropic.ImageBlockParamSourceUnion{
					OfBase64: &anthropic.Base64ImageSourceParam{Data: img.Data, MediaType: anthropic.Base64ImageSourceMediaType(img.MediaType)},
				}},
			})
		}
		return RoleUser, append(blocks, res)
	default:
		if m.Text != "" {
			blocks = append(blocks, anthropic.NewTextBlock(m.Text))
		}
		return RoleUser, blocks
	}
}

// anthropicResponse translates a message: its text blocks joined by
// newlines, its tool_use blocks as tool calls.
func anthropicResponse(res *anthropic.Message) Response {
	msg := Message{Role: RoleAssistant}
	var texts []string
	for _, block := range res.Content {
		switch block.Type {
		case "text":
			texts = append(texts, block.Text)
		case "tool_use":
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{
				ID:        block.ID,
				Name:      block.Name,
				Arguments: append(json.RawMessage(nil), block.Input...),
			})
		}
	}
	msg.Text = strings.Join(texts, "\n")
	u := res.Usage
	return Response{
		Message: msg,
		Usage: Usage{
			PromptTokens:     u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
			CompletionTokens: u.OutputTokens,
		},
		StopReason: string(res.StopReason),
	}
}

// nativeComputerTool is the definition of Anthropic's computer-use tool of
// version v for display d. The non-beta parameters of the SDK have no
// computer-use variant, so the beta one is sent in its place; the API
// takes the tool once the beta header is there.
func nativeComputerTool(v computerVersion, d ComputerDisplay) anthropic.ToolUnionParam {
	w, h := int64(d.Width), int64(d.Height)
	var def any
	if v.typ == ComputerUse20251124 {
		def = anthropic.BetaToolComputerUse20251124Param{DisplayWidthPx: w, DisplayHeightPx: h, EnableZoom: anthropic.Bool(v.zoom)}
	} else {
		def = anthropic.BetaToolComputerUse20250124Param{DisplayWidthPx: w, DisplayHeightPx: h}
	}
	return param.Override[anthropic.ToolUnionParam](def)
}
