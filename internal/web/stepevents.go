package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// stepWriter passes the API's event stream on to the session page, and
// sends before each call event a "step" event with the call's target
// (api.CallTarget): the page's script then heads a step that arrives live
// as the server heads one it renders, without a copy of the per-tool rules.
// Every event of the API passes unchanged, so the page's raw JSON reads as
// the API sent it; a step event has no id, so a reconnecting page resumes
// where it was. An answer that is not an event stream (an error) passes as
// it is.
type stepWriter struct {
	http.ResponseWriter
	// started is set once the status is written; stream when it was 200
	// with an event stream.
	started, stream bool
	// pending holds the start of an event whose end has not been written
	// yet.
	pending []byte
}

// stepEvent is the data of a step event.
type stepEvent struct {
	CallSeq int64  `json:"call_seq"`
	Target  string `json:"target"`
}

func (s *stepWriter) WriteHeader(code int) {
	if !s.started {
		s.started = true
		s.stream = code == http.StatusOK && strings.HasPrefix(s.Header().Get("Content-Type"), "text/event-stream")
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *stepWriter) Write(p []byte) (int, error) {
	if !s.started {
		s.WriteHeader(http.StatusOK)
	}
	if !s.stream {
		return s.ResponseWriter.Write(p)
	}
	s.pending = append(s.pending, p...)
	var out []byte
	rest := s.pending
	for {
		i := bytes.Index(rest, []byte("\n\n"))
		if i < 0 {
			break
		}
		ev := rest[:i+2]
		out = appendStep(out, ev)
		out = append(out, ev...)
		rest = rest[i+2:]
	}
	s.pending = append(s.pending[:0], rest...)
	if len(out) > 0 {
		if _, err := s.ResponseWriter.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush sends what was written, as the API's stream asks after each batch.
func (s *stepWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (s *stepWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// appendStep appends the step event of ev, one event of the stream, when ev
// is a call event with a target to show.
func appendStep(out, ev []byte) []byte {
	// Only call events need the JSON decoded; most events are output.
	if !bytes.Contains(ev, []byte(`"type":"call"`)) {
		return out
	}
	for _, line := range bytes.Split(ev, []byte("\n")) {
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		var call struct {
			Type    string          `json:"type"`
			CallSeq int64           `json:"call_seq"`
			Tool    string          `json:"tool"`
			Args    json.RawMessage `json:"args"`
		}
		if json.Unmarshal(data, &call) != nil || call.Type != api.EventCall || call.CallSeq <= 0 {
			return out
		}
		target := api.CallTarget(call.Tool, call.Args)
		if target == "" {
			return out
		}
		b, err := json.Marshal(stepEvent{CallSeq: call.CallSeq, Target: target})
		if err != nil {
			return out
		}
		out = append(out, "event: step\ndata: "...)
		out = append(out, b...)
		return append(out, '\n', '\n')
	}
	return out
}
