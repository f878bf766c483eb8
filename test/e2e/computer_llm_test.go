//go:build linux

package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// needDesktop skips (fails on CI) a test that needs a virtual display.
func needDesktop(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("Xvfb"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("Xvfb is missing (scripts/test-deps.sh installs it)")
		}
		t.Skip("Xvfb is not installed (scripts/test-deps.sh installs it)")
	}
}

// pngSize decodes a base64 PNG and returns its size.
func pngSize(t *testing.T, data string) (int, int) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		t.Fatalf("image data: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("image: %v", err)
	}
	return img.Bounds().Dx(), img.Bounds().Dy()
}

// anthropicRequest is what the fake Messages API needs of a request.
type anthropicRequest struct {
	beta  []string
	Tools []map[string]any `json:"tools"`
	// Messages' content blocks, as sent.
	Messages []struct {
		Role    string `json:"role"`
		Content []struct {
			Type      string `json:"type"`
			ToolUseID string `json:"tool_use_id"`
			Content   []struct {
				Type   string `json:"type"`
				Text   string `json:"text"`
				Source struct {
					MediaType string `json:"media_type"`
					Data      string `json:"data"`
				} `json:"source"`
			} `json:"content"`
		} `json:"content"`
	} `json:"messages"`
}

// toolResult returns the text and images of the tool_result answering id
// in the request's last message.
func (r anthropicRequest) toolResult(id string) (text string, images []string, mediaTypes []string) {
	if len(r.Messages) == 0 {
		return "", nil, nil
	}
	for _, b := range r.Messages[len(r.Messages)-1].Content {
		if b.Type != "tool_result" || b.ToolUseID != id {
			continue
		}
		for _, c := range b.Content {
			switch c.Type {
			case "text":
				text += c.Text
			case "image":
				images = append(images, c.Source.Data)
				mediaTypes = append(mediaTypes, c.Source.MediaType)
			}
		}
	}
	return text, images, mediaTypes
}

// TestLLMNativeComputerAnthropic: an llm session with a desktop, against a
// fake Anthropic Messages API, on a real worker and Xvfb. The model gets
// Anthropic's native computer tool with the screenshots' size (the
// display's, scaled to the model's limit) and its beta header; it takes a
// screenshot, whose PNG comes back as an image block of that size, clicks
// at a coordinate of that space and finds the pointer there.
func TestLLMNativeComputerAnthropic(t *testing.T) {
	t.Parallel()
	needDesktop(t)
	// Larger than a model takes in: screenshots and coordinates are scaled.
	const dw, dh = 1600, 1000
	sw, sh := api.ComputerScreenshotSize(dw, dh)
	if sw >= dw {
		t.Fatalf("%d×%d is not scaled (%d×%d): the test would not check scaling", dw, dh, sw, sh)
	}
	click := []int{sw / 3, sh / 2}
	var mu sync.Mutex
	var reqs []anthropicRequest
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/messages" {
			http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"no such path"}}`, 404)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req anthropicRequest
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad json"}}`, 400)
			return
		}
		req.beta = r.Header.Values("Anthropic-Beta")
		mu.Lock()
		reqs = append(reqs, req)
		n := len(reqs)
		mu.Unlock()
		use := func(id string, input any) []any {
			return []any{map[string]any{"type": "tool_use", "id": id, "name": "computer", "input": input}}
		}
		content, stop := []any{map[string]any{"type": "text", "text": "Done."}}, "end_turn"
		switch n {
		case 1:
			content, stop = use("toolu_1", map[string]any{"action": "screenshot"}), "tool_use"
		case 2:
			content, stop = use("toolu_2", map[string]any{"action": "left_click", "coordinate": click}), "tool_use"
		case 3:
			content, stop = use("toolu_3", map[string]any{"action": "cursor_position"}), "tool_use"
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": fmt.Sprintf("msg_%d", n), "type": "message", "role": "assistant",
			"model": "claude-test", "content": content, "stop_reason": stop, "usage": map[string]any{"input_tokens": 10, "output_tokens": 5}})
	}))
	defer fake.Close()
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=anthropic", "OUTPOST_LLM_BASE_URL=" + fake.URL, "OUTPOST_LLM_API_KEY=k", "OUTPOST_LLM_MODEL=claude-test"})
	token := setupOutpost(t, c, "native")
	startWorker(t, c, "native", token, "--desktop", "on")
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "native", Prompt: "click the middle left", Desktop: &api.DesktopSize{Width: dw, Height: dh},
		Agent: api.Agent{Kind: api.AgentLLM}})
	s := c.waitFinal(id, 90*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session: %+v", s.Status)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reqs) != 4 {
		t.Fatalf("%d model calls, want 4", len(reqs))
	}
	first := reqs[0]
	if strings.Join(first.beta, ",") != "computer-use-2025-01-24" {
		t.Errorf("anthropic-beta %q, want computer-use-2025-01-24", first.beta)
	}
	var native map[string]any
	for _, tool := range first.Tools {
		if tool["name"] == "computer" {
			native = tool
		}
	}
	if native == nil || native["type"] != "computer_20250124" || native["display_width_px"] != float64(sw) ||
		native["display_height_px"] != float64(sh) || native["input_schema"] != nil {
		t.Fatalf("computer tool %v, want the native computer_20250124 of %d×%d", native, sw, sh)
	}
	if len(first.Tools) < 2 {
		t.Errorf("tools %v: the other tools are missing", first.Tools)
	}
	for i, id := range []string{"toolu_1", "toolu_2"} {
		text, images, types := reqs[i+1].toolResult(id)
		if len(images) != 1 || types[0] != "image/png" {
			t.Fatalf("result of %s: %q with %d images, want one PNG", id, text, len(images))
		}
		if w, h := pngSize(t, images[0]); w != sw || h != sh {
			t.Errorf("screenshot of %s is %d×%d, want the advertised %d×%d", id, w, h, sw, sh)
		}
		if strings.Contains(text, images[0][:40]) {
			t.Errorf("result text of %s holds the base64", id)
		}
	}
	text, images, _ := reqs[3].toolResult("toolu_3")
	var pos api.ComputerResult
	if err := json.Unmarshal([]byte(text), &pos); err != nil || len(images) != 0 {
		t.Fatalf("cursor_position result %q (%d images): %v", text, len(images), err)
	}
	if len(pos.Coordinate) != 2 || pos.Coordinate[0] != click[0] || pos.Coordinate[1] != click[1] || pos.DisplayWidth != dw {
		t.Errorf("after the click at %v the pointer is at %v on a display of %d, want the same place on %d", click, pos.Coordinate, pos.DisplayWidth, dw)
	}
}

// TestLLMComputerOpenAIImages: an OpenAI-compatible model gets computer
// as a function tool, and its screenshot as an image_url part of a user
// message after the tool message, on a real worker and Xvfb.
func TestLLMComputerOpenAIImages(t *testing.T) {
	t.Parallel()
	needDesktop(t)
	fake := newFakeOpenAI(t,
		func(map[string]any) map[string]any {
			return toolCall("call_shot", "computer", `{"action":"screenshot"}`)
		},
		func(map[string]any) map[string]any { return say("I saw it.") })
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=openai", "OUTPOST_LLM_BASE_URL=" + fake.srv.URL + "/v1", "OUTPOST_LLM_MODEL=m"})
	token := setupOutpost(t, c, "vision")
	startWorker(t, c, "vision", token, "--desktop", "on")
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "vision", Prompt: "look", Desktop: &api.DesktopSize{Width: 640, Height: 480},
		Agent: api.Agent{Kind: api.AgentLLM}})
	s := c.waitFinal(id, 90*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session: %+v", s.Status)
	}
	reqs := fake.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	tools, _ := json.Marshal(reqs[0]["tools"])
	if !strings.Contains(string(tools), `"name":"computer"`) || strings.Contains(string(tools), "computer_2025") {
		t.Errorf("tools %s, want computer as a function tool", tools)
	}
	msgs, _ := reqs[1]["messages"].([]any)
	var tool, images map[string]any
	for i, m := range msgs {
		if mm, _ := m.(map[string]any); mm["role"] == "tool" && i+1 < len(msgs) {
			tool = mm
			images, _ = msgs[i+1].(map[string]any)
		}
	}
	if tool == nil || images == nil || images["role"] != "user" {
		t.Fatalf("messages %v: want a user message after the tool message", msgs)
	}
	if text, _ := tool["content"].(string); strings.Contains(text, "base64,") || !strings.Contains(text, "next user message") {
		t.Errorf("tool message %q", text)
	}
	parts, _ := images["content"].([]any)
	var url string
	var named bool
	for _, p := range parts {
		pm, _ := p.(map[string]any)
		if iu, ok := pm["image_url"].(map[string]any); ok {
			url, _ = iu["url"].(string)
		}
		if text, _ := pm["text"].(string); strings.Contains(text, "call_shot") {
			named = true
		}
	}
	data, ok := strings.CutPrefix(url, "data:image/png;base64,")
	if !ok || !named {
		t.Fatalf("image message %v: want a data: URL after a line naming call_shot", images)
	}
	if w, h := pngSize(t, data); w != 640 || h != 480 {
		t.Errorf("screenshot %d×%d, want 640×480", w, h)
	}
}

// TestScriptComputerClick: a script step can call computer: a
// screenshot, then a click whose screenshot comes back and leaves the
// pointer where it clicked.
func TestScriptComputerClick(t *testing.T) {
	t.Parallel()
	needDesktop(t)
	c := startCluster(t)
	token := setupOutpost(t, c, "scripted")
	startWorker(t, c, "scripted", token, "--desktop", "on")
	step := func(args api.ComputerArgs) api.Step {
		b, _ := json.Marshal(args)
		return api.Step{Tool: api.ToolComputer, Args: b}
	}
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "scripted", Desktop: &api.DesktopSize{Width: 640, Height: 480},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			step(api.ComputerArgs{Action: api.ComputerScreenshot}),
			step(api.ComputerArgs{Action: api.ComputerLeftClick, Coordinate: []int{123, 234}}),
			step(api.ComputerArgs{Action: api.ComputerCursorPosition}),
		}}})
	s := c.waitFinal(id, 90*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session: %+v", s.Status)
	}
	results := map[int64]api.ComputerResult{}
	for _, ev := range c.events(id) {
		if ev.Type == api.EventResult && ev.Tool == api.ToolComputer {
			var r api.ComputerResult
			if err := json.Unmarshal(ev.Value, &r); err != nil {
				t.Fatalf("result %d: %v", ev.CallSeq, err)
			}
			results[ev.CallSeq] = r
		}
	}
	for _, seq := range []int64{1, 2} {
		if img := decodePNG(t, results[seq]); img.Bounds().Dx() != 640 || img.Bounds().Dy() != 480 {
			t.Errorf("screenshot of step %d is %v", seq, img.Bounds())
		}
	}
	if p := results[3].Coordinate; len(p) != 2 || p[0] != 123 || p[1] != 234 {
		t.Errorf("after the click the pointer is at %v, want [123 234]", p)
	}
}

// TestServerRefusesUnknownComputerSettings: an unknown computer-tool or
// image setting stops the server at start-up, naming the variable, before
// it listens.
func TestServerRefusesUnknownComputerSettings(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"OUTPOST_LLM_COMPUTER_TOOL=beta", "OUTPOST_LLM_COMPUTER_TOOL_VERSION=computer_20241022", "OUTPOST_LLM_TOOL_IMAGES=inline"} {
		name, _, _ := strings.Cut(bad, "=")
		code, _, stderr := runExit(t, []string{"OUTPOST_LLM_PROVIDER=anthropic", "OUTPOST_LLM_MODEL=m", bad},
			"server", "--listen", freeAddr(t), "--data-dir", t.TempDir())
		if code == 0 || !strings.Contains(stderr, name) {
			t.Errorf("%s: exit %d, stderr %q; want a failure naming %s", bad, code, stderr, name)
		}
	}
}
