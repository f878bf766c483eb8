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
	// A group of its own: teardown reaches whatever it forked. Being out
	// of its parent's group, it escapes a kill of that group (a worker or
	// a process backend killing a remote that did not stop), so it also
	// ends with the process that started it where the kernel can say so.
	a := &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(a)
	return a
}
