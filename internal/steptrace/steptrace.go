// Package steptrace writes one timestamped line per step of a session's
// dispatch (create, watch, claim, hand-over, hello, call, spawn) to the
// file that OUTPOST_STEP_TRACE names, so that the server, the worker and
// the remote, each appending to the same file, show where a dispatch
// waits. Without the variable every call is a no-op costing one atomic
// load.
//
// A line is "UNIXNANO PROCESS STEP SESSION"; lines of up to a few hundred
// bytes are appended with one write each, which O_APPEND keeps whole
// between processes on a local file system.
package steptrace

import (
	"os"
	"strconv"
	"sync"
	"time"
)

// Env names the file the trace is appended to. A worker passes it on to
// the remotes it starts.
const Env = "OUTPOST_STEP_TRACE"

var (
	once sync.Once
	file *os.File // nil: tracing is off
	proc string
)

func open() {
	path := os.Getenv(Env)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	file = f
	proc = strconv.Itoa(os.Getpid())
}

// On reports whether steps are traced.
func On() bool {
	once.Do(open)
	return file != nil
}

// Mark records that step of session happened now.
func Mark(step, session string) {
	if !On() {
		return
	}
	if session == "" {
		session = "-"
	}
	b := make([]byte, 0, 96)
	b = strconv.AppendInt(b, time.Now().UnixNano(), 10)
	b = append(b, ' ')
	b = append(b, proc...)
	b = append(b, ' ')
	b = append(b, step...)
	b = append(b, ' ')
	b = append(b, session...)
	b = append(b, '\n')
	_, _ = file.Write(b)
}
