package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/suspend"
)

// maxBodyBytes bounds every request body.
const maxBodyBytes = 1 << 20

// httpError is an error with the status and code a client should see. Its
// message is a whole sentence safe to show.
type httpError struct {
	status  int
	code    string
	message string
}

func (e *httpError) Error() string { return e.message }

func errBadRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, api.CodeBadRequest, errorText(format, args...)}
}

func errNotFound(format string, args ...any) error {
	return &httpError{http.StatusNotFound, api.CodeNotFound, errorText(format, args...)}
}

func errConflict(format string, args ...any) error {
	return &httpError{http.StatusConflict, api.CodeConflict, errorText(format, args...)}
}

func errHTTPGone(format string, args ...any) error {
	return &httpError{http.StatusGone, api.CodeGone, errorText(format, args...)}
}

func errForbidden(format string, args ...any) error {
	return &httpError{http.StatusForbidden, api.CodeForbidden, errorText(format, args...)}
}

func errUnauthorized(format string, args ...any) error {
	return &httpError{http.StatusUnauthorized, api.CodeUnauthorized, errorText(format, args...)}
}

func errUnprocessable(format string, args ...any) error {
	return &httpError{http.StatusUnprocessableEntity, api.CodeUnprocessable, errorText(format, args...)}
}

// maxEcho bounds how many characters of one value an error message
// repeats. Messages name the value they refuse so its sender can find it,
// but a request may carry values of a megabyte: repeated whole, a refusal
// would be as large as the request.
const maxEcho = 200

// verbatim is text of the server's own (a list of tool names, say) that an
// error message shows whole, however long.
type verbatim string

// errorText formats an error message. Every text argument (a string,
// []byte, error or fmt.Stringer) longer than maxEcho characters is cut to
// its first maxEcho characters followed by "…", so no input comes back
// whole; a verbatim argument is shown as it is. The cut values replace
// those in args (a fresh slice unless the caller spreads one of its own),
// which keeps errorText and the err… helpers printf wrappers for go vet.
func errorText(format string, args ...any) string {
	for i, a := range args {
		var text string
		switch v := a.(type) {
		case verbatim:
			args[i] = string(v)
			continue
		case string:
			text = v
		case []byte:
			text = string(v)
		case error:
			text = v.Error()
		case fmt.Stringer:
			text = v.String()
		default:
			continue
		}
		if utf8.RuneCountInString(text) <= maxEcho {
			continue
		}
		n := 0
		for j := range text {
			if n == maxEcho {
				text = text[:j]
				break
			}
			n++
		}
		args[i] = text + "…"
	}
	return fmt.Sprintf(format, args...)
}

// decodeError is a request body the decoder refused: the answer for the
// client, and the decoder's error for a handler that answers some fields'
// errors differently (errors.As finds both).
type decodeError struct {
	answer *httpError
	cause  error
}

func (e *decodeError) Error() string   { return e.answer.message }
func (e *decodeError) Unwrap() []error { return []error{e.answer, e.cause} }

// writeJSON writes v with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// writeError answers err as the JSON error envelope. Errors that are not
// httpErrors are logged and answered as a generic 500, so internals never
// leak.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	var le *lifecycle.Error
	var se *suspend.Error
	switch {
	case errors.As(err, &he):
	case errors.As(err, &le):
		he = lifecycleAnswer(le)
	case errors.As(err, &se):
		he = &httpError{se.Status, se.Code, se.Message}
	case errors.Is(err, store.ErrTokenRevoked):
		// A claim read its token again in its own transaction and found
		// it revoked (or expired) since the request was authenticated.
		he = &httpError{http.StatusUnauthorized, api.CodeUnauthorized, "The API token has been revoked or has expired; the claim was not made."}
	case errors.Is(err, store.ErrNotFound):
		he = &httpError{http.StatusNotFound, api.CodeNotFound, "The requested object does not exist."}
	case errors.Is(err, store.ErrConflict):
		he = &httpError{http.StatusConflict, api.CodeConflict, "The request conflicts with the current state."}
	case r.Context().Err() != nil:
		return // the client went away
	default:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		he = &httpError{http.StatusInternalServerError, api.CodeInternal, "The server failed to handle the request; see its log."}
	}
	writeJSON(w, he.status, api.NewErrorResponse(he.code, he.message))
}

// lifecycleAnswer is the answer a client gets for a transition the session
// state machine refused: the one place its kinds become HTTP statuses. The
// message is the refusal's own, each value in it bounded as errorText does.
func lifecycleAnswer(le *lifecycle.Error) *httpError {
	msg := errorText(le.Format, slices.Clone(le.Args)...)
	switch {
	case errors.Is(le, lifecycle.ErrGone):
		return &httpError{http.StatusNotFound, api.CodeNotFound, msg}
	case errors.Is(le, lifecycle.ErrAtCapacity):
		return &httpError{http.StatusConflict, api.CodeOutpostAtCapacity, msg}
	case errors.Is(le, lifecycle.ErrConflict), errors.Is(le, lifecycle.ErrEnded):
		return &httpError{http.StatusConflict, api.CodeConflict, msg}
	}
	return &httpError{http.StatusInternalServerError, api.CodeInternal, "The server failed to handle the request; see its log."}
}

// decode reads a JSON body into v strictly: one object, no unknown fields,
// at most maxBodyBytes.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return &httpError{http.StatusUnsupportedMediaType, api.CodeBadRequest, "The request body must be JSON (Content-Type: application/json)."}
	}
	body := http.MaxBytesReader(w, r.Body, maxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		var syntax *json.SyntaxError
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &tooBig):
			return &httpError{http.StatusRequestEntityTooLarge, api.CodeTooLarge, fmt.Sprintf("The request body is larger than %d bytes.", maxBodyBytes)}
		case errors.Is(err, io.EOF):
			return errBadRequest("The request body is empty; a JSON object is required.")
		case errors.As(err, &syntax):
			return errBadRequest("The request body is not valid JSON (at byte %d).", syntax.Offset)
		case errors.As(err, &typeErr):
			msg := fmt.Sprintf("Field %q has the wrong type: expected %s.", typeErr.Field, typeErr.Type)
			return &decodeError{&httpError{http.StatusBadRequest, api.CodeBadRequest, msg}, typeErr}
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return errBadRequest("The request has an unknown field %s.", strings.TrimPrefix(err.Error(), "json: unknown field "))
		default:
			return errBadRequest("The request body could not be read: %v.", err)
		}
	}
	if dec.More() {
		return errBadRequest("The request body must hold exactly one JSON object.")
	}
	return nil
}

// decodeOptional is decode for bodies that may be empty.
func decodeOptional(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	return decode(w, r, v)
}
