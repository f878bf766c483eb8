package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/machine"
	"github.com/outpost-sh/outpost/internal/redact"
)

// toolFunc runs one tool. Its value, when not nil, is the result's value;
// a non-nil error makes the result not ok (a value may come with it).
type toolFunc func(ctx context.Context, c *callEnv, args json.RawMessage) (any, error)

// tools maps tool names to their implementations; it matches machine.Tools.
var tools = map[string]toolFunc{
	api.ToolExec:      runExec,
	api.ToolReadFile:  runReadFile,
	api.ToolWriteFile: runWriteFile,
	api.ToolEditFile:  runEditFile,
	api.ToolListDir:   runListDir,
	api.ToolGitClone:  runGitClone,
}

// runTool runs the named tool; each tool decodes its own arguments.
func runTool(ctx context.Context, c *callEnv, name string, args json.RawMessage) (any, error) {
	fn, ok := tools[name]
	if !ok {
		return nil, fmt.Errorf("unknown tool %q; this remote supports %s", name, strings.Join(machine.Tools(), ", "))
	}
	if c.timeout > 0 && name != api.ToolExec {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	return fn(ctx, c, args)
}

// decodeArgs decodes a tool's arguments strictly.
func decodeArgs(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad arguments: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("bad arguments: trailing data after the JSON object")
	}
	return nil
}

// callEnv is what a tool sees of its call.
type callEnv struct {
	seq int64
	// session is the id of the session the call belongs to.
	session string
	workDir string
	// stateDir is the session's state directory (journal, browser profile,
	// screenshots).
	stateDir string
	// env is the environment of processes the call starts.
	env []string
	// timeout is the call frame's timeout; zero means none.
	timeout time.Duration
	log     *slog.Logger

	stdout, stderr *streamWriter
	tail           *tailBuffer

	// browser is the session's browser, shared by its calls.
	browser *browserHost
	// shells and uploads are the session's, shared by its calls.
	shells  *shellSet
	uploads *uploadSet
	// desktop is the session's desktop (its opts nil when it has none).
	desktop *desktopHost
	// waitControl waits while a person has control of the desktop; nil
	// waits for nothing.
	waitControl func(context.Context) error
}

func newCallEnv(s *session, f api.Frame, env []string, set *redact.Set) *callEnv {
	tail := &tailBuffer{}
	return &callEnv{
		seq:      f.Seq,
		session:  s.opts.SessionID,
		workDir:  s.opts.WorkDir,
		stateDir: s.opts.StateDir,
		env:      env,
		timeout:  time.Duration(f.TimeoutS) * time.Second,
		log:      s.log.With("seq", f.Seq),
		stdout:   &streamWriter{seq: f.Seq, stream: api.StreamStdout, red: redact.NewStream(set), out: s.out, tail: tail},
		stderr:   &streamWriter{seq: f.Seq, stream: api.StreamStderr, red: redact.NewStream(set), out: s.out, tail: tail},
		tail:     tail,
		browser:  &s.browser,
		shells:   &s.shells,
		uploads:  &s.uploads,
		desktop:  &s.desk,

		waitControl: s.waitControl,
	}
}

// flush sends what the redactors hold back; call it when the tool is done
// writing.
func (c *callEnv) flush() {
	c.stdout.flush()
	c.stderr.flush()
}

// path resolves p against the workspace unless it is absolute.
func (c *callEnv) path(p string) string {
	if p == "" {
		return c.workDir
	}
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(c.workDir, p)
}

// streamWriter streams one output stream of a call, redacted, to the outbox.
type streamWriter struct {
	seq    int64
	stream string
	red    *redact.Stream
	out    *outbox
	tail   *tailBuffer

	mu    sync.Mutex
	bytes int64
}

func (w *streamWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bytes += int64(len(p))
	w.emit(w.red.Write(p))
	return len(p), nil
}

func (w *streamWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.emit(w.red.Flush())
}

func (w *streamWriter) emit(b []byte) {
	if len(b) == 0 {
		return
	}
	w.tail.Write(b)
	w.out.pushOutput(w.seq, w.stream, b)
}

func (w *streamWriter) written() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bytes
}

// tailSize is how much combined output an exec result keeps.
const tailSize = 4 << 10

// tailBuffer keeps the last tailSize bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= tailSize { // only p's end can be kept: copy no more
		t.buf = append(t.buf[:0], p[len(p)-tailSize:]...)
		return
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*tailSize {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailSize:]...)
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf[max(0, len(t.buf)-tailSize):])
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"marshal_error": err.Error()})
	}
	return b
}
