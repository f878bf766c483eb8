//go:build unix

package worker

import (
	"os/exec"
	"syscall"
)

// isolate puts the remote in its own process group: a Ctrl-C at the
// worker's terminal must not reach it, because the worker decides when the
// remote stops (after the grace period), and a kill must reach the commands
// the remote started too.
func isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
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
