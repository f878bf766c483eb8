package llm

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, want string }{
		{`{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, "Incorrect API key provided"},
		{`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "Overloaded"},
		{`{"error":"model \"llama9\" not found, try pulling it first"}`, `model "llama9" not found, try pulling it first`},
		{`{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","code":400}`, "This model's maximum context length is 4096 tokens."},
		{`{"detail":"Not Found"}`, "Not Found"},
		{`{"detail":[{"loc":["body","model"],"msg":"field required"}]}`, `[{"loc":["body","model"],"msg":"field required"}]`},
		{`{"error":{"type":"rate_limit_error"}}`, "rate_limit_error"},
		{"<html><body>502 Bad Gateway</body></html>\n", "<html><body>502 Bad Gateway</body></html>"},
		{"", ""},
	} {
		if got := errorMessage([]byte(tc.body)); got != tc.want {
			t.Errorf("errorMessage(%s) = %q, want %q", tc.body, got, tc.want)
		}
	}
	long := strings.Repeat("é", 400)
	if got := errorMessage([]byte(long)); len(got) > maxMessage+len("…") || !strings.HasSuffix(got, "…") {
		t.Errorf("long body not shortened: %d bytes", len(got))
	}
}

func TestRetryableStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		header string
		want   bool
	}{
		{429, "", true}, {500, "", true}, {502, "", true}, {529, "", true},
		{400, "", false}, {401, "", false}, {404, "", false}, {408, "", false},
		{500, "false", false}, {409, "true", true},
	} {
		h := http.Header{}
		if tc.header != "" {
			h.Set("X-Should-Retry", tc.header)
		}
		if got := retryableStatus(tc.status, h); got != tc.want {
			t.Errorf("retryableStatus(%d, %q) = %v", tc.status, tc.header, got)
		}
	}
}

// TestNonJSONErrorBody checks a proxy's HTML error page: the status and a
// readable message survive, for both SDKs.
func TestNonJSONErrorBody(t *testing.T) {
	t.Parallel()
	forEachProvider(t, func(t *testing.T, pc providerCase) {
		f := newFakeServer(t, reply{status: 502, header: map[string]string{"Content-Type": "text/html"}, body: "<h1>502 Bad Gateway</h1>"})
		p := newTestProvider(t, Config{Provider: pc.name, BaseURL: pc.base(f.url()), MaxRetries: -1})
		_, err := p.Complete(context.Background(), simpleRequest())
		var e *Error
		if !errors.As(err, &e) || e.StatusCode != 502 || e.Message != "<h1>502 Bad Gateway</h1>" || !e.Retryable {
			t.Fatalf("error %#v", err)
		}
		if got := len(f.requests()); got != 1 {
			t.Errorf("MaxRetries -1: got %d requests, want 1", got)
		}
	})
}

// TestMalformedResponse checks that a 200 whose body is not a completion is
// an *Error, not a panic or an empty answer.
func TestMalformedResponse(t *testing.T) {
	t.Parallel()
	forEachProvider(t, func(t *testing.T, pc providerCase) {
		f := newFakeServer(t, reply{body: `{"choices": "nope"`})
		p := newTestProvider(t, Config{Provider: pc.name, BaseURL: pc.base(f.url())})
		_, err := p.Complete(context.Background(), simpleRequest())
		var e *Error
		if !errors.As(err, &e) || e.Retryable {
			t.Fatalf("error %#v, want a non-retryable *Error", err)
		}
	})
}

func TestStatusErrorRetryAfter(t *testing.T) {
	t.Parallel()
	res := &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"2"}}}
	e := statusError(ProviderOpenAI, res, nil, time.Now())
	if e.Message != "Too Many Requests" || !e.hasRetryAfter || e.retryAfter != 2*time.Second {
		t.Errorf("%+v", e)
	}
}
