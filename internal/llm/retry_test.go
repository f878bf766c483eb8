package llm

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// providerCase is one provider with what its fake server answers.
type providerCase struct {
	name    string
	base    func(url string) string
	ok      string                  // a successful answer
	errBody func(msg string) string // an error body with msg
}

var providerCases = []providerCase{
	{
		name: ProviderOpenAI,
		base: func(u string) string { return u + "/v1" },
		ok:   `{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`,
		errBody: func(msg string) string {
			return `{"error":{"message":"` + msg + `","type":"server_error","param":null,"code":null}}`
		},
	},
	{
		name: ProviderAnthropic,
		base: func(u string) string { return u },
		ok:   `{"id":"msg","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`,
		errBody: func(msg string) string {
			return `{"type":"error","error":{"type":"api_error","message":"` + msg + `"}}`
		},
	},
}

func simpleRequest() Request {
	return Request{Model: "m", Messages: []Message{{Role: RoleUser, Text: "hello"}}}
}

func forEachProvider(t *testing.T, test func(t *testing.T, pc providerCase)) {
	for _, pc := range providerCases {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			test(t, pc)
		})
	}
}

// TestRetryAfter checks that a 429 is retried once, after the wait that
// Retry-After asks for, even though the backoff alone would wait ~1 ms.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	forEachProvider(t, func(t *testing.T, pc providerCase) {
		f := newFakeServer(t,
			reply{status: 429, header: map[string]string{"Retry-After": "1"}, body: pc.errBody("slow down")},
			reply{body: pc.ok})
		p := newTestProvider(t, Config{Provider: pc.name, BaseURL: pc.base(f.url())})
		start := time.Now()
		resp, err := p.Complete(context.Background(), simpleRequest())
		elapsed := time.Since(start)
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if resp.Message.Text != "hi" {
			t.Errorf("text %q", resp.Message.Text)
		}
		reqs := f.requests()
		if len(reqs) != 2 {
			t.Fatalf("got %d requests, want 2", len(reqs))
		}
		if gap := reqs[1].at.Sub(reqs[0].at); gap < 900*time.Millisecond || elapsed > 5*time.Second {
			t.Errorf("retried after %v (call took %v), want ≈1s", gap, elapsed)
		}
		if string(reqs[0].body) != string(reqs[1].body) {
			t.Errorf("retry sent a different body")
		}
	})
}

// TestRetriesExhausted checks that 5xx is retried exactly MaxRetries times
// and ends in an *Error with the provider's message.
func TestRetriesExhausted(t *testing.T) {
	t.Parallel()
	forEachProvider(t, func(t *testing.T, pc providerCase) {
		var replies []reply
		for range 5 {
			replies = append(replies, reply{status: 500, body: pc.errBody("the model crashed")})
		}
		f := newFakeServer(t, replies...)
		p := newTestProvider(t, Config{Provider: pc.name, BaseURL: pc.base(f.url()), MaxRetries: 4})
		_, err := p.Complete(context.Background(), simpleRequest())
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("error %v (%T), want *Error", err, err)
		}
		if e.StatusCode != 500 || e.Message != "the model crashed" || !e.Retryable || e.Provider != pc.name {
			t.Errorf("error %+v", e)
		}
		if got := len(f.requests()); got != 5 {
			t.Errorf("got %d requests, want 5", got)
		}
		if want := "llm: " + pc.name + ": HTTP 500: the model crashed"; err.Error() != want {
			t.Errorf("Error() = %q, want %q", err.Error(), want)
		}
	})
}

// TestClientErrorNotRetried checks that a 400 is returned at once.
func TestClientErrorNotRetried(t *testing.T) {
	t.Parallel()
	forEachProvider(t, func(t *testing.T, pc providerCase) {
		f := newFakeServer(t, reply{status: 400, body: pc.errBody("messages: field required")})
		p := newTestProvider(t, Config{Provider: pc.name, BaseURL: pc.base(f.url())})
		_, err := p.Complete(context.Background(), simpleRequest())
		var e *Error
		if !errors.As(err, &e) || e.StatusCode != 400 || e.Retryable || e.Message != "messages: field required" {
			t.Fatalf("error %#v, want a non-retryable 400 *Error", err)
		}
		if got := len(f.requests()); got != 1 {
			t.Errorf("got %d requests, want 1", got)
		}
	})
}

// TestConnectionErrorRetried checks that a dropped connection is retried.
func TestConnectionErrorRetried(t *testing.T) {
	t.Parallel()
	forEachProvider(t, func(t *testing.T, pc providerCase) {
		f := newFakeServer(t, reply{drop: true}, reply{body: pc.ok})
		p := newTestProvider(t, Config{Provider: pc.name, BaseURL: pc.base(f.url())})
		resp, err := p.Complete(context.Background(), simpleRequest())
		if err != nil || resp.Message.Text != "hi" {
			t.Fatalf("Complete: %+v, %v", resp, err)
		}
		if got := len(f.requests()); got != 2 {
			t.Errorf("got %d requests, want 2", got)
		}
	})
}

// TestCancelMidRequest checks that cancelling ctx while the server is still
// thinking returns ctx.Err() at once.
func TestCancelMidRequest(t *testing.T) {
	t.Parallel()
	forEachProvider(t, func(t *testing.T, pc providerCase) {
		f := newFakeServer(t, reply{hang: true})
		p := newTestProvider(t, Config{Provider: pc.name, BaseURL: pc.base(f.url())})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-f.arrived
			cancel()
		}()
		start := time.Now()
		_, err := p.Complete(ctx, simpleRequest())
		if err != context.Canceled {
			t.Fatalf("error %v (%T), want context.Canceled itself", err, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("returned after %v", d)
		}
		if got := len(f.requests()); got != 1 {
			t.Errorf("got %d requests, want 1", got)
		}
	})
}

// TestCancelDuringBackoff checks that cancelling ctx while waiting out a
// Retry-After returns ctx.Err() without another request.
func TestCancelDuringBackoff(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t, reply{status: 503, header: map[string]string{"Retry-After": "60"}, body: `{"error":"busy"}`})
	p := newTestProvider(t, Config{Provider: ProviderOpenAI, BaseURL: f.url()})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-f.arrived
		cancel()
	}()
	start := time.Now()
	_, err := p.Complete(ctx, simpleRequest())
	if err != context.Canceled || time.Since(start) > 2*time.Second {
		t.Fatalf("error %v after %v, want context.Canceled at once", err, time.Since(start))
	}
}

// TestAttemptTimeout checks that an attempt gets no more than Config.Timeout
// and that a timed-out attempt is not retried.
func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	forEachProvider(t, func(t *testing.T, pc providerCase) {
		f := newFakeServer(t, reply{hang: true})
		p := newTestProvider(t, Config{Provider: pc.name, BaseURL: pc.base(f.url()), Timeout: 200 * time.Millisecond})
		start := time.Now()
		_, err := p.Complete(context.Background(), simpleRequest())
		var e *Error
		if !errors.As(err, &e) || e.Retryable || e.StatusCode != 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %#v, want a non-retryable timeout *Error", err)
		}
		if !strings.Contains(e.Message, "200ms") {
			t.Errorf("message %q", e.Message)
		}
		if d := time.Since(start); d < 200*time.Millisecond || d > 3*time.Second {
			t.Errorf("returned after %v", d)
		}
		if got := len(f.requests()); got != 1 {
			t.Errorf("got %d requests, want 1", got)
		}
	})
}

// TestRetryAfterTooLong checks that a wait beyond what is sensible, or
// beyond the context's deadline, returns the error instead of waiting.
func TestRetryAfterTooLong(t *testing.T) {
	t.Parallel()
	f := newFakeServer(t,
		reply{status: 429, header: map[string]string{"Retry-After": "3600"}, body: `{"error":{"message":"quota"}}`},
		reply{status: 429, header: map[string]string{"Retry-After": "30"}, body: `{"error":{"message":"quota"}}`})
	p := newTestProvider(t, Config{Provider: ProviderOpenAI, BaseURL: f.url()})
	_, err := p.Complete(context.Background(), simpleRequest())
	var e *Error
	if !errors.As(err, &e) || e.StatusCode != 429 || !e.Retryable {
		t.Fatalf("error %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Complete(ctx, simpleRequest()); !errors.As(err, &e) || e.StatusCode != 429 {
		t.Fatalf("error %v", err)
	}
	if got := len(f.requests()); got != 2 {
		t.Errorf("got %d requests, want 2", got)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		header map[string]string
		want   time.Duration
		ok     bool
	}{
		{map[string]string{"Retry-After": "1"}, time.Second, true},
		{map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond, true},
		{map[string]string{"Retry-After": now.Add(7 * time.Second).Format(http.TimeFormat)}, 7 * time.Second, true},
		{map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, 0, true},
		{map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, 250 * time.Millisecond, true},
		{map[string]string{"Retry-After": "soon"}, 0, false},
		{map[string]string{"Retry-After": "-3"}, 0, false},
		{nil, 0, false},
	} {
		h := http.Header{}
		for k, v := range tc.header {
			h.Set(k, v)
		}
		got, ok := parseRetryAfter(h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%v: got %v, %v; want %v, %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	b := defaultBackoff
	for attempt, want := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second} {
		for range 50 {
			if d := b.Delay(attempt + 1); d < want/2 || d > want {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
	if d := b.Delay(100); d < b.Max/2 || d > b.Max {
		t.Errorf("attempt 100: delay %v", d)
	}
}

// TestOutageRetried: a short outage (a dropped connection, a 503, a 429
// with Retry-After) is retried until the provider answers, and each retry
// is reported to Request.OnRetry before its wait.
func TestOutageRetried(t *testing.T) {
	t.Parallel()
	forEachProvider(t, func(t *testing.T, pc providerCase) {
		f := newFakeServer(t,
			reply{drop: true},
			reply{status: 503, body: pc.errBody("overloaded")},
			reply{status: 429, header: map[string]string{"Retry-After": "1"}, body: pc.errBody("slow down")},
			reply{body: pc.ok})
		p := newTestProvider(t, Config{Provider: pc.name, BaseURL: pc.base(f.url())})
		var retries []Retry
		req := simpleRequest()
		req.OnRetry = func(r Retry) { retries = append(retries, r) }
		resp, err := p.Complete(context.Background(), req)
		if err != nil || resp.Message.Text != "hi" {
			t.Fatalf("Complete = %+v, %v; want the answer after the outage", resp, err)
		}
		if len(retries) != 3 || len(f.requests()) != 4 {
			t.Fatalf("%d retries reported, %d requests; want 3 and 4", len(retries), len(f.requests()))
		}
		for i, r := range retries {
			if r.Attempt != i+1 || r.Err == nil || !r.Err.Retryable || r.Left <= 0 || r.Left > DefaultRetryFor {
				t.Errorf("retry %d = %+v", i, r)
			}
		}
		if !strings.Contains(retries[0].Err.Message, "connection error") || retries[1].Err.StatusCode != 503 ||
			retries[2].Err.StatusCode != 429 || retries[2].Delay != time.Second {
			t.Errorf("retries = %+v %+v %+v, want a connection error, a 503, then a 429 honouring Retry-After: 1", retries[0], retries[1], retries[2])
		}
	})
}

// TestRetryForBounds: retries stop where RetryFor ends, however many the
// count would allow, and a Retry-After past it is not waited for.
func TestRetryForBounds(t *testing.T) {
	t.Parallel()
	forEachProvider(t, func(t *testing.T, pc providerCase) {
		var replies []reply
		for range 100 {
			replies = append(replies, reply{status: 502, body: pc.errBody("bad gateway")})
		}
		f := newFakeServer(t, replies...)
		p := newTestProvider(t, Config{Provider: pc.name, BaseURL: pc.base(f.url()), RetryFor: 60 * time.Millisecond})
		start := time.Now()
		_, err := p.Complete(context.Background(), simpleRequest())
		var e *Error
		if !errors.As(err, &e) || e.StatusCode != 502 {
			t.Fatalf("err = %v, want the 502", err)
		}
		if n := len(f.requests()); n < 3 || n == 100 || time.Since(start) > 5*time.Second {
			t.Errorf("%d requests in %v, want retries for about 60ms", n, time.Since(start))
		}

		f = newFakeServer(t, reply{status: 429, header: map[string]string{"Retry-After": "30"}, body: pc.errBody("slow down")})
		p = newTestProvider(t, Config{Provider: pc.name, BaseURL: pc.base(f.url()), RetryFor: time.Second})
		start = time.Now()
		if _, err := p.Complete(context.Background(), simpleRequest()); !errors.As(err, &e) || e.StatusCode != 429 {
			t.Fatalf("err = %v, want the 429", err)
		}
		if time.Since(start) > 5*time.Second || len(f.requests()) != 1 {
			t.Errorf("a Retry-After past RetryFor was waited for")
		}
	})
}
