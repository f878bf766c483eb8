//go:build unix || windows

package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
)

func init() {
	tools[api.ToolShellStart] = runShellStart
	tools[api.ToolShellRun] = runShellRun
	tools[api.ToolShellWrite] = runShellWrite
	tools[api.ToolShellRead] = runShellRead
	tools[api.ToolShellInterrupt] = runShellInterrupt
	tools[api.ToolShellKill] = runShellKill
}

const (
	// defaultShellRunTimeout is how long shell_run waits by default.
	defaultShellRunTimeout = 600 * time.Second
	// maxShellReadWait bounds shell_read's wait_ms.
	maxShellReadWait = 60 * time.Second
	// shellStartTimeout bounds the wait for a new shell's first prompt.
	shellStartTimeout = 10 * time.Second
	// markerTag starts every prompt marker, after markerSep and before the
	// shell's token.
	markerTag = "OPEND-"
)

// shellBufferSize bounds the output a shell keeps unread; a variable so
// tests can make it small.
var shellBufferSize = 1 << 20

var shellNameRE = regexp.MustCompile(api.ShellNamePattern)

// shellSet holds a session's persistent shells by name; closeAll ends them
// when the session ends. The zero value is ready.
type shellSet struct {
	mu sync.Mutex // guards m
	m  map[string]*shell
}

// closeAll kills every shell of the set.
func (ss *shellSet) closeAll() {
	ss.mu.Lock()
	set := ss.m
	ss.m = nil
	ss.mu.Unlock()
	for _, sh := range set {
		sh.kill()
	}
}

// lookupShell returns the named shell of c's session.
func lookupShell(c *callEnv, name string) (*shell, error) {
	if !shellNameRE.MatchString(name) {
		return nil, fmt.Errorf("bad arguments: shell name %q must match %s", name, api.ShellNamePattern)
	}
	ss := c.shells
	ss.mu.Lock()
	defer ss.mu.Unlock()
	sh := ss.m[name]
	if sh == nil {
		return nil, fmt.Errorf("no shell named %q; start it with shell_start", name)
	}
	if sh.pid == 0 {
		return nil, fmt.Errorf("shell %q is still starting; try again in a moment", name)
	}
	return sh, nil
}

// shell is one persistent shell on a pseudo-terminal. The shell's prompt is
// a marker carrying the number of the last shell_run and its exit status,
// so the end of a command is seen even when Ctrl-C cut the command line.
type shell struct {
	name, prog string
	pid        int      // the shell's process id; 0 while it starts
	dir        string   // temporary directory of command files
	sys        sysShell // the platform's process and terminal
	token      string
	waitDone   chan struct{} // closed when the shell process has exited
	readDone   chan struct{} // closed when readLoop has ended (see kill)

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every change
	buf      []byte        // output not yet read or streamed
	scan     int           // where in buf to look for the next marker
	dropped  int64         // unread output dropped since the last read
	received int64         // all output ever read from the terminal
	run      int           // number of the last command sent
	running  bool          // the last command has not finished
	exitCode *int          // exit status of a finished command not yet reported
	exited   bool
	status   int       // the shell's exit status once exited
	stream   io.Writer // where a waiting shell_run wants output, or nil
	streamed int64     // bytes written to stream
	killed   bool
}

func runShellStart(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.ShellStartArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if !shellNameRE.MatchString(a.Name) {
		return nil, fmt.Errorf("bad arguments: shell name %q must match %s", a.Name, api.ShellNamePattern)
	}
	ss := c.shells
	ss.mu.Lock()
	var exited *shell
	if old := ss.m[a.Name]; old != nil {
		old.mu.Lock()
		alive := !old.exited || old.pid == 0 // a placeholder: starting
		old.mu.Unlock()
		if alive {
			ss.mu.Unlock()
			return nil, fmt.Errorf("a shell named %q is already running; use it, or end it with shell_kill first", a.Name)
		}
		exited = old
	}
	// Reserve the name while the shell starts.
	if ss.m == nil {
		ss.m = map[string]*shell{}
	}
	placeholder := &shell{exited: true, waitDone: make(chan struct{}), changed: make(chan struct{})}
	close(placeholder.waitDone)
	ss.m[a.Name] = placeholder
	ss.mu.Unlock()
	if exited != nil {
		exited.kill() // release what the exited shell holds
	}

	sh, err := startShell(ctx, c, a.Name)
	ss.mu.Lock()
	if ss.m[a.Name] == placeholder {
		if err != nil {
			delete(ss.m, a.Name)
		} else {
			ss.m[a.Name] = sh
		}
	} else if err == nil {
		err = errors.New("the session ended while the shell started")
		ss.mu.Unlock()
		sh.kill()
		return nil, err
	}
	ss.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return api.ShellStartResult{Name: sh.name, Shell: sh.prog, PID: sh.pid}, nil
}

// signal wakes waiters; the caller holds mu.
func (sh *shell) signal() {
	close(sh.changed)
	sh.changed = make(chan struct{})
}

// readLoop copies the terminal's output into the shell's buffer.
func (sh *shell) readLoop() {
	defer close(sh.readDone)
	b := make([]byte, 32<<10)
	for {
		n, err := sh.readTerm(b)
		if n > 0 {
			sh.mu.Lock()
			sh.received += int64(n)
			sh.buf = append(sh.buf, b[:n]...)
			sh.process()
			sh.signal()
			sh.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// process finds markers in buf, streams what it may, and bounds buf; the
// caller holds mu.
func (sh *shell) process() {
	prefix := []byte(string(markerSep) + markerTag + sh.token + "-")
	sh.scan = min(max(sh.scan, 0), len(sh.buf))
	for {
		i := bytes.Index(sh.buf[sh.scan:], prefix)
		if i < 0 {
			// Keep back what could be the start of a marker.
			sh.scan = max(0, len(sh.buf)-len(prefix)+1)
			break
		}
		i += sh.scan
		rest := sh.buf[i+len(prefix):]
		j := bytes.IndexByte(rest, markerSep)
		if j < 0 {
			sh.scan = i // the marker is not complete yet
			break
		}
		runStr, codeStr, ok := bytes.Cut(rest[:j], []byte(":"))
		end := i + len(prefix) + j + 1
		if markerEndsLine {
			// The marker is a line of its own: its line end goes with it.
			if end == len(sh.buf) {
				sh.scan = i // wait for the line end
				break
			}
			if sh.buf[end] == '\n' {
				end++
			}
		}
		run, err1 := strconv.Atoi(string(runStr))
		code, err2 := strconv.Atoi(string(codeStr))
		if !ok || err1 != nil || err2 != nil {
			sh.scan = i + 1 // not ours after all
			continue
		}
		if sh.running && run == sh.run {
			n := sh.emit(i)
			i, end = i-n, end-n
			sh.running = false
			sh.exitCode = &code
			sh.stream = nil
			_ = os.Remove(sh.cmdFile(run))
		}
		sh.buf = append(sh.buf[:i], sh.buf[end:]...)
		sh.scan = i
	}
	if sh.stream != nil {
		// Stream what cannot be part of a marker.
		safe := sh.scan
		if k := bytes.IndexByte(sh.buf[safe:], markerSep); k >= 0 {
			safe += k
		} else {
			safe = len(sh.buf)
		}
		sh.emit(safe)
	}
	if over := len(sh.buf) - shellBufferSize; over > 0 {
		sh.buf = sh.buf[over:]
		sh.dropped += int64(over)
		sh.scan = max(0, sh.scan-over)
	}
}

// emit writes buf[:n] to the stream, if any, and removes it, returning how
// many bytes it removed; the caller holds mu.
func (sh *shell) emit(n int) int {
	if sh.stream == nil || n == 0 {
		return 0
	}
	_, _ = sh.stream.Write(sh.buf[:n])
	sh.streamed += int64(n)
	sh.buf = sh.buf[n:]
	sh.scan = max(0, sh.scan-n)
	return n
}

// waitLoop records the shell's exit.
func (sh *shell) waitLoop() {
	status := sh.waitProcess()
	sh.mu.Lock()
	sh.exited = true
	sh.status = status
	if sh.running {
		sh.running = false
		code := sh.status
		sh.exitCode = &code
		sh.emit(len(sh.buf))
		sh.stream = nil
	}
	sh.signal()
	sh.mu.Unlock()
	close(sh.waitDone)
}

func (sh *shell) cmdFile(run int) string {
	return filepath.Join(sh.dir, fmt.Sprintf("cmd-%d%s", run, commandFileExt))
}

func runShellRun(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.ShellRunArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.TimeoutS < 0 {
		return nil, errors.New("bad arguments: timeout_s must not be negative")
	}
	sh, err := lookupShell(c, a.Name)
	if err != nil {
		return nil, err
	}
	timeout := defaultShellRunTimeout
	if a.TimeoutS > 0 {
		timeout = time.Duration(a.TimeoutS) * time.Second
	}

	sh.mu.Lock()
	switch {
	case sh.exited:
		sh.mu.Unlock()
		return nil, fmt.Errorf("shell %q has exited (status %d); end it with shell_kill and start a new one", a.Name, sh.status)
	case sh.running:
		sh.mu.Unlock()
		return nil, fmt.Errorf("shell %q is still running a command: follow it with shell_read, answer it with shell_write or stop it with shell_interrupt", a.Name)
	}
	sh.run++
	run := sh.run
	if err := os.WriteFile(sh.cmdFile(run), sh.commandFileText(run, a.Command), 0o600); err != nil {
		sh.mu.Unlock()
		return nil, fmt.Errorf("shell_run: write the command file: %w", err)
	}
	// Output nobody read yet (of background jobs, say) comes first.
	sh.exitCode = nil
	sh.running = true
	sh.stream, sh.streamed = c.stdout, 0
	sh.emit(len(sh.buf))
	sh.mu.Unlock()
	if err := sh.sendRun(run); err != nil {
		sh.mu.Lock()
		sh.running, sh.stream = false, nil
		sh.mu.Unlock()
		return nil, fmt.Errorf("shell_run: write to the shell: %w", err)
	}

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		sh.mu.Lock()
		if !sh.running {
			res := api.ShellRunResult{ExitCode: -1, Exited: sh.exited, OutputBytes: sh.streamed, DroppedBytes: sh.dropped}
			if sh.exitCode != nil {
				res.ExitCode = *sh.exitCode
			}
			sh.exitCode, sh.dropped = nil, 0
			sh.mu.Unlock()
			switch {
			case res.Exited:
				return res, fmt.Errorf("the shell exited (status %d)", res.ExitCode)
			case res.ExitCode != 0:
				return res, fmt.Errorf("exit code %d", res.ExitCode)
			}
			return res, nil
		}
		ch := sh.changed
		sh.mu.Unlock()
		var why error
		select {
		case <-ch:
			continue
		case <-timer.C:
			why = fmt.Errorf("still running after %s: follow it with shell_read, answer it with shell_write or stop it with shell_interrupt", timeout)
		case <-ctx.Done():
			why = errors.New("cancelled; the command may still be running in the shell: see shell_read, stop it with shell_interrupt")
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				why = errors.New("the call's time ran out; the command is still running: follow it with shell_read, answer it with shell_write or stop it with shell_interrupt")
			}
		}
		sh.mu.Lock()
		if !sh.running {
			sh.mu.Unlock()
			continue // it finished just now
		}
		sh.emit(sh.scan) // what surely is output
		sh.stream = nil
		res := api.ShellRunResult{ExitCode: -1, Running: true, OutputBytes: sh.streamed, DroppedBytes: sh.dropped}
		sh.dropped = 0
		sh.mu.Unlock()
		return res, why
	}
}

func runShellWrite(_ context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.ShellWriteArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.Text == "" {
		return nil, errors.New("bad arguments: text must not be empty")
	}
	sh, err := lookupShell(c, a.Name)
	if err != nil {
		return nil, err
	}
	sh.mu.Lock()
	exited := sh.exited
	sh.mu.Unlock()
	if exited {
		return nil, fmt.Errorf("shell %q has exited; end it with shell_kill and start a new one", a.Name)
	}
	n, err := sh.writeTerm(a.Text)
	if err != nil {
		return api.ShellWriteResult{Bytes: n}, fmt.Errorf("write to shell %q: %w", a.Name, err)
	}
	return api.ShellWriteResult{Bytes: n}, nil
}

func runShellRead(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.ShellReadArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	wait := time.Duration(a.WaitMS) * time.Millisecond
	if a.WaitMS < 0 || wait > maxShellReadWait {
		return nil, errors.New("bad arguments: wait_ms must be between 0 and 60000")
	}
	sh, err := lookupShell(c, a.Name)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		sh.mu.Lock()
		// Hold back a marker in the making unless nothing else will come.
		avail := sh.scan
		if !sh.running || sh.exited {
			avail = len(sh.buf)
		}
		if avail > 0 || sh.exitCode != nil || sh.exited || wait == 0 {
			out := bytes.Clone(sh.buf[:avail])
			sh.buf = sh.buf[avail:]
			sh.scan = max(0, sh.scan-avail)
			res := api.ShellReadResult{Running: sh.running, ExitCode: sh.exitCode, Exited: sh.exited, OutputBytes: int64(len(out)), DroppedBytes: sh.dropped}
			sh.exitCode, sh.dropped = nil, 0
			sh.mu.Unlock()
			_, _ = c.stdout.Write(out)
			return res, nil
		}
		ch := sh.changed
		sh.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			wait = 0
		case <-ctx.Done():
			wait = 0
		}
	}
}

func runShellInterrupt(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.ShellInterruptArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	sh, err := lookupShell(c, a.Name)
	if err != nil {
		return nil, err
	}
	if err := sh.interrupt(ctx); err != nil {
		return nil, fmt.Errorf("interrupt shell %q: %w", a.Name, err)
	}
	return api.ShellDoneResult{Name: a.Name}, nil
}

func runShellKill(_ context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.ShellKillArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	sh, err := lookupShell(c, a.Name)
	if err != nil {
		return nil, err
	}
	c.shells.mu.Lock()
	if c.shells.m[a.Name] == sh {
		delete(c.shells.m, a.Name)
	}
	c.shells.mu.Unlock()
	sh.kill()
	return api.ShellDoneResult{Name: a.Name}, nil
}
