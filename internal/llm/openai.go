package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// openAIDefaultBaseURL is OpenAI's public API.
const openAIDefaultBaseURL = "https://api.openai.com/v1"

// openAIBackend speaks Chat Completions through openai-go.
type openAIBackend struct {
	svc openai.ChatCompletionService
	// completionTokens sends MaxTokens as max_completion_tokens, which
	// OpenAI's own API wants (its reasoning models reject max_tokens);
	// other servers get the widely supported max_tokens.
	completionTokens bool
	// imagesAsText leaves tool results' images out, with a line saying so,
	// for servers that reject image content.
	imagesAsText bool
}

func newOpenAI(baseURL, apiKey string, hc *http.Client) *openAIBackend {
	if baseURL == "" {
		baseURL = openAIDefaultBaseURL
	}
	opts := []option.RequestOption{
		option.WithBaseURL(baseURL),
		option.WithHTTPClient(hc),
		// Must stay 0: Complete retries, and errorMiddleware turns error
		// statuses into errors the SDK would otherwise retry, 4xx included.
		option.WithMaxRetries(0),
		option.WithMiddleware(errorMiddleware(ProviderOpenAI)),
	}
	if apiKey != "" {
		opts = append(opts, option.WithAPIKey(apiKey))
	}
	u, err := url.Parse(baseURL)
	official := err == nil && strings.EqualFold(u.Hostname(), "api.openai.com")
	// NewChatCompletionService, unlike NewClient, takes only these options:
	// no OPENAI_* environment variable leaks in.
	return &openAIBackend{svc: openai.NewChatCompletionService(opts...), completionTokens: official}
}

func (b *openAIBackend) complete(ctx context.Context, req Request) (Response, error) {
	params, err := b.params(req)
	if err != nil {
		return Response{}, &Error{Provider: ProviderOpenAI, Message: err.Error()}
	}
	res, err := b.svc.New(ctx, params)
	if err != nil {
		return Response{}, err
	}
	return openAIResponse(res)
}

// params translates req into Chat Completions parameters.
func (b *openAIBackend) params(req Request) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: req.Model}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	// Tool messages carry text only: the images of a turn's tool results
	// follow its tool messages in one user message, the way vision models
	// of Chat Completions take images.
	var images []toolImage
	for i, m := range req.Messages {
		p.Messages = append(p.Messages, openAIMessage(m, b.imagesAsText))
		if m.Role != RoleTool || b.imagesAsText {
			continue
		}
		for _, img := range m.Images {
			images = append(images, toolImage{m.ToolCallID, img})
		}
		if last := i == len(req.Messages)-1; (last || req.Messages[i+1].Role != RoleTool) && len(images) > 0 {
			p.Messages = append(p.Messages, openAIImageMessage(images))
			images = nil
		}
	}
	for _, t := range req.Tools {
		fields, err := schemaObject(t)
		if err != nil {
			return p, err
		}
		params := make(shared.FunctionParameters, len(fields))
		for k, v := range fields {
			params[k] = v
		}
		def := shared.FunctionDefinitionParam{Name: t.Name, Parameters: params}
		if t.Description != "" {
			def.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(def))
	}
	if req.Temperature != nil {
		p.Temperature = openai.Float(*req.Temperature)
	}
	if req.TopP != nil {
		p.TopP = openai.Float(*req.TopP)
	}
	if req.MaxTokens > 0 {
		if b.completionTokens {
			p.MaxCompletionTokens = openai.Int(int64(req.MaxTokens))
		} else {
			p.MaxTokens = openai.Int(int64(req.MaxTokens))
		}
	}
	return p, nil
}

// toolImage is an image of the tool result answering call.
type toolImage struct {
	call string
	img  Image
}

// openAIImageMessage is the user message that carries the images of a
// turn's tool results, each after a line naming its call.
func openAIImageMessage(images []toolImage) openai.ChatCompletionMessageParamUnion {
	parts := []openai.ChatCompletionContentPartUnionParam{
		openai.TextContentPart("The images of the tool results above, each after the id of its tool call:"),
	}
	for _, ti := range images {
		parts = append(parts,
			openai.TextContentPart("Tool call "+ti.call+":"),
			openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
				URL: "data:" + ti.img.MediaType + ";base64," + ti.img.Data,
			}))
	}
	return openai.UserMessage(parts)
}

// openAIMessage translates one message; assistant tool calls are replayed
// with their arguments exactly as the model sent them. A tool result's
// images are named in its text: a user message after the turn's tool
// messages carries them, unless imagesAsText leaves them out.
func openAIMessage(m Message, imagesAsText bool) openai.ChatCompletionMessageParamUnion {
	switch m.Role {
	case RoleSystem:
		return openai.SystemMessage(m.Text)
	case RoleAssistant:
		a := openai.ChatCompletionAssistantMessageParam{}
		if m.Text != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = openai.String(m.Text)
		}
		for _, tc := range m.ToolCalls {
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: tc.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name:      tc.Name,
						Arguments: string(tc.Arguments),
					},
				},
			})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}
	case RoleTool:
		text := m.Text
		if m.IsError && !strings.HasPrefix(strings.ToLower(text), "error") {
			text = "Error: " + text
		}
		for _, img := range m.Images {
			if imagesAsText {
				text += fmt.Sprintf("\n[an image (%s, %d bytes base64) is on the session's transcript; this provider's tool results carry text only]", img.MediaType, len(img.Data))
			} else {
				text += fmt.Sprintf("\n[an image (%s) of this result follows in the next user message]", img.MediaType)
			}
		}
		return openai.ToolMessage(text, m.ToolCallID)
	default: // RoleUser; validate has rejected the rest
		return openai.UserMessage(m.Text)
	}
}

// openAIResponse translates the first choice of a completion.
func openAIResponse(res *openai.ChatCompletion) (Response, error) {
	if res == nil || len(res.Choices) == 0 {
		return Response{}, &Error{Provider: ProviderOpenAI, Message: "response has no choices"}
	}
	choice := res.Choices[0]
	msg := Message{Role: RoleAssistant, Text: choice.Message.Content}
	if msg.Text == "" && choice.Message.Refusal != "" {
		msg.Text = choice.Message.Refusal
	}
	for i, tc := range choice.Message.ToolCalls {
		call := ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: json.RawMessage(tc.Function.Arguments)}
		if tc.Type == "custom" {
			call.Name, call.Arguments = tc.Custom.Name, json.RawMessage(tc.Custom.Input)
		}
		// Some servers send the arguments as an object, not as a string.
		if raw := strings.TrimSpace(tc.Function.JSON.Arguments.Raw()); len(call.Arguments) == 0 && strings.HasPrefix(raw, "{") {
			call.Arguments = json.RawMessage(raw)
		}
		if call.ID == "" { // some local servers leave it out
			call.ID = "call_" + strconv.Itoa(i)
		}
		msg.ToolCalls = append(msg.ToolCalls, call)
	}
	resp := Response{
		Message:    msg,
		Usage:      Usage{PromptTokens: res.Usage.PromptTokens, CompletionTokens: res.Usage.CompletionTokens},
		StopReason: choice.FinishReason,
	}
	return resp, nil
}
