package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// Error is an error answer of the server: its HTTP status and the code and
// message of the {"error":{…}} envelope (or, from a server that answers
// only {"detail":…}, the detail as Message and "http_<status>" as Code).
type Error struct {
	StatusCode int
	// Code is a stable machine code such as api.CodeConflict.
	Code string
	// Message is a sentence for people.
	Message string

	// foreign is set when the body was neither Outpost's envelope nor a
	// fleet API detail: an HTML page or other text, as a web server or
	// proxy that is not Outpost answers.
	foreign bool
}

// Error returns the server's message.
func (e *Error) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("server answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
}

// IsConflict reports whether err is a 409 answer, for example a claim held by
// another acceptor.
func IsConflict(err error) bool { return hasStatus(err, http.StatusConflict) }

// IsBadRequest reports whether the server refused the request as malformed
// (HTTP 400), for example a cursor it did not issue.
func IsBadRequest(err error) bool { return hasStatus(err, http.StatusBadRequest) }

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool { return hasStatus(err, http.StatusNotFound) }

// IsGone reports whether err is a 410 answer: something that existed was
// deleted for good, such as an artifact or spilled output the retention
// policy removed.
func IsGone(err error) bool { return hasStatus(err, http.StatusGone) }

// IsUnavailable reports whether err is a 503 answer, for example a tool
// call on a session whose machine has not connected yet: the same call may
// succeed later.
func IsUnavailable(err error) bool { return hasStatus(err, http.StatusServiceUnavailable) }

// IsUnauthorized reports whether err is a 401 answer: a missing, bad,
// expired or revoked token.
func IsUnauthorized(err error) bool { return hasStatus(err, http.StatusUnauthorized) }

// IsForbidden reports whether err is a 403 answer: the token lacks a scope,
// or is limited to one outpost and the call needs a token that is not. An
// outpost, session or queue entry outside a token's outpost answers 404,
// as a missing one does (IsNotFound).
func IsForbidden(err error) bool { return hasStatus(err, http.StatusForbidden) }

// IsNotOutpost reports whether the answer behind err did not come from an
// Outpost server: an error status with an HTML or text page instead of a
// JSON error, or a success answer that is not JSON. The client's URL likely
// points at another web server or at a wrong path.
func IsNotOutpost(err error) bool {
	var e *Error
	var f *foreignAnswerError
	return errors.As(err, &e) && e.foreign || errors.As(err, &f)
}

// IsTransport reports whether err is a failure to get an answer from the
// server at all: it could not be reached, the connection broke, or the
// answer could not be read. The cause (a *url.Error, a *net.OpError, …)
// is wrapped.
func IsTransport(err error) bool {
	var te *transportError
	return errors.As(err, &te)
}

// foreignAnswerError is a success answer that is not what the API sends:
// an HTML page, say, where JSON or an event stream was expected.
type foreignAnswerError struct {
	status      int
	contentType string
}

func (e *foreignAnswerError) Error() string {
	return fmt.Sprintf("server answered %d %s with %s, not the Outpost API", e.status, http.StatusText(e.status), describeType(e.contentType))
}

// describeType names a Content-Type for people: "an HTML page".
func describeType(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	switch mt = strings.TrimSpace(strings.ToLower(mt)); {
	case mt == "":
		return "a body of no declared type"
	case mt == "text/html" || mt == "application/xhtml+xml":
		return "an HTML page"
	case mt == "text/plain":
		return "plain text"
	}
	return "a " + mt + " body"
}

// HasCode reports whether err is an error answer with the machine code
// code, such as api.CodeAcceptorInUse.
func HasCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

func hasStatus(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.StatusCode == code
}

// errorBody is what parseError reads: Outpost's envelope, and the public
// fleet API's top-level detail, a string or (for validation errors) any
// JSON value.
type errorBody struct {
	Error  api.ErrorBody   `json:"error"`
	Detail json.RawMessage `json:"detail"`
}

// parseError turns an error answer into an *Error. It reads the
// {"error":{…}} envelope, else a {"detail":…} body such as the public fleet
// API answers, else falls back to the status line (a proxy's page, say).
func parseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{StatusCode: resp.StatusCode}
	var env errorBody
	if json.Unmarshal(b, &env) == nil {
		if env.Error.Code != "" || env.Error.Message != "" {
			e.Code, e.Message = env.Error.Code, env.Error.Message
			return e
		}
		if msg := detailText(env.Detail); msg != "" {
			e.Code, e.Message = fmt.Sprintf("http_%d", resp.StatusCode), msg
			return e
		}
	}
	e.Code = fmt.Sprintf("http_%d", resp.StatusCode)
	e.foreign = true
	msg := fmt.Sprintf("server answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	switch s := strings.TrimSpace(string(b)); {
	case s != "" && len(s) < 200 && !strings.Contains(s, "<"):
		msg += ": " + s
	case s != "":
		msg += " with " + describeType(resp.Header.Get("Content-Type"))
	}
	e.Message = msg
	return e
}

// detailText is a detail value as text: the string itself, or compact JSON
// for anything else; "" when there is none.
func detailText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return strings.TrimSpace(text)
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return ""
	}
	return buf.String()
}
