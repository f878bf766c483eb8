//go:build unix

package desktop

import (
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// stopGroup sends SIGTERM to cmd's process group and waits for it (on
// exited when another goroutine waits), killing it after a grace.
func stopGroup(cmd *exec.Cmd, exited chan struct{}) error {
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	if exited == nil {
		exited = make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
	}
	select {
	case <-exited:
		return nil
	case <-time.After(5 * time.Second):
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-exited:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("stop process %d: it did not exit", pid)
	}
}

func procAttr() *syscall.SysProcAttr {
	// A group of its own: teardown reaches whatever it forked.
	return &syscall.SysProcAttr{Setpgid: true}
}
