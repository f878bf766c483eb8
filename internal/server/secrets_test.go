package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/llm"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// secretValue is the session secret these tests look for; 20 characters.
const secretValue = "hunter2-secret-value"

// lockedBuffer is a log destination safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// rawGet returns the status and body of a GET; cookie, when set, signs in
// to the web UI instead of the bearer token.
func rawGet(t *testing.T, ts *testServer, path string, cookie bool, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", ts.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cookie {
		req.AddCookie(&http.Cookie{Name: "outpost_token", Value: ts.admin})
	} else {
		req.Header.Set("Authorization", "Bearer "+ts.admin)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

// follow reads a session's SSE stream, from before its first call, until
// the stream ends with the session.
func follow(t *testing.T, ts *testServer, id string) <-chan string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		_, body := rawGet(t, ts, "/v1/sessions/"+id+"/events", false, "Accept", "text/event-stream")
		ch <- body
	}()
	return ch
}

// wantHidden fails t when text holds the secret's value.
func wantHidden(t *testing.T, where, text string) {
	t.Helper()
	if strings.Contains(text, secretValue) {
		t.Errorf("%s shows the secret's value:\n%s", where, text)
	}
}

// outputOf joins the output events of one call.
func outputOf(evs []api.Event, seq int64) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == api.EventOutput && ev.CallSeq == seq {
			b.WriteString(ev.Text)
		}
	}
	return b.String()
}

// TestSecretsRedactedFromCallArguments runs a script whose steps hold a
// secret's value in their own arguments with the real remote: the commands
// get the value (their output says so), while the transcript, the SSE
// stream, the session views, the web pages and the server log show it
// redacted. The stored call keeps it, to be sent again on a resume.
func TestSecretsRedactedFromCallArguments(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	ts := startServer(t, Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ts.outpost("sec")
	steps := []api.Step{
		{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"printf %s ` + secretValue + ` | wc -c"}`)},
		{Tool: api.ToolExec, Args: json.RawMessage(`{"argv":["sh","-c","test \"$1\" = \"$API_TOKEN\" && echo same-as-env","sh","` + secretValue + `"]}`)},
	}
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, api.CreateSessionRequest{Outpost: "sec", Title: "deploy with " + secretValue,
		Secrets: map[string]string{"API_TOKEN": secretValue}, Agent: api.Agent{Kind: api.AgentScript, Steps: steps}}, &s)
	id := s.Metadata.SessionID
	wantHidden(t, "the create answer", mustJSON(t, s))
	stream := follow(t, ts, id)
	waitfor.True(t, "the follower to subscribe", func() bool {
		ts.srv.topics.mu.Lock()
		defer ts.srv.topics.mu.Unlock()
		return len(ts.srv.topics.subs[id]) > 0
	})
	runRemote(t, ts, id, t.TempDir())
	if end := waitEnded(t, ts, id); end.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", end.Status.Status, end.Status.StatusDetail, end.Status.Reason)
	}

	evs := sessionEvents(t, ts, id)
	if out := strings.TrimSpace(outputOf(evs, 1)); out != "20" {
		t.Errorf("call 1 printed %q, want 20: the command did not get the secret's value", out)
	}
	if out := strings.TrimSpace(outputOf(evs, 2)); out != "same-as-env" {
		t.Errorf("call 2 printed %q, want same-as-env", out)
	}
	calls := 0
	for _, ev := range evs {
		if ev.Type == api.EventCall {
			calls++
			if !strings.Contains(string(ev.Args), "[REDACTED:API_TOKEN]") {
				t.Errorf("call %d event args %s: no redaction marker", ev.CallSeq, ev.Args)
			}
		}
	}
	if calls != 2 {
		t.Errorf("%d call events, want 2", calls)
	}

	select {
	case body := <-stream:
		wantHidden(t, "the SSE stream", body)
		if !strings.Contains(body, "[REDACTED:API_TOKEN]") || !strings.Contains(body, `"type":"end"`) {
			t.Errorf("the SSE stream lacks the redacted calls or the end:\n%s", body)
		}
	case <-t.Context().Done():
		t.Fatal("the SSE stream did not end")
	}
	for _, path := range []string{"/v1/sessions/" + id + "/events", "/v1/sessions/" + id + "/events?tail=50", "/v1/sessions/" + id, "/v1/sessions"} {
		code, body := rawGet(t, ts, path, false)
		if code != 200 {
			t.Fatalf("GET %s: %d", path, code)
		}
		wantHidden(t, "GET "+path, body)
	}
	var view api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &view)
	if view.Spec.Title != "deploy with [REDACTED:API_TOKEN]" || !strings.Contains(string(view.Spec.Agent.Steps[0].Args), "[REDACTED:API_TOKEN]") {
		t.Errorf("session view: title %q, step 1 %s", view.Spec.Title, view.Spec.Agent.Steps[0].Args)
	}
	for _, path := range []string{"/ui/sessions/" + id, "/ui/sessions"} {
		code, body := rawGet(t, ts, path, true)
		if code != 200 || !strings.Contains(body, "REDACTED:API_TOKEN") {
			t.Fatalf("GET %s: %d, without the redacted text:\n%s", path, code, body)
		}
		wantHidden(t, "the web page "+path, body)
	}
	wantHidden(t, "the server log", logs.String())

	// The stored calls keep the arguments as given: a resume sends them
	// to the next machine. They are never shown.
	stored, err := ts.srv.store.ListCalls(t.Context(), id)
	if err != nil || len(stored) != 2 || !strings.Contains(string(stored[0].Args), secretValue) {
		t.Fatalf("stored calls = %+v, %v; want the real arguments", stored, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// scriptedModel plays back answers and records every request, as the
// model provider would receive it.
type scriptedModel struct {
	mu      sync.Mutex
	answers []llm.Message
	reqs    []llm.Request
}

func (m *scriptedModel) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reqs = append(m.reqs, req)
	n := len(m.reqs)
	if n > len(m.answers) {
		return llm.Response{}, &llm.Error{Message: fmt.Sprintf("no answer %d in the script", n)}
	}
	return llm.Response{Message: m.answers[n-1], Usage: llm.Usage{PromptTokens: 10, CompletionTokens: 1}, StopReason: "stop"}, nil
}

func (m *scriptedModel) requests() []llm.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]llm.Request(nil), m.reqs...)
}

// TestSecretsRedactedFromModelMessages: an llm session whose prompt holds a
// secret's value and whose model writes it, in its text and in a tool
// call. The command runs with the value; the transcript's messages and
// calls show it redacted; and the model, whose conversation is rebuilt
// from the transcript, is never sent it.
func TestSecretsRedactedFromModelMessages(t *testing.T) {
	t.Parallel()
	model := &scriptedModel{answers: []llm.Message{
		{Role: llm.RoleAssistant, Text: "Counting " + secretValue + " now.", ToolCalls: []llm.ToolCall{
			{ID: "call_1", Name: api.ToolExec, Arguments: json.RawMessage(`{"command":"printf %s '` + secretValue + `' | wc -c"}`)}}},
		{Role: llm.RoleAssistant, Text: "Done: " + secretValue + " has 20 characters."},
	}}
	logs := &lockedBuffer{}
	ts := startServer(t, Options{LLM: model, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ts.outpost("llm")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, api.CreateSessionRequest{Outpost: "llm",
		Prompt:  "How many characters has " + secretValue + "?",
		Secrets: map[string]string{"API_TOKEN": secretValue}, Agent: api.Agent{Kind: api.AgentLLM}}, &s)
	id := s.Metadata.SessionID
	runRemote(t, ts, id, t.TempDir())
	if end := waitEnded(t, ts, id); end.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", end.Status.Status, end.Status.StatusDetail, end.Status.Reason)
	}

	evs := sessionEvents(t, ts, id)
	if out := strings.TrimSpace(outputOf(evs, 1)); out != "20" {
		t.Errorf("the model's command printed %q, want 20", out)
	}
	var messages []string
	for _, ev := range evs {
		if ev.Type == api.EventMessage {
			messages = append(messages, ev.Text)
			for _, tc := range ev.ToolCalls {
				messages = append(messages, tc.Arguments)
			}
		}
	}
	want := []string{"How many characters has [REDACTED:API_TOKEN]?", "Counting [REDACTED:API_TOKEN] now.",
		`{"command":"printf %s '[REDACTED:API_TOKEN]' | wc -c"}`, "Done: [REDACTED:API_TOKEN] has 20 characters."}
	if strings.Join(messages, "\n") != strings.Join(want, "\n") {
		t.Errorf("messages on the transcript:\n%s\nwant:\n%s", strings.Join(messages, "\n"), strings.Join(want, "\n"))
	}
	_, body := rawGet(t, ts, "/v1/sessions/"+id+"/events", false)
	wantHidden(t, "the events", body)
	_, page := rawGet(t, ts, "/ui/sessions/"+id, true)
	wantHidden(t, "the web page", page)
	wantHidden(t, "the server log", logs.String())

	reqs := model.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	for i, req := range reqs {
		wantHidden(t, fmt.Sprintf("model request %d", i+1), mustJSON(t, req))
	}
	if last := reqs[1].Messages[len(reqs[1].Messages)-1]; last.Role != llm.RoleTool || !strings.Contains(last.Text, "20") {
		t.Errorf("the model's second request ends with %+v, want the tool result 20", last)
	}
}
