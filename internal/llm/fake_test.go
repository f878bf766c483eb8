package llm

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/backoff"
)

// reply is one scripted answer of a fake server.
type reply struct {
	status int
	header map[string]string
	body   string
	// hang holds the response until the client goes away.
	hang bool
	// drop closes the connection without answering.
	drop bool
}

// recorded is one request a fake server received.
type recorded struct {
	method, path string
	header       http.Header
	body         []byte
	at           time.Time
}

// fakeServer is a loopback HTTP server that records every request and
// answers with the scripted replies, in order.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server
	// arrived gets a value when a request arrives.
	arrived chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	replies []reply
	reqs    []recorded
}

func newFakeServer(t *testing.T, replies ...reply) *fakeServer {
	t.Helper()
	f := &fakeServer{t: t, replies: replies, arrived: make(chan struct{}, 100), done: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	t.Cleanup(func() { close(f.done) }) // runs first: releases hanging handlers
	return f
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.reqs = append(f.reqs, recorded{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: body, at: time.Now()})
	var rep reply
	ok := len(f.replies) > 0
	if ok {
		rep, f.replies = f.replies[0], f.replies[1:]
	}
	f.mu.Unlock()
	f.arrived <- struct{}{}
	if !ok {
		f.t.Errorf("unexpected request %d to %s", len(f.requests()), r.URL.Path)
		http.Error(w, `{"error":{"message":"unexpected request"}}`, http.StatusTeapot)
		return
	}
	switch {
	case rep.hang:
		select {
		case <-r.Context().Done():
		case <-f.done:
		}
		return
	case rep.drop:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	status := rep.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, rep.body)
}

// url is the server's root URL.
func (f *fakeServer) url() string { return f.srv.URL }

// requests returns what the server received so far.
func (f *fakeServer) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// newTestProvider returns a provider for f with fast backoff.
func newTestProvider(t *testing.T, cfg Config) *client {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c := p.(*client)
	c.backoff = backoff.Policy{Base: time.Millisecond, Max: 5 * time.Millisecond, Jitter: 0.5}
	return c
}

// assertJSON fails unless got and want are the same JSON value.
func assertJSON(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: invalid JSON %q: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad expectation: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		var gi, wi bytes.Buffer
		_ = json.Indent(&gi, got, "", "  ")
		_ = json.Indent(&wi, []byte(want), "", "  ")
		t.Errorf("%s mismatch\n got: %s\nwant: %s", what, gi.String(), wi.String())
	}
}

func ptr[T any](v T) *T { return &v }

// conversation is a tool-using exchange that both providers must replay
// faithfully.
func conversation() Request {
	return Request{
		Model:  "test-model",
		System: "You are Outpost's agent.",
		Messages: []Message{
			{Role: RoleUser, Text: "List the workspace, then read go.mod."},
			{Role: RoleAssistant, Text: "Looking.", ToolCalls: []ToolCall{
				{ID: "call_1", Name: "list_dir", Arguments: json.RawMessage(`{"path":"."}`)},
				{ID: "call_2", Name: "read_file", Arguments: json.RawMessage(`{"path":"go.mod"}`)},
			}},
			{Role: RoleTool, ToolCallID: "call_1", Text: `{"entries":[{"name":"go.mod","type":"file","size":42}]}`},
			{Role: RoleTool, ToolCallID: "call_2", Text: "no such file", IsError: true},
		},
		Tools: []Tool{
			{Name: "list_dir", Description: "Lists a directory.", InputSchema: json.RawMessage(
				`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`)},
			{Name: "exec", Description: "Runs a command.", InputSchema: json.RawMessage(
				`{"type":"object","properties":{"command":{"type":"string"},"timeout_s":{"type":"integer","minimum":1}}}`)},
		},
		Temperature: ptr(0.25),
		TopP:        ptr(0.5),
		MaxTokens:   1000,
	}
}
