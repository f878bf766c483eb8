//go:build unix

package remote

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// killProcessGroup runs cmd in its own process group and makes context
// cancellation kill the whole group, so children of a shell die with it.
func killProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
}

// groupStarted has nothing to add on Unix: the group exists from the start.
func groupStarted(*exec.Cmd) (release func()) { return func() {} }

// holdSessionJob does nothing on Unix: the worker or orchestrator kills the
// remote's process group at a session's end.
func holdSessionJob() error { return nil }
