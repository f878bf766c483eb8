//go:build !unix

package desktop

import (
	"os/exec"
	"syscall"
)

// stopGroup kills cmd and waits for it; there is no Xvfb here to stop
// gracefully, only the processes Start may have made before failing.
func stopGroup(cmd *exec.Cmd, exited chan struct{}) error {
	_ = cmd.Process.Kill()
	if exited != nil {
		<-exited
		return nil
	}
	_ = cmd.Wait()
	return nil
}

func procAttr() *syscall.SysProcAttr { return nil }
