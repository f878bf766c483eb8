//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/demo"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// fakeOpenAI is an OpenAI-compatible Chat Completions server on loopback
// that plays back scripted model turns and records every request.
type fakeOpenAI struct {
	t     *testing.T
	srv   *httptest.Server
	mu    sync.Mutex // guards the following
	reqs  []map[string]any
	turns []func(req map[string]any) map[string]any
	// outage are statuses answered (with Retry-After: 0) to the next
	// requests before the turns go on: a provider's short outage.
	outage []int
}

// fail makes the next requests fail with statuses, in order.
func (f *fakeOpenAI) fail(statuses ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outage = append(f.outage, statuses...)
}

func newFakeOpenAI(t *testing.T, turns ...func(req map[string]any) map[string]any) *fakeOpenAI {
	f := &fakeOpenAI{t: t, turns: turns}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.Error(w, `{"error":{"message":"no such path"}}`, 404)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req map[string]any
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, `{"error":{"message":"bad json"}}`, 400)
			return
		}
		f.mu.Lock()
		if len(f.outage) > 0 {
			status := f.outage[0]
			f.outage = f.outage[1:]
			f.mu.Unlock()
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"message":"the provider is down for a moment"}}`, status)
			return
		}
		f.reqs = append(f.reqs, req)
		n := len(f.reqs)
		var turn func(map[string]any) map[string]any
		if n <= len(f.turns) {
			turn = f.turns[n-1]
		}
		f.mu.Unlock()
		if turn == nil {
			http.Error(w, `{"error":{"message":"the script has no more turns"}}`, 500)
			return
		}
		msg := turn(req)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion", "created": time.Now().Unix(), "model": req["model"],
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish(msg)}},
			"usage":   map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
		})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func finish(msg map[string]any) string {
	if _, ok := msg["tool_calls"]; ok {
		return "tool_calls"
	}
	return "stop"
}

func (f *fakeOpenAI) requests() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.reqs...)
}

func toolCall(id, name, args string) map[string]any {
	return map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
		"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args}}}}
}

func say(text string) map[string]any { return map[string]any{"role": "assistant", "content": text} }

// lastMessage returns the last message of a request.
func lastMessage(req map[string]any) map[string]any {
	msgs, _ := req["messages"].([]any)
	if len(msgs) == 0 {
		return nil
	}
	m, _ := msgs[len(msgs)-1].(map[string]any)
	return m
}

// TestLLMSession runs an llm session against a fake OpenAI-compatible
// server: the model runs a command on the worker, sends malformed
// arguments and gets a tool error, then finishes. The requests carry the
// model, the tool schemas and the results in order.
func TestLLMSession(t *testing.T) {
	t.Parallel()
	var sawResult, sawToolError string
	fake := newFakeOpenAI(t,
		func(req map[string]any) map[string]any {
			return toolCall("call_1", "exec", `{"command":"echo hello from the model > note.txt && cat note.txt"}`)
		},
		func(req map[string]any) map[string]any {
			m := lastMessage(req)
			sawResult, _ = m["content"].(string)
			return toolCall("call_2", "write_file", `{"path": "x.txt", "content": `) // malformed
		},
		func(req map[string]any) map[string]any {
			m := lastMessage(req)
			sawToolError, _ = m["content"].(string)
			return say("All done: note.txt says hello.")
		},
	)
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=openai", "OUTPOST_LLM_BASE_URL=" + fake.srv.URL + "/v1",
		"OUTPOST_LLM_API_KEY=sk-test", "OUTPOST_LLM_MODEL=fake-model"})
	token := setupOutpost(t, c, "models")
	_, workspace := startWorker(t, c, "models", token)
	repo, err := demo.MakeRepo(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// One repo: its clone is call 1 and the model's calls come after it.
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "models", Title: "llm", Prompt: "Write a note saying hello.",
		Repos: []api.Repo{{URL: repo, Name: "demo"}}, Agent: api.Agent{Kind: api.AgentLLM}})
	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	if u := s.Status.Usage; u.ModelCalls != 3 || u.PromptTokens != 300 || u.CompletionTokens != 30 {
		t.Errorf("usage %+v, want 3 calls, 300 + 30 tokens", u)
	}
	note, err := os.ReadFile(filepath.Join(workspace, "note.txt"))
	if err != nil || strings.TrimSpace(string(note)) != "hello from the model" {
		t.Fatalf("note.txt on the worker: %q %v", note, err)
	}
	if !strings.Contains(sawResult, "hello from the model") || !strings.Contains(sawResult, "exit status 0") {
		t.Errorf("the model got %q as the exec result", sawResult)
	}
	if !strings.Contains(sawToolError, "not valid JSON") {
		t.Errorf("the model got %q for malformed arguments", sawToolError)
	}
	reqs := fake.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want 3", len(reqs))
	}
	first := reqs[0]
	if first["model"] != "fake-model" {
		t.Errorf("model %v", first["model"])
	}
	tools, _ := first["tools"].([]any)
	names := map[string]bool{}
	for _, tl := range tools {
		fn, _ := tl.(map[string]any)["function"].(map[string]any)
		names[fn["name"].(string)] = true
		if fn["parameters"] == nil {
			t.Errorf("tool %v has no schema", fn["name"])
		}
	}
	for _, n := range api.ToolNames() {
		if !names[n] {
			t.Errorf("tool %s not offered to the model", n)
		}
	}
	msgs, _ := first["messages"].([]any)
	if len(msgs) != 2 || msgs[0].(map[string]any)["role"] != "system" || msgs[1].(map[string]any)["content"] != "Write a note saying hello." {
		t.Errorf("first request messages %v", msgs)
	}
	var roles []string
	for _, m := range reqs[2]["messages"].([]any) {
		roles = append(roles, m.(map[string]any)["role"].(string))
	}
	if strings.Join(roles, ",") != "system,user,assistant,tool,assistant,tool" {
		t.Fatalf("message order in the last request: %v", roles)
	}
	// The malformed arguments are replayed as the model wrote them.
	replayed, _ := json.Marshal(reqs[2]["messages"].([]any)[4])
	if !strings.Contains(string(replayed), `"arguments":"{\"path\": \"x.txt\", \"content\": "`) {
		t.Errorf("malformed call replayed as %s", replayed)
	}
	if sys := fmt.Sprint(msgs[0].(map[string]any)["content"]); !strings.Contains(sys, "repos/demo") {
		t.Errorf("the system prompt does not name the repo: %q", sys)
	}
	var assistant int
	for _, ev := range c.events(id) {
		if ev.Type == api.EventMessage && ev.Role == api.RoleAssistant {
			assistant++
		}
	}
	if assistant != 3 {
		t.Errorf("%d assistant messages on the transcript, want 3", assistant)
	}
}

// TestLLMConversation waits for the user in an interactive session, then
// delivers a message sent with the CLI at the next turn.
func TestLLMConversation(t *testing.T) {
	t.Parallel()
	var sawUser string
	fake := newFakeOpenAI(t,
		func(req map[string]any) map[string]any { return say("Which file should I create?") },
		func(req map[string]any) map[string]any {
			sawUser, _ = lastMessage(req)["content"].(string)
			return toolCall("call_1", "write_file", `{"path":"answer.txt","content":"42"}`)
		},
		func(req map[string]any) map[string]any { return say("Created answer.txt.") },
	)
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=openai", "OUTPOST_LLM_BASE_URL=" + fake.srv.URL + "/v1",
		"OUTPOST_LLM_MODEL=fake-model"})
	token := setupOutpost(t, c, "chat")
	_, workspace := startWorker(t, c, "chat", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "chat", Title: "chat", Prompt: "Create a file.",
		Agent: api.Agent{Kind: api.AgentLLM, Interactive: true}, Limits: api.Limits{IdleS: 60}})
	waitfor.Within(t, 30*time.Second, "the agent to wait for the user", func() bool {
		return c.session(id).Status.StatusDetail == api.DetailWaitingForUser
	})
	run(t, c.env(c.admin), "sessions", "send", id, "Call it answer.txt.")
	waitfor.Within(t, 30*time.Second, "answer.txt", func() bool {
		b, err := os.ReadFile(filepath.Join(workspace, "answer.txt"))
		return err == nil && string(b) == "42"
	})
	if sawUser != "Call it answer.txt." {
		t.Errorf("the model got %q as the user's message", sawUser)
	}
	waitfor.Within(t, 30*time.Second, "the agent to wait again", func() bool {
		s := c.session(id)
		return s.Status.StatusDetail == api.DetailWaitingForUser && s.Status.Usage.ModelCalls == 3
	})
	if code := c.api("POST", "/v1/sessions/"+id+"/terminate", c.admin, nil, nil); code != 200 {
		t.Fatalf("terminate: %d", code)
	}
}

// TestLLMProviderFailure: a provider that keeps answering 500 ends the
// session in error, with the provider's message as the reason.
func TestLLMProviderFailure(t *testing.T) {
	t.Parallel()
	fake := newFakeOpenAI(t) // no turns: every request gets a 500
	// A short retry window: the provider stays down, so the session ends
	// once it is spent.
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=openai", "OUTPOST_LLM_BASE_URL=" + fake.srv.URL + "/v1", "OUTPOST_LLM_MODEL=m",
		"OUTPOST_LLM_RETRY_FOR=3s"})
	token := setupOutpost(t, c, "broken")
	startWorker(t, c, "broken", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "broken", Prompt: "hi", Agent: api.Agent{Kind: api.AgentLLM}})
	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusError || !strings.Contains(s.Status.Reason, "the script has no more turns") {
		t.Fatalf("session after provider failures: %+v", s.Status)
	}
	if n := len(fake.requests()); n < 2 {
		t.Errorf("%d requests: a 500 must be retried", n)
	}
}

// TestLLMServerKill9BetweenTurns kills the server with SIGKILL while the
// model's first tool call runs, and restarts it: the session goes on from
// the transcript without asking the model for its first turn again.
func TestLLMServerKill9BetweenTurns(t *testing.T) {
	t.Parallel()
	gate := filepath.Join(t.TempDir(), "gate")
	fake := newFakeOpenAI(t,
		func(req map[string]any) map[string]any {
			return toolCall("call_1", "exec", fmt.Sprintf(`{"command":"while [ ! -e %s ]; do sleep 0.05; done; echo gate-open"}`, gate))
		},
		func(req map[string]any) map[string]any { return say("Finished after the restart.") },
	)
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=openai", "OUTPOST_LLM_BASE_URL=" + fake.srv.URL + "/v1", "OUTPOST_LLM_MODEL=m"})
	token := setupOutpost(t, c, "durable-llm")
	startWorker(t, c, "durable-llm", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "durable-llm", Prompt: "wait for the gate", Agent: api.Agent{Kind: api.AgentLLM}})
	waitEvent(t, c, id, "the tool call to start", func(ev api.Event) bool { return ev.Type == api.EventCall })
	c.server.kill9()
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.startServer()
	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session after restart: %+v", s.Status)
	}
	reqs := fake.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2 (the first turn is not asked again)", len(reqs))
	}
	if m := lastMessage(reqs[1]); m["role"] != "tool" || !strings.Contains(fmt.Sprint(m["content"]), "gate-open") {
		t.Fatalf("the second request ends with %v", m)
	}
}

// TestLLMToolErrors: an unknown tool and a command that times out come
// back to the model as tool errors, and the session goes on.
func TestLLMToolErrors(t *testing.T) {
	t.Parallel()
	var unknown, timedOut map[string]any
	fake := newFakeOpenAI(t,
		func(req map[string]any) map[string]any { return toolCall("c1", "teleport", `{}`) },
		func(req map[string]any) map[string]any {
			unknown = lastMessage(req)
			return toolCall("c2", "exec", `{"command":"sleep 30","timeout_s":1}`)
		},
		func(req map[string]any) map[string]any {
			timedOut = lastMessage(req)
			return say("Gave up.")
		},
	)
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=openai", "OUTPOST_LLM_BASE_URL=" + fake.srv.URL + "/v1", "OUTPOST_LLM_MODEL=m"})
	token := setupOutpost(t, c, "errors")
	startWorker(t, c, "errors", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "errors", Prompt: "try things", Agent: api.Agent{Kind: api.AgentLLM}})
	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session: %+v", s.Status)
	}
	if txt := fmt.Sprint(unknown["content"]); unknown["role"] != "tool" || !strings.Contains(txt, "no tool") {
		t.Errorf("unknown tool answer %v", unknown)
	}
	if txt := strings.ToLower(fmt.Sprint(timedOut["content"])); timedOut["role"] != "tool" || !strings.Contains(txt, "error") || !strings.Contains(txt, "time") {
		t.Errorf("timed-out tool answer %v", timedOut)
	}
}

// TestLLMTerminateDuringModelCall terminates a session while the model is
// thinking: the request is abandoned and the session ends at once.
func TestLLMTerminateDuringModelCall(t *testing.T) {
	t.Parallel()
	called := make(chan struct{}, 1)
	abandoned := make(chan struct{}, 1)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // the server notices a client gone only once the body is read
		called <- struct{}{}
		select {
		case <-r.Context().Done():
			abandoned <- struct{}{}
		case <-time.After(60 * time.Second):
		}
	}))
	defer slow.Close()
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=openai", "OUTPOST_LLM_BASE_URL=" + slow.URL + "/v1", "OUTPOST_LLM_MODEL=m"})
	token := setupOutpost(t, c, "slow")
	startWorker(t, c, "slow", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "slow", Prompt: "think hard", Agent: api.Agent{Kind: api.AgentLLM}})
	select {
	case <-called:
	case <-time.After(30 * time.Second):
		t.Fatal("the model was never called")
	}
	start := time.Now()
	if code := c.api("POST", "/v1/sessions/"+id+"/terminate", c.admin, nil, nil); code != 200 {
		t.Fatalf("terminate: %d", code)
	}
	s := c.waitFinal(id, 10*time.Second)
	if s.Status.StatusDetail != api.DetailUserRequest {
		t.Fatalf("session: %+v", s.Status)
	}
	select {
	case <-abandoned:
	case <-time.After(10 * time.Second):
		t.Fatal("the model request was not abandoned")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("terminate took %s", d)
	}
}

// TestLLMAnthropic runs a session against a fake Anthropic Messages API:
// tool_use and tool_result blocks, the system prompt apart, usage counted,
// and arguments that are not an object (as an Anthropic-compatible server
// might send) answered with a tool error and replayed wrapped in an object.
func TestLLMAnthropic(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reqs []map[string]any
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/messages" {
			http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"no such path"}}`, 404)
			return
		}
		var req map[string]any
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		reqs = append(reqs, req)
		n := len(reqs)
		mu.Unlock()
		content := []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "exec", "input": map[string]any{"command": "echo from-claude"}}}
		stop := "tool_use"
		switch {
		case n == 2:
			content = []any{map[string]any{"type": "tool_use", "id": "toolu_2", "name": "exec", "input": `{"command": "ls`}}
		case n > 2:
			content, stop = []any{map[string]any{"type": "text", "text": "Done."}}, "end_turn"
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": fmt.Sprintf("msg_%d", n), "type": "message", "role": "assistant",
			"model": req["model"], "content": content, "stop_reason": stop, "usage": map[string]any{"input_tokens": 50, "output_tokens": 5}})
	}))
	defer fake.Close()
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=anthropic", "OUTPOST_LLM_BASE_URL=" + fake.URL, "OUTPOST_LLM_API_KEY=k", "OUTPOST_LLM_MODEL=claude-test"})
	token := setupOutpost(t, c, "claude")
	startWorker(t, c, "claude", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "claude", Prompt: "say hello", Agent: api.Agent{Kind: api.AgentLLM}})
	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.Usage.ModelCalls != 3 || s.Status.Usage.PromptTokens != 150 {
		t.Fatalf("session: %+v", s.Status)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reqs) != 3 || reqs[0]["model"] != "claude-test" || reqs[0]["system"] == nil {
		t.Fatalf("requests %v", reqs)
	}
	msgs, _ := reqs[1]["messages"].([]any)
	if len(msgs) != 3 {
		t.Fatalf("second request messages %v", msgs)
	}
	last, _ := json.Marshal(msgs[2])
	if !strings.Contains(string(last), `"tool_use_id":"toolu_1"`) || !strings.Contains(string(last), "from-claude") {
		t.Errorf("tool result block %s", last)
	}
	msgs, _ = reqs[2]["messages"].([]any)
	if len(msgs) != 5 {
		t.Fatalf("third request messages %v", msgs)
	}
	call, _ := json.Marshal(msgs[3])
	if !strings.Contains(string(call), `"input":{"_invalid_arguments":"\"{\\\"command\\\": \\\"ls\""}`) {
		t.Errorf("the call with bad arguments replayed as %s", call)
	}
	answer, _ := json.Marshal(msgs[4])
	if !strings.Contains(string(answer), `"tool_use_id":"toolu_2"`) || !strings.Contains(string(answer), `"is_error":true`) ||
		!strings.Contains(string(answer), "not valid") {
		t.Errorf("the answer to the bad arguments %s", answer)
	}
}

// TestLLMMessagesArriveInOrder sends one message before any machine has
// the session and one while the model is thinking: the prompt comes first,
// the early message next, and the late one is answered at the next turn
// instead of being lost behind the model's answer.
func TestLLMMessagesArriveInOrder(t *testing.T) {
	t.Parallel()
	thinking := make(chan struct{})
	release := make(chan struct{})
	var first, second []any
	fake := newFakeOpenAI(t,
		func(req map[string]any) map[string]any {
			first, _ = req["messages"].([]any)
			close(thinking)
			<-release
			return say("Done, I think.")
		},
		func(req map[string]any) map[string]any {
			second, _ = req["messages"].([]any)
			return say("Now done.")
		},
	)
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=openai", "OUTPOST_LLM_BASE_URL=" + fake.srv.URL + "/v1", "OUTPOST_LLM_MODEL=m"})
	token := setupOutpost(t, c, "order")
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "order", Prompt: "the task", Agent: api.Agent{Kind: api.AgentLLM}})
	run(t, c.env(c.admin), "sessions", "send", id, "early note")
	startWorker(t, c, "order", token)
	select {
	case <-thinking:
	case <-time.After(30 * time.Second):
		t.Fatal("the model was never called")
	}
	run(t, c.env(c.admin), "sessions", "send", id, "late note")
	close(release)
	s := c.waitFinal(id, 30*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.Usage.ModelCalls != 2 {
		t.Fatalf("session: %+v", s.Status)
	}
	text := func(msgs []any, i int) string { return fmt.Sprint(msgs[i].(map[string]any)["content"]) }
	if len(first) != 3 || text(first, 1) != "the task" || text(first, 2) != "early note" {
		t.Fatalf("first request %v", first)
	}
	if n := len(second); n != 5 || text(second, 3) != "Done, I think." || text(second, 4) != "late note" {
		t.Fatalf("second request %v", second)
	}
	// Once the session is over, a message is refused rather than left unanswered.
	if code := c.api("POST", "/v1/sessions/"+id+"/messages", c.admin, api.MessageRequest{Text: "too late"}, nil); code != 409 {
		t.Fatalf("message to an ended session: %d, want 409", code)
	}
}

// TestLLMProviderOutage: the provider fails (503, then 429) before each of
// the model's two answers; the session rides it out, each retry shows on
// the transcript in the CLI and the web UI, the model reads a failed
// command's result as a shell shows it, and the system prompt describes
// the machine.
func TestLLMProviderOutage(t *testing.T) {
	t.Parallel()
	var sawResult string
	var fake *fakeOpenAI
	fake = newFakeOpenAI(t,
		func(req map[string]any) map[string]any {
			fake.fail(429)
			return toolCall("call_1", "exec", `{"command":"echo no such target >&2; exit 1"}`)
		},
		func(req map[string]any) map[string]any {
			sawResult, _ = lastMessage(req)["content"].(string)
			return say("The build is broken.")
		},
	)
	fake.fail(503)
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=openai", "OUTPOST_LLM_BASE_URL=" + fake.srv.URL + "/v1",
		"OUTPOST_LLM_API_KEY=sk-test", "OUTPOST_LLM_MODEL=fake-model", "OUTPOST_LLM_RETRY_FOR=30s"})
	token := setupOutpost(t, c, "flaky")
	startWorker(t, c, "flaky", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "flaky", Title: "outage", Prompt: "Build it.", Agent: api.Agent{Kind: api.AgentLLM}})
	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	// OpenAI's tool messages have no error flag: a failed call's text
	// starts "Error: ".
	if sawResult != "Error: no such target\nexit status 1" {
		t.Errorf("the model read the failed command as %q, want its output and exit status 1", sawResult)
	}
	var retries int
	for _, ev := range c.events(id) {
		if ev.Type == api.EventModelRetry {
			retries++
		}
	}
	if retries != 2 {
		t.Errorf("%d model_retry events on the transcript, want 2", retries)
	}
	logs := run(t, c.env(c.admin), "sessions", "logs", id)
	for _, want := range []string{"model call retried: The model provider failed (HTTP 503", "model call retried: The model provider failed (HTTP 429"} {
		if !strings.Contains(logs, want) {
			t.Errorf("outpost sessions logs lacks %q:\n%s", want, logs)
		}
	}
	if code, page := getRaw(t, c, "/ui/sessions/"+id, true); code != 200 || strings.Count(page, "model call retried") != 2 {
		t.Errorf("the session page (%d) does not show both retries", code)
	}
	sys := fmt.Sprint(fake.requests()[0]["messages"].([]any)[0].(map[string]any)["content"])
	if !strings.Contains(sys, "The machine: ") || !strings.Contains(sys, "CPUs") || !strings.Contains(sys, "GiB of memory") {
		t.Errorf("the system prompt does not describe the machine: %q", sys)
	}
}
