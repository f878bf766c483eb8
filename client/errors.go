package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/outpost-sh/outpost/internal/api"
)

// Error is an error answer of the server: its HTTP status and the code and
// message of the {"error":{…}} envelope.
type Error struct {
	StatusCode int
	// Code is a stable machine code such as api.CodeConflict.
	Code string
	// Message is a sentence for people.
	Message string
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

// IsUnauthorized reports whether err is a 401 answer: a missing, bad,
// expired or revoked token.
func IsUnauthorized(err error) bool { return hasStatus(err, http.StatusUnauthorized) }

// IsForbidden reports whether err is a 403 answer: the token lacks a scope or
// is limited to another outpost.
func IsForbidden(err error) bool { return hasStatus(err, http.StatusForbidden) }

func hasStatus(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.StatusCode == code
}

// parseError turns an error answer into an *Error, falling back to the
// status line when the body is not the JSON envelope (a proxy's page, say).
func parseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{StatusCode: resp.StatusCode}
	var env api.ErrorResponse
	if json.Unmarshal(b, &env) == nil && (env.Error.Code != "" || env.Error.Message != "") {
		e.Code, e.Message = env.Error.Code, env.Error.Message
		return e
	}
	e.Code = fmt.Sprintf("http_%d", resp.StatusCode)
	msg := fmt.Sprintf("server answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	if s := strings.TrimSpace(string(b)); s != "" && len(s) < 200 && !strings.Contains(s, "<") {
		msg += ": " + s
	}
	e.Message = msg
	return e
}
