package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/backoff"
)

// backend sends one attempt of a request to one provider.
type backend interface {
	complete(ctx context.Context, req Request) (Response, error)
}

// defaultBackoff is the wait between retries that no Retry-After fixes:
// from 500ms doubling to 30s, less up to half of it at random.
var defaultBackoff = backoff.Policy{Base: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: 0.5}

// maxRetryAfter is the longest Retry-After that is waited for; a provider
// that asks for more gets its error returned instead.
const maxRetryAfter = 2 * time.Minute

// client is the Provider: it validates a request, then sends it through its
// backend, retrying as the one retry policy of this package says.
type client struct {
	provider string
	backend  backend
	model    string
	timeout  time.Duration // per attempt; negative means none
	retries  int           // most retries of one request
	retryFor time.Duration // longest time one request is retried for
	backoff  backoff.Policy
}

// Retry describes a failed attempt of a request that Complete is about to
// try again ([Request.OnRetry]).
type Retry struct {
	// Attempt numbers the failed attempt, from 1.
	Attempt int
	// Err is why it failed.
	Err *Error
	// Delay is the wait before the next attempt.
	Delay time.Duration
	// Left is how much longer the request's failures will be retried
	// after this wait ([Config.RetryFor]).
	Left time.Duration
}

// Complete implements Provider.
func (c *client) Complete(ctx context.Context, req Request) (Response, error) {
	if req.Model == "" {
		req.Model = c.model
	}
	if err := c.validate(req); err != nil {
		return Response{}, err
	}
	start := time.Now()
	for attempt := 0; ; attempt++ {
		resp, err := c.attempt(ctx, req)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return Response{}, ctx.Err()
		}
		var e *Error
		if !errors.As(err, &e) || !e.Retryable || attempt >= c.retries {
			return Response{}, err
		}
		delay, ok := c.delay(e, attempt)
		if !ok {
			return Response{}, err
		}
		// The retries stop where RetryFor ends: a wait past it is not
		// begun (a Retry-After longer than what is left ends them too).
		left := c.retryFor - time.Since(start)
		if delay > left {
			return Response{}, err
		}
		if deadline, has := ctx.Deadline(); has && time.Until(deadline) < delay {
			return Response{}, err // the context would end before the retry
		}
		if req.OnRetry != nil {
			req.OnRetry(Retry{Attempt: attempt + 1, Err: e, Delay: delay, Left: left - delay})
		}
		if err := backoff.Sleep(ctx, nil, delay); err != nil {
			return Response{}, err
		}
	}
}

// attempt sends req once, within the attempt timeout, and makes every
// failure but the end of ctx an *Error.
func (c *client) attempt(ctx context.Context, req Request) (Response, error) {
	actx := ctx
	if c.timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	resp, err := c.backend.complete(actx, req)
	switch {
	case err == nil:
		return resp, nil
	case ctx.Err() != nil:
		return Response{}, ctx.Err()
	case actx.Err() != nil:
		return Response{}, &Error{Provider: c.provider, Message: fmt.Sprintf("no response within %s", c.timeout), err: actx.Err()}
	}
	var e *Error
	if errors.As(err, &e) {
		return Response{}, e
	}
	return Response{}, &Error{Provider: c.provider, Message: err.Error(), err: err}
}

// delay is how long to wait before retry number attempt+1 after e: what
// Retry-After asked for, else exponential backoff with jitter. It reports
// false when the provider asked for a wait too long to make.
func (c *client) delay(e *Error, attempt int) (time.Duration, bool) {
	if e.hasRetryAfter {
		return e.retryAfter, e.retryAfter <= maxRetryAfter
	}
	return c.backoff.Delay(attempt + 1), true
}

// parseRetryAfter reads how long the provider asked to wait: Retry-After-Ms
// (milliseconds, sent by OpenAI) or Retry-After (seconds or an HTTP date,
// taken relative to now). A date in the past means no wait.
func parseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms < 1e12 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s < 0 || s > 1e9 {
			return 0, false
		}
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// validate rejects requests that no provider could take.
func (c *client) validate(req Request) error {
	fail := func(format string, args ...any) error {
		return &Error{Provider: c.provider, Message: fmt.Sprintf(format, args...)}
	}
	if req.Model == "" {
		return fail("no model: set Request.Model or Config.Model")
	}
	if req.MaxTokens < 0 {
		return fail("negative MaxTokens %d", req.MaxTokens)
	}
	for i, m := range req.Messages {
		switch m.Role {
		case RoleSystem, RoleUser:
		case RoleAssistant:
			for j, tc := range m.ToolCalls {
				if tc.Name == "" {
					return fail("message %d: tool call %d has no name", i, j)
				}
			}
		case RoleTool:
			if m.ToolCallID == "" {
				return fail("message %d: tool result without ToolCallID", i)
			}
		default:
			return fail("message %d: unknown role %q", i, m.Role)
		}
	}
	for i, t := range req.Tools {
		if t.Name == "" {
			return fail("tool %d has no name", i)
		}
	}
	return nil
}
