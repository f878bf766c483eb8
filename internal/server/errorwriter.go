package server

import (
	"bytes"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
)

// errorWriter rewrites the error answers of handlers this package does not
// write itself (the MCP transport, http.ServeContent), which answer with
// http.Error's plain text, into the JSON error envelope every other answer
// uses. Answers below 400 pass through untouched, streamed as written.
type errorWriter struct {
	http.ResponseWriter
	// keepJSON passes through error answers that are already JSON (the MCP
	// transport's JSON-RPC errors belong to its protocol).
	keepJSON bool

	status int // the error status being rewritten; 0 while passing through
	wrote  bool
	body   bytes.Buffer
}

// maxErrorText bounds how much of a rewritten error's text is kept.
const maxErrorText = 1024

func (w *errorWriter) WriteHeader(code int) {
	if w.wrote || w.status != 0 {
		return
	}
	if code >= 400 && !(w.keepJSON && strings.HasPrefix(w.Header().Get("Content-Type"), "application/json")) {
		w.status = code
		return
	}
	if code >= 200 {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *errorWriter) Write(b []byte) (int, error) {
	if w.status != 0 {
		if room := maxErrorText - w.body.Len(); room > 0 {
			w.body.Write(b[:min(len(b), room)])
		}
		return len(b), nil
	}
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush flushes answers that pass through; a rewritten error is written
// whole by finish.
func (w *errorWriter) Flush() {
	if w.status != 0 {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		w.wrote = true
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *errorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the rewritten error, if there is one. Call it once the
// wrapped handler has returned.
func (w *errorWriter) finish() {
	if w.status == 0 {
		return
	}
	h := w.Header()
	for _, k := range []string{"Content-Length", "Content-Disposition", "Content-Encoding", "Etag", "Last-Modified"} {
		h.Del(k)
	}
	writeJSON(w.ResponseWriter, w.status, api.NewErrorResponse(codeOf(w.status), errorSentence(w.body.String(), w.status)))
}

// withJSONErrors serves h through an errorWriter.
func withJSONErrors(h http.Handler, keepJSON bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ew := &errorWriter{ResponseWriter: w, keepJSON: keepJSON}
		h.ServeHTTP(ew, r)
		ew.finish()
	})
}

// statusCodes are the error codes of the HTTP statuses that have their
// own; other statuses from 500 up are internal, the rest bad requests.
var statusCodes = map[int]string{
	http.StatusUnauthorized:          api.CodeUnauthorized,
	http.StatusForbidden:             api.CodeForbidden,
	http.StatusNotFound:              api.CodeNotFound,
	http.StatusMethodNotAllowed:      api.CodeMethodNotAllowed,
	http.StatusConflict:              api.CodeConflict,
	http.StatusGone:                  api.CodeGone,
	http.StatusRequestEntityTooLarge: api.CodeTooLarge,
	http.StatusUnprocessableEntity:   api.CodeUnprocessable,
	http.StatusServiceUnavailable:    api.CodeUnavailable,
}

// codeOf is the error code of an HTTP status.
func codeOf(status int) string {
	if code, ok := statusCodes[status]; ok {
		return code
	}
	if status >= 500 {
		return api.CodeInternal
	}
	return api.CodeBadRequest
}

// errorSentence turns a terse plain-text error ("invalid range: failed to
// overlap") into a sentence ("Invalid range: failed to overlap."), or the
// status text when there is none.
func errorSentence(text string, status int) string {
	text = strings.TrimSpace(strings.ToValidUTF8(text, ""))
	if text == "" {
		text = http.StatusText(status)
	}
	if text == "" {
		text = "The request failed"
	}
	r, n := utf8.DecodeRuneInString(text)
	return lifecycle.Sentence(string(unicode.ToUpper(r)) + text[n:])
}
