package llm

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// Error is a failed model call: an error status from the provider, a
// connection failure, a timed-out attempt, or a request or response that
// could not be translated.
type Error struct {
	// Provider is ProviderOpenAI or ProviderAnthropic.
	Provider string
	// StatusCode is the HTTP status; 0 when there was no response.
	StatusCode int
	// Message says what went wrong, in the provider's own words when its
	// error body had any.
	Message string
	// Retryable tells whether trying again later may succeed (429, 5xx,
	// connection errors). Complete has already retried such errors as long
	// as [Config.RetryFor] and [Config.MaxRetries] allow.
	Retryable bool

	retryAfter    time.Duration // what Retry-After asked for, if hasRetryAfter
	hasRetryAfter bool
	err           error // the underlying error, if any
}

// Error returns "llm: PROVIDER: HTTP STATUS: MESSAGE", or without the status
// when there was no response.
func (e *Error) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("llm: %s: HTTP %d: %s", e.Provider, e.StatusCode, e.Message)
	}
	return fmt.Sprintf("llm: %s: %s", e.Provider, e.Message)
}

// Unwrap returns the underlying error, such as a network error, if any.
func (e *Error) Unwrap() error { return e.err }

// maxErrorBody bounds how much of an error body is read.
const maxErrorBody = 64 << 10

// maxMessage bounds the length of a Message taken from a non-JSON body.
const maxMessage = 500

// errorMiddleware turns every error status and connection failure of an
// attempt into an *Error before the SDK sees it, so both SDKs report
// failures alike and retries are decided in one place (Complete). A failure
// caused by the request's context ending is passed on untouched: the SDKs
// then return ctx.Err().
func errorMiddleware(provider string) func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		res, err := next(req)
		if err != nil {
			if req.Context().Err() != nil {
				return nil, err
			}
			return nil, &Error{Provider: provider, Message: "connection error: " + err.Error(), Retryable: true, err: err}
		}
		if res.StatusCode < 400 {
			return res, nil
		}
		body, readErr := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
		_ = res.Body.Close()
		if readErr != nil && req.Context().Err() != nil {
			return nil, req.Context().Err()
		}
		return nil, statusError(provider, res, body, time.Now())
	}
}

// statusError builds the *Error for an error response.
func statusError(provider string, res *http.Response, body []byte, now time.Time) *Error {
	e := &Error{
		Provider:   provider,
		StatusCode: res.StatusCode,
		Message:    errorMessage(body),
		Retryable:  retryableStatus(res.StatusCode, res.Header),
	}
	if e.Message == "" {
		e.Message = http.StatusText(res.StatusCode)
	}
	e.retryAfter, e.hasRetryAfter = parseRetryAfter(res.Header, now)
	return e
}

// retryableStatus decides which error statuses are retried: 429 and 5xx,
// unless the provider's x-should-retry header says otherwise.
func retryableStatus(status int, h http.Header) bool {
	switch strings.ToLower(h.Get("X-Should-Retry")) {
	case "true":
		return true
	case "false":
		return false
	}
	return status == http.StatusTooManyRequests || status >= 500
}

// errorMessage finds the human-readable message in an error body. It knows
// the shapes the supported servers use:
//
//	{"error":{"message":"…","type":"…"}}   OpenAI, Anthropic, LiteLLM, llama.cpp
//	{"error":"…"}                          Ollama
//	{"message":"…"} / {"detail":"…"}       vLLM, FastAPI-based proxies
//
// and falls back to the body's text, shortened.
func errorMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &v) == nil {
		if s := jsonString(v.Error); s != "" {
			return s
		}
		var inner struct {
			Message json.RawMessage `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		}
		if json.Unmarshal(v.Error, &inner) == nil {
			if s := jsonString(inner.Message); s != "" {
				return s
			}
			if inner.Type != "" {
				return inner.Type
			}
		}
		if s := jsonString(v.Message); s != "" {
			return s
		}
		if s := jsonString(v.Detail); s != "" {
			return s
		}
		if len(v.Detail) > 0 && string(v.Detail) != "null" {
			return shorten(string(v.Detail))
		}
	}
	return shorten(strings.TrimSpace(string(body)))
}

// jsonString returns raw as a string when it is a non-empty JSON string.
func jsonString(raw json.RawMessage) string {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return strings.TrimSpace(s)
}

// shorten cuts s to maxMessage bytes on a rune boundary.
func shorten(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	cut := maxMessage
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
