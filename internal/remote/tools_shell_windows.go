package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unsafe"

	"golang.org/x/sys/windows"
)

const (
	// markerSep opens and closes a prompt marker. A pseudo console renders
	// a screen, where control characters may become glyphs, so the marker
	// is printable; the token makes it unique.
	markerSep = '#'
	// markerEndsLine: the marker is echoed on a line of its own, whose line
	// end is not output of the command.
	markerEndsLine = true
	// commandFileExt names shell_run's command files: batch files for
	// cmd.exe.
	commandFileExt = ".cmd"
	// shellCols and shellRows size the pseudo console: wide, so that long
	// lines are seldom wrapped.
	shellCols, shellRows = 500, 50
	// envShellDir names, in the shell's environment, the directory of its
	// command files.
	envShellDir = "OUTPOST_SHELL_DIR"
)

// sysShell is a shell's process on a pseudo console (ConPTY).
type sysShell struct {
	pc      windows.Handle // the pseudo console
	process windows.Handle
	job     windows.Handle // the shell's process tree
	in      *os.File       // the console's input
	out     *os.File       // the console's output, as it renders it

	mu   sync.Mutex // guards echo, held, vt
	echo string     // a line typed, whose echo is still to be removed
	held []byte     // cleaned output held back while echo is awaited
	vt   vtCleaner
}

// conPTYAvailable reports whether this Windows has the pseudo console API
// (Windows 10 1809 and later).
func conPTYAvailable() error {
	return windows.NewLazySystemDLL("kernel32.dll").NewProc("CreatePseudoConsole").Find()
}

// startShell starts cmd.exe on a pseudo console and waits for its first
// marker. Only cmd.exe: its prompt is off and each command file is called
// by a batch file that prints the marker, which needs no prompt support.
func startShell(ctx context.Context, c *callEnv, name string) (*shell, error) {
	if err := conPTYAvailable(); err != nil {
		return nil, fmt.Errorf("persistent shells need the pseudo console (ConPTY) of Windows 10 1809 or later: %w; use exec", err)
	}
	comspec := os.Getenv("ComSpec")
	if comspec == "" {
		comspec = filepath.Join(os.Getenv("SystemRoot"), "System32", "cmd.exe")
	}
	tok := make([]byte, 8)
	_, _ = rand.Read(tok)
	dir, err := os.MkdirTemp("", "outpost-shell-*")
	if err != nil {
		return nil, fmt.Errorf("start shell: %w", err)
	}
	sh := &shell{
		name: name, prog: comspec, dir: dir,
		token:    hex.EncodeToString(tok),
		waitDone: make(chan struct{}),
		readDone: make(chan struct{}),
		changed:  make(chan struct{}),
		running:  true, // command 0 is the start below
	}
	if err := os.WriteFile(sh.cmdFile(0), sh.commandFileText(0, "@rem"), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start shell: %w", err)
	}
	env := mergeEnv(c.env, map[string]string{envShellDir: dir})
	// The shell runs under a cmd.exe that opens the console's own handles
	// for it: a process on a pseudo console started with no standard
	// handles gets none under Wine, and the worker's own (a log file, a
	// pipe) must not leak to it anywhere.
	// With /s, the outer cmd.exe drops the first and the last quote and
	// runs the rest as typed.
	line := `"` + comspec + `" /d /s /c ""` + comspec + `" /d /q /k call "%` + envShellDir + `%\cmd-0.cmd" <CONIN$ >CONOUT$ 2>CONOUT$"`
	if err := sh.sys.start(line, c.workDir, env); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s on a pseudo console: %w", comspec, err)
	}
	pid, err := windows.GetProcessId(sh.sys.process)
	if err != nil {
		pid = 1 // only reported
	}
	sh.pid = int(pid)
	go sh.readLoop()
	go sh.waitLoop()
	deadline := time.NewTimer(shellStartTimeout)
	defer deadline.Stop()
	for {
		sh.mu.Lock()
		running, exited, ch := sh.running, sh.exited, sh.changed
		status := sh.status
		if !running && !exited {
			sh.buf, sh.scan, sh.exitCode = nil, 0, nil // the console's first screen
		}
		sh.mu.Unlock()
		if exited {
			sh.kill()
			return nil, fmt.Errorf("%s exited while starting (status %d)", comspec, status)
		}
		if !running {
			return sh, nil
		}
		select {
		case <-ch:
		case <-deadline.C:
			sh.kill()
			return nil, fmt.Errorf("%s did not start within %s", comspec, shellStartTimeout)
		case <-ctx.Done():
			sh.kill()
			return nil, errors.New("cancelled")
		}
	}
}

// start creates the pseudo console and starts line on it, in a Job Object
// of the shell's own (inside the session's, which ends it with the remote).
func (s *sysShell) start(line, dir string, env []string) (err error) {
	var inR, inW, outR, outW windows.Handle
	if err := windows.CreatePipe(&inR, &inW, nil, 0); err != nil {
		return err
	}
	if err := windows.CreatePipe(&outR, &outW, nil, 0); err != nil {
		windows.CloseHandle(inR)
		windows.CloseHandle(inW)
		return err
	}
	s.in, s.out = os.NewFile(uintptr(inW), "conpty-in"), os.NewFile(uintptr(outR), "conpty-out")
	err = windows.CreatePseudoConsole(windows.Coord{X: shellCols, Y: shellRows}, inR, outW, 0, &s.pc)
	// The console holds its own copies of its ends.
	windows.CloseHandle(inR)
	windows.CloseHandle(outW)
	if err != nil {
		s.in.Close()
		s.out.Close()
		return fmt.Errorf("CreatePseudoConsole: %w", err)
	}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	attrs, err := windows.NewProcThreadAttributeList(1)
	if err != nil {
		return err
	}
	defer attrs.Delete()
	if err := attrs.Update(windows.PROC_THREAD_ATTRIBUTE_PSEUDOCONSOLE, *(*unsafe.Pointer)(unsafe.Pointer(&s.pc)) /* the value is the handle */, unsafe.Sizeof(s.pc)); err != nil {
		return err
	}
	si := windows.StartupInfoEx{ProcThreadAttributeList: attrs.List()}
	si.Cb = uint32(unsafe.Sizeof(si))
	si.Flags = windows.STARTF_USESTDHANDLES // none: not the worker's
	cmdLine, err := windows.UTF16PtrFromString(line)
	if err != nil {
		return err
	}
	wdir, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return err
	}
	block := envBlock(env)
	var pi windows.ProcessInformation
	if err := windows.CreateProcess(nil, cmdLine, nil, nil, false,
		windows.EXTENDED_STARTUPINFO_PRESENT|windows.CREATE_UNICODE_ENVIRONMENT|windows.CREATE_SUSPENDED,
		&block[0], wdir, &si.StartupInfo, &pi); err != nil {
		return fmt.Errorf("CreateProcess: %w", err)
	}
	s.process = pi.Process
	// Into a job before it runs, so that its children are in it too.
	if job, err := windows.CreateJobObject(nil, nil); err == nil {
		if windows.AssignProcessToJobObject(job, pi.Process) == nil {
			s.job = job
		} else {
			windows.CloseHandle(job)
		}
	}
	_, _ = windows.ResumeThread(pi.Thread)
	windows.CloseHandle(pi.Thread)
	return nil
}

// close releases the pseudo console and the handles of s; closing the
// console ends its output, and so readLoop.
func (s *sysShell) close() {
	if s.pc != 0 {
		windows.ClosePseudoConsole(s.pc)
		s.pc = 0
	}
	if s.in != nil {
		s.in.Close()
	}
	if s.out != nil {
		s.out.Close()
	}
	if s.job != 0 {
		windows.CloseHandle(s.job)
		s.job = 0
	}
}

// envBlock is env as CreateProcess takes it: NUL-separated UTF-16 strings
// ending with an empty one.
func envBlock(env []string) []uint16 {
	var b []uint16
	for _, kv := range env {
		if strings.IndexByte(kv, 0) >= 0 {
			continue
		}
		b = append(b, utf16.Encode([]rune(kv))...)
		b = append(b, 0)
	}
	if len(b) == 0 {
		b = append(b, 0)
	}
	return append(b, 0)
}

// readTerm returns the console's output cleaned of its terminal controls,
// without the echo of the line sendRun typed.
func (sh *shell) readTerm(b []byte) (int, error) {
	s := &sh.sys
	raw := make([]byte, len(b))
	for {
		s.mu.Lock()
		if s.echo == "" && len(s.held) > 0 {
			n := copy(b, s.held)
			s.held = s.held[n:]
			s.mu.Unlock()
			return n, nil
		}
		s.mu.Unlock()
		n, err := s.out.Read(raw)
		s.mu.Lock()
		s.held = append(s.held, s.vt.clean(raw[:n])...)
		if s.echo != "" {
			if i := bytes.Index(s.held, []byte(s.echo+"\n")); i >= 0 {
				s.held = append(s.held[:i], s.held[i+len(s.echo)+1:]...)
				s.echo = ""
			} else if len(s.held) > len(s.echo)+4096 || bytes.Contains(s.held, []byte(markerTag+sh.token)) || err != nil {
				s.echo = "" // not echoed as typed: leave it
			}
		}
		s.mu.Unlock()
		if err != nil {
			s.mu.Lock()
			n := copy(b, s.held)
			s.held = s.held[n:]
			s.mu.Unlock()
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
	}
}

// writeTerm types s on the console.
func (sh *shell) writeTerm(s string) (int, error) { return sh.sys.in.WriteString(s) }

// waitProcess waits for the shell to exit and returns its status.
func (sh *shell) waitProcess() int {
	if _, err := windows.WaitForSingleObject(sh.sys.process, windows.INFINITE); err != nil {
		return -1
	}
	var code uint32
	if err := windows.GetExitCodeProcess(sh.sys.process, &code); err != nil {
		return -1
	}
	return int(int32(code))
}

// commandFileText is the batch file of command number run: command is a
// subroutine of it, and the file prints the marker with the command's exit
// status. (A subroutine, not a second file: Wine's cmd.exe turns the
// status of a called batch file into 0 or 1; and %ERRORLEVEL% on the
// marker's line is read once the call has returned, also after exit /b.)
func (sh *shell) commandFileText(run int, command string) []byte {
	command = strings.ReplaceAll(command, "\r\n", "\n")
	var b strings.Builder
	// (call ) sets ERRORLEVEL to 0: a command that sets none, as echo,
	// does not report the one before.
	b.WriteString("@(call )\r\n@call :outpost_command\r\n")
	fmt.Fprintf(&b, "@echo %c%s%s-%d:%%ERRORLEVEL%%%c\r\n", markerSep, markerTag, sh.token, run, markerSep)
	b.WriteString("@goto :eof\r\n:outpost_command\r\n")
	b.WriteString(strings.ReplaceAll(command, "\n", "\r\n") + "\r\n")
	return []byte(b.String())
}

// sendRun types the line that calls command file run; the console's echo
// of it is removed from the output.
func (sh *shell) sendRun(run int) error {
	line := fmt.Sprintf(`call "%%%s%%\cmd-%d.cmd"`, envShellDir, run)
	sh.sys.mu.Lock()
	sh.sys.echo = line
	sh.sys.mu.Unlock()
	_, err := sh.writeTerm(line + "\r")
	return err
}

// kill ends the shell and every process it started, then the console.
func (sh *shell) kill() {
	sh.mu.Lock()
	if sh.killed || sh.pid == 0 {
		sh.mu.Unlock()
		return
	}
	sh.killed = true
	sh.mu.Unlock()
	if sh.sys.job != 0 {
		_ = windows.TerminateJobObject(sh.sys.job, 1)
	}
	_ = windows.TerminateProcess(sh.sys.process, 1)
	select {
	case <-sh.waitDone:
	case <-time.After(5 * time.Second):
	}
	sh.sys.close()
	select {
	case <-sh.readDone:
	case <-time.After(5 * time.Second): // a console that never closes: leave its reader
	}
	windows.CloseHandle(sh.sys.process)
	_ = os.RemoveAll(sh.dir)
}

// interrupt ends the programs the shell runs: every process below the
// shell's cmd.exe, with the status Ctrl-C gives (STATUS_CONTROL_C_EXIT).
// cmd.exe goes on with the command's next line, as when it answers no to
// "Terminate batch job?". A command of builtins alone (set /p waiting for
// input) has no process: the console gets Ctrl-C, which cmd.exe survives
// on Windows (under Wine it ends the shell).
func (sh *shell) interrupt(ctx context.Context) error {
	deadline := time.Now().Add(interruptGrace)
	for {
		sh.mu.Lock()
		exited, running := sh.exited, sh.running
		sh.mu.Unlock()
		if exited {
			return errors.New("the shell has exited; end it with shell_kill and start a new one")
		}
		if !running {
			return nil // the shell is idle: nothing to interrupt
		}
		pids, err := programsBelow(uint32(sh.pid))
		if err != nil {
			return err
		}
		if len(pids) > 0 {
			for _, pid := range pids {
				if h, err := windows.OpenProcess(windows.PROCESS_TERMINATE, false, pid); err == nil {
					_ = windows.TerminateProcess(h, uint32(windows.STATUS_CONTROL_C_EXIT))
					windows.CloseHandle(h)
				}
			}
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_, err := sh.writeTerm("\x03")
			return err
		}
		time.Sleep(20 * time.Millisecond) // a program may be about to start
	}
}

// programsBelow returns the processes below the shell: the shell is the
// child of the cmd.exe started on the console (pid), and its descendants
// are what it runs.
func programsBelow(pid uint32) ([]uint32, error) {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPPROCESS, 0)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	defer windows.CloseHandle(snap)
	children := map[uint32][]uint32{}
	var e windows.ProcessEntry32
	e.Size = uint32(unsafe.Sizeof(e))
	for err = windows.Process32First(snap, &e); err == nil; err = windows.Process32Next(snap, &e) {
		if e.ProcessID != e.ParentProcessID {
			children[e.ParentProcessID] = append(children[e.ParentProcessID], e.ProcessID)
		}
	}
	var below []uint32
	queue := []uint32{}
	for _, shell := range children[pid] {
		queue = append(queue, children[shell]...)
	}
	seen := map[uint32]bool{pid: true}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		below = append(below, p)
		queue = append(queue, children[p]...)
	}
	return below, nil
}

// interruptGrace is how long interrupt waits for a program to start.
const interruptGrace = 2 * time.Second
