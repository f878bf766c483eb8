package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/redact"
)

// testCall is a call run directly against a tool, without a gateway.
type testCall struct {
	s   *session // the call's session: its shells, uploads and outbox
	c   *callEnv
	out *outbox
}

func newTestCall(t *testing.T, workDir string, secrets map[string]string) *testCall {
	t.Helper()
	s := &session{
		opts: Options{WorkDir: workDir},
		log:  slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		out:  newOutbox(),
	}
	env := mergeEnv(cleanEnv(os.Environ()), secrets)
	return &testCall{s: s, c: newCallEnv(s, api.Frame{Seq: 1}, env, redact.NewSet(secrets)), out: s.out}
}

// run runs tool with args (marshalled to JSON) and decodes the value into v
// when v is not nil.
func (tc *testCall) run(t *testing.T, ctx context.Context, tool string, args, v any) error {
	t.Helper()
	value, err := runTool(ctx, tc.c, tool, mustJSON(args))
	tc.c.flush()
	if v != nil && value != nil {
		if jerr := json.Unmarshal(mustJSON(value), v); jerr != nil {
			t.Fatalf("decode %s value: %v", tool, jerr)
		}
	}
	return err
}

// output drains the outbox and returns what was written to stream.
func (tc *testCall) output(stream string) string {
	var b strings.Builder
	for {
		it, ok := tc.out.pop()
		if !ok {
			return b.String()
		}
		if it.output != nil && it.output.Stream == stream {
			b.Write(it.output.Data)
		}
	}
}

// waitOutput polls the outbox until stream holds want, or fails the test.
func (tc *testCall) waitOutput(t *testing.T, stream, want string) {
	t.Helper()
	var got bytes.Buffer
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if it, ok := tc.out.pop(); ok {
			if it.output != nil && it.output.Stream == stream {
				got.Write(it.output.Data)
				if strings.Contains(got.String(), want) {
					return
				}
			}
			continue
		}
		select {
		case <-tc.out.notify:
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("%s never showed %q; got %q", stream, want, got.String())
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
