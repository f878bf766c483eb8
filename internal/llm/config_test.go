package llm

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

func TestNew(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "gemini"} {
		_, err := New(Config{Provider: name})
		if err == nil || !strings.Contains(err.Error(), `"openai" or "anthropic"`) {
			t.Errorf("New(%q): %v, want an error naming the providers", name, err)
		}
	}
	p, err := New(Config{Provider: " OpenAI "})
	if err != nil {
		t.Fatal(err)
	}
	c := p.(*client)
	if c.timeout != DefaultTimeout || c.retryFor != DefaultRetryFor || c.retries != math.MaxInt {
		t.Errorf("defaults: timeout %v, retries %d for %v", c.timeout, c.retries, c.retryFor)
	}
	if _, err := New(Config{Provider: "openai", RetryFor: -1}); err == nil || !strings.Contains(err.Error(), "retried forever") {
		t.Errorf("unbounded retries: err = %v", err)
	}
	p, err = New(Config{Provider: "anthropic", Timeout: time.Second, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if c := p.(*client); c.timeout != time.Second || c.retries != 0 {
		t.Errorf("timeout %v, retries %d", c.timeout, c.retries)
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"OUTPOST_LLM_PROVIDER": "anthropic",
		"OUTPOST_LLM_BASE_URL": "http://127.0.0.1:8080 ",
		"OUTPOST_LLM_API_KEY":  "sk-x",
		"OUTPOST_LLM_MODEL":    "claude-test",
	}
	got := ConfigFromEnv(func(k string) string { return env[k] })
	want := Config{Provider: "anthropic", BaseURL: "http://127.0.0.1:8080", APIKey: "sk-x", Model: "claude-test"}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	p := newTestProvider(t, Config{Provider: "openai", BaseURL: "http://127.0.0.1:1"})
	for _, tc := range []struct {
		req  Request
		want string
	}{
		{Request{}, "no model"},
		{Request{Model: "m", Messages: []Message{{Role: "robot"}}}, `unknown role "robot"`},
		{Request{Model: "m", Messages: []Message{{Role: RoleTool, Text: "x"}}}, "without ToolCallID"},
		{Request{Model: "m", Tools: []Tool{{Name: "t", InputSchema: []byte(`[1]`)}}}, "not a JSON object"},
		{Request{Model: "m", Tools: []Tool{{Name: "t", InputSchema: []byte(`{"type":"string"}`)}}}, `want "object"`},
	} {
		_, err := p.Complete(context.Background(), tc.req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.req, err, tc.want)
		}
	}
}

// TestIgnoresSDKEnvironment checks that the SDKs' own environment variables
// do not leak into requests: Config is the only configuration.
func TestIgnoresSDKEnvironment(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_API_KEY", "sk-leaked")
	t.Setenv("OPENAI_ORG_ID", "org-leaked")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-Leak: yes")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-leaked")
	t.Setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Leak: yes")
	for _, pc := range providerCases {
		f := newFakeServer(t, reply{body: pc.ok})
		p := newTestProvider(t, Config{Provider: pc.name, BaseURL: pc.base(f.url())})
		if _, err := p.Complete(context.Background(), simpleRequest()); err != nil {
			t.Fatalf("%s: %v", pc.name, err)
		}
		h := f.requests()[0].header
		for _, k := range []string{"Authorization", "X-Api-Key", "OpenAI-Organization", "X-Leak"} {
			if v := h.Get(k); v != "" {
				t.Errorf("%s: header %s: %q leaked from the environment", pc.name, k, v)
			}
		}
	}
}
