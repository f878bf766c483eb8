//go:build unix

package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

const (
	// markerSep opens and closes a prompt marker: the record separator,
	// which a terminal passes on as it is.
	markerSep = '\x1e'
	// markerEndsLine is false: the marker is the prompt, before the next
	// command's output on the same line.
	markerEndsLine = false
	// commandFileExt names shell_run's command files.
	commandFileExt = ".sh"
)

// sysShell is a shell's process and its pseudo-terminal.
type sysShell struct {
	cmd *exec.Cmd
	pty *os.File
}

func (sh *shell) readTerm(b []byte) (int, error) { return sh.sys.pty.Read(b) }

func (sh *shell) writeTerm(s string) (int, error) { return sh.sys.pty.WriteString(s) }

// waitProcess waits for the shell to exit and returns its status, -1 when
// it is not known.
func (sh *shell) waitProcess() int {
	err := sh.sys.cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return -1
	}
	return sh.sys.cmd.ProcessState.ExitCode()
}

// commandFileText is what shell_run's command file holds for command.
func (sh *shell) commandFileText(_ int, command string) []byte { return []byte(command + "\n") }

// sendRun has the shell run command file run, numbering its marker run.
func (sh *shell) sendRun(run int) error {
	_, err := sh.writeTerm(fmt.Sprintf("__op_run=%d; . '%s'\n", run, sh.cmdFile(run)))
	return err
}

// shellPrograms are the shells shell_start tries, in order, with their
// arguments; a variable so tests can try sh.
var shellPrograms = [][]string{
	{"bash", "--noediting", "--norc", "--noprofile", "-i"},
	{"sh", "-i"},
}

// startShell starts a shell and waits for its first marker prompt.
func startShell(ctx context.Context, c *callEnv, name string) (*shell, error) {
	prog, args := "", []string(nil)
	for _, cand := range shellPrograms {
		if p, err := exec.LookPath(cand[0]); err == nil {
			prog, args = p, cand[1:]
			break
		}
	}
	if prog == "" {
		return nil, errors.New("no shell found: neither bash nor sh is on PATH; install bash")
	}
	tok := make([]byte, 8)
	_, _ = rand.Read(tok)
	dir, err := os.MkdirTemp("", "outpost-shell-*")
	if err != nil {
		return nil, fmt.Errorf("start shell: %w", err)
	}
	cmd := exec.Command(prog, args...)
	cmd.Dir = c.workDir
	cmd.Env = mergeEnv(c.env, map[string]string{"TERM": "dumb"})
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 200})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s on a terminal: %w", prog, err)
	}
	sh := &shell{
		name: name, prog: prog, pid: cmd.Process.Pid, dir: dir,
		sys:      sysShell{cmd: cmd, pty: f},
		token:    hex.EncodeToString(tok),
		waitDone: make(chan struct{}),
		readDone: make(chan struct{}),
		changed:  make(chan struct{}),
		running:  true, // command 0 is the set-up line below
	}
	go sh.readLoop()
	go sh.waitLoop()
	// Command 0: no echo, no \r added to output, no history, and the marker
	// prompt. The echo of this line itself is discarded below.
	// (Only portable commands: an error in a special builtin would abort
	// the line in sh.)
	setup := `stty -echo -onlcr; __op_rs=$(printf '\036'); __op_run=0; PS2=''; unset PROMPT_COMMAND HISTFILE; ` +
		`PS1="${__op_rs}` + markerTag + sh.token + `-\${__op_run}:\$?${__op_rs}"` + "\n"
	if _, err := f.WriteString(setup); err != nil {
		sh.kill()
		return nil, fmt.Errorf("start shell: %w", err)
	}
	deadline := time.NewTimer(shellStartTimeout)
	defer deadline.Stop()
	for {
		sh.mu.Lock()
		running, exited, ch := sh.running, sh.exited, sh.changed
		if !running {
			sh.buf, sh.scan, sh.exitCode = nil, 0, nil // the banner and the echo
		}
		sh.mu.Unlock()
		if !running {
			return sh, nil
		}
		if exited {
			sh.kill()
			return nil, fmt.Errorf("%s exited while starting", prog)
		}
		select {
		case <-ch:
		case <-deadline.C:
			sh.kill()
			return nil, fmt.Errorf("%s did not show a prompt within %s", prog, shellStartTimeout)
		case <-ctx.Done():
			sh.kill()
			return nil, errors.New("cancelled")
		}
	}
}

// kill ends the shell, its foreground job and its process group.
func (sh *shell) kill() {
	sh.mu.Lock()
	if sh.killed || sh.pid == 0 {
		sh.mu.Unlock()
		return
	}
	sh.killed = true
	sh.mu.Unlock()
	select {
	case <-sh.waitDone: // reaped: its ids may belong to others now
	default:
		pid := sh.pid
		fg, err := unix.IoctlGetInt(int(sh.sys.pty.Fd()), unix.TIOCGPGRP)
		if err != nil || fg == pid {
			fg = 0
		}
		// A hangup first: bash passes it on to its jobs.
		if fg > 0 {
			_ = syscall.Kill(-fg, syscall.SIGHUP)
		}
		_ = syscall.Kill(-pid, syscall.SIGHUP)
		select {
		case <-sh.waitDone:
		case <-time.After(time.Second):
		}
		if fg > 0 {
			_ = syscall.Kill(-fg, syscall.SIGKILL)
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		select {
		case <-sh.waitDone:
		case <-time.After(5 * time.Second):
		}
	}
	_ = sh.sys.pty.Close() // ends readLoop's read
	select {
	case <-sh.readDone:
	case <-time.After(5 * time.Second): // a terminal that never hangs up: leave its reader
	}
	_ = os.RemoveAll(sh.dir)
}

// interruptGrace is how long interrupt waits for a command that is about to
// take the terminal (between the shell's fork and the job's start).
const interruptGrace = 2 * time.Second

// interrupt sends SIGINT to the terminal's foreground process group. The
// shell itself is signalled only as a last resort (a command made of
// builtins alone): a signal racing with the start of a job can cut the
// command line while the job goes on, or end an interactive shell.
func (sh *shell) interrupt(ctx context.Context) error {
	pid := sh.pid
	deadline := time.Now().Add(interruptGrace)
	for {
		sh.mu.Lock()
		exited, running := sh.exited, sh.running
		sh.mu.Unlock()
		if exited {
			return errors.New("the shell has exited; end it with shell_kill and start a new one")
		}
		fg, err := unix.IoctlGetInt(int(sh.sys.pty.Fd()), unix.TIOCGPGRP)
		if err != nil || fg <= 0 {
			// Let the terminal do it: Ctrl-C.
			_, err := sh.sys.pty.WriteString("\x03")
			return err
		}
		if fg != pid {
			return sh.interruptJob(ctx, fg)
		}
		if !running {
			return nil // the shell is idle: nothing to interrupt
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return syscall.Kill(pid, syscall.SIGINT)
		}
		time.Sleep(10 * time.Millisecond) // the job is about to take the terminal
	}
}

// interruptJob sends SIGINT to the process group fg. A job caught between
// its fork and its exec may lose the signal (the shell's handler is still in
// place); where /proc shows the job's program changed after the signal, it
// is sent again, a few times at most. A program that merely survives the
// signal (it handles SIGINT) is not signalled twice.
func (sh *shell) interruptJob(ctx context.Context, fg int) error {
	for range 3 {
		before := procExe(fg)
		if err := syscall.Kill(-fg, syscall.SIGINT); err != nil {
			if errors.Is(err, syscall.ESRCH) {
				return nil
			}
			return err
		}
		deadline := time.Now().Add(500 * time.Millisecond)
		for {
			now, err := unix.IoctlGetInt(int(sh.sys.pty.Fd()), unix.TIOCGPGRP)
			if err != nil || now != fg {
				return nil // the job is gone
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if after := procExe(fg); before == "" || after == before {
			return nil // still there: it handles the signal
		}
	}
	return nil
}

// procExe is the program a process runs, where /proc shows it; "" if not.
func procExe(pid int) string {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return ""
	}
	return exe
}
