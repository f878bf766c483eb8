package worker

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"sync"
)

// lineWriter copies a remote's output to its remote.log as is, and line by
// line, prefixed with the session id, to the worker's stdout or log. The
// remote's stdout and stderr share one lineWriter per stream and one file.
type lineWriter struct {
	mu      *sync.Mutex // shared by both streams; guards file, out and buf
	file    io.Writer
	out     io.Writer // nil: log lines to log
	log     *slog.Logger
	session string
	stream  string
	buf     []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.file.Write(p) // a full disk must not stop the session
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emitLocked(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a very long line without a newline
		w.emitLocked(w.buf)
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

// flush emits a last line that had no newline.
func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emitLocked(w.buf)
		w.buf = nil
	}
}

func (w *lineWriter) emitLocked(line []byte) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	if w.out != nil {
		fmt.Fprintf(w.out, "[%s] %s\n", w.session, line)
		return
	}
	w.log.Info("remote output", "session", w.session, "stream", w.stream, "line", string(line))
}

// setSession names the session the lines belong to, from now on: a
// pre-started remote gets its session after its start.
func (w *lineWriter) setSession(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.session = id
}
