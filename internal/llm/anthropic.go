package llm

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// anthropicDefaultMaxTokens is sent when a Request sets no MaxTokens:
// Anthropic requires max_tokens.
const anthropicDefaultMaxTokens = 4096

// anthropicBackend speaks the Messages API through anthropic-sdk-go.
type anthropicBackend struct {
	client anthropic.Client
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
	params, err := anthropicParams(req)
	if err != nil {
		return Response{}, &Error{Provider: ProviderAnthropic, Message: err.Error()}
	}
	res, err := b.client.Messages.New(ctx, params)
	if err != nil {
		return Response{}, err
	}
	return anthropicResponse(res), nil
}

// anthropicParams translates req into Messages parameters. System messages
// join the system prompt; consecutive messages of one Anthropic role (such as
// the results of parallel tool calls) are merged into one message, as the API
// requires. Temperature and TopP are not sent: API version 2026-10-21
// rejects them.
func anthropicParams(req Request) (anthropic.MessageNewParams, error) {
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
