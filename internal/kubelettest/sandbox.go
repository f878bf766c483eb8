//go:build !windows

package kubelettest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/outpost-sh/outpost/internal/sandbox"
)

// mount is a host path bound into a container.
type mount struct {
	src, dest string
	readOnly  bool
}

// containerSpec is what a container start runs.
type containerSpec struct {
	argv     []string
	env      []string
	workDir  string
	mounts   []mount
	hostname string
	log      string // the file its output is appended to
}

// rootArgs are the bwrap arguments that show the host's root inside a
// sandbox as it is: every top-level directory bound (with its devices),
// every top-level symlink made again. bwrap's own root is a tmpfs, so a
// mount path whose first component the host lacks is made there, not on
// the host. /proc is the sandbox's own (its pid namespace).
func rootArgs() ([]string, error) {
	entries, err := os.ReadDir("/")
	if err != nil {
		return nil, fmt.Errorf("kubelettest: read /: %w", err)
	}
	var args []string
	for _, e := range entries {
		p := "/" + e.Name()
		switch {
		case p == "/proc":
			args = append(args, "--proc", "/proc")
		case e.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, fmt.Errorf("kubelettest: %w", err)
			}
			args = append(args, "--symlink", target, p)
		default:
			args = append(args, "--dev-bind", p, p)
		}
	}
	return args, nil
}

// sandboxProc is a container's process: bwrap, and in its pid namespace
// the command as pid 1.
type sandboxProc struct {
	cmd     *exec.Cmd
	started chan struct{} // closed once the command runs, or bwrap failed before
	done    chan struct{} // closed once bwrap has exited and its status is read

	mu   sync.Mutex // guards the following
	pid  int        // the command's host pid; 0 until started
	code int        // exit code, once done
}

// startSandbox starts spec's command in a sandbox; its arguments, with the
// environment, go to bwrap through a memfd (--args), not the command line.
func (k *Kubelet) startSandbox(spec containerSpec) (*sandboxProc, error) {
	args := []string{"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--as-pid-1", "--die-with-parent",
		"--hostname", spec.hostname}
	args = append(args, k.root...)
	for _, m := range spec.mounts {
		flag := "--bind"
		if m.readOnly {
			flag = "--ro-bind"
		}
		args = append(args, flag, m.src, m.dest)
	}
	// --dir makes a working dir that is in no volume and not on the host
	// (mounts has checked the others exist).
	args = append(args, "--dir", spec.workDir, "--chdir", spec.workDir, "--json-status-fd", "4")
	args = append(args, sandbox.EnvArgs(spec.env)...)
	argsFile, err := sandbox.ArgsFile(args)
	if err != nil {
		return nil, err
	}
	defer argsFile.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("kubelettest: status pipe: %w", err)
	}
	defer statusW.Close()
	if err := os.MkdirAll(filepath.Dir(spec.log), 0o755); err != nil {
		statusR.Close()
		return nil, fmt.Errorf("kubelettest: log dir: %w", err)
	}
	logf, err := os.OpenFile(spec.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		statusR.Close()
		return nil, fmt.Errorf("kubelettest: container log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(k.bwrap, append([]string{"--args", "3", "--"}, spec.argv...)...)
	cmd.Env, cmd.Dir = []string{}, "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{argsFile, statusW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		statusR.Close()
		return nil, fmt.Errorf("kubelettest: start bwrap: %w", err)
	}
	p := &sandboxProc{cmd: cmd, started: make(chan struct{}), done: make(chan struct{})}
	statusRead := make(chan int, 1) // the exit code bwrap reported, or -1
	go p.readStatus(statusR, statusRead)
	go func() {
		err := cmd.Wait()
		code := <-statusRead
		if code < 0 {
			code = exitCode(cmd, err)
		}
		p.mu.Lock()
		p.code = code
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// readStatus reads bwrap's --json-status-fd objects: the command's pid
// first, its exit code last.
func (p *sandboxProc) readStatus(r io.ReadCloser, exit chan<- int) {
	defer r.Close()
	code := -1
	startedOnce := sync.OnceFunc(func() { close(p.started) })
	defer startedOnce()
	dec := json.NewDecoder(r)
	for {
		var st struct {
			ChildPid *int `json:"child-pid"`
			ExitCode *int `json:"exit-code"`
		}
		if err := dec.Decode(&st); err != nil {
			break
		}
		if st.ChildPid != nil {
			p.mu.Lock()
			p.pid = *st.ChildPid
			p.mu.Unlock()
			startedOnce()
		}
		if st.ExitCode != nil {
			code = *st.ExitCode
		}
	}
	exit <- code
}

// exitCode is a container's exit code from bwrap's own: 128+n for a
// signal, as a container runtime reports it.
func exitCode(cmd *exec.Cmd, err error) int {
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return 128
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// running reports whether the command was started (bwrap got as far as
// exec'ing it); false means bwrap itself failed.
func (p *sandboxProc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid != 0
}

// exit is the exit code; valid once done is closed.
func (p *sandboxProc) exit() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code
}

// signal sends sig to the command (pid 1 of its namespace: like a
// container's, it gets SIGTERM only if it handles it). SIGKILL also goes
// to bwrap's process group, in case the command never started.
func (p *sandboxProc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	p.mu.Lock()
	pid := p.pid
	p.mu.Unlock()
	if pid != 0 {
		_ = syscall.Kill(pid, sig)
	}
	if sig == syscall.SIGKILL || pid == 0 {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

// lastLines returns the end of a log file, for a start error's message.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
