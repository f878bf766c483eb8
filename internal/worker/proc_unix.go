//go:build unix

package worker

import (
	"os"
	"os/exec"
	"syscall"
)

// isolate puts the remote in its own process group: a Ctrl-C at the
// worker's terminal must not reach it, because the worker decides when the
// remote stops (after the grace period), and a kill must reach the commands
// the remote started too.
func isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithWorker(cmd.SysProcAttr)
}

// terminate asks the remote to stop.
func terminate(cmd *exec.Cmd) error {
	return cmd.Process.Signal(syscall.SIGTERM)
}

// kill kills the remote's whole process group.
func kill(cmd *exec.Cmd) error {
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return cmd.Process.Kill()
	}
	return nil
}

// sessionSocket returns the two ends of the socket a pre-started remote
// gets as its standard input: it writes "ready" on it once it waits (its
// sandbox is then set up), and reads its session from it. The worker's
// end is non-blocking, so that closing it ends a pending read.
func sessionSocket() (remoteEnd, workerEnd *os.File, err error) {
	// Not every Unix has SOCK_CLOEXEC (macOS has not): hold ForkLock, as
	// the standard library does, so no child forked meanwhile inherits them.
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, err
	}
	if err := syscall.SetNonblock(fds[1], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "session-socket-remote"), os.NewFile(uintptr(fds[1]), "session-socket"), nil
}

// canPrestart says whether remotes can be pre-started here (sessionSocket).
const canPrestart = true
