//go:build unix

package orchestrator

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"
)

// groupAttr puts the remote in a process group of its own, so that
// stopGroup reaches every command it started.
func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killGroupNow kills the process group pgid at once.
func killGroupNow(pgid int) { killGroup(pgid, syscall.SIGKILL) }

// stopGroup asks the process group pgid to stop and kills it after
// killDelay; the group is killed even when its leader has exited, so no
// command the remote started outlives the machine.
func stopGroup(pgid int) {
	if alive(pgid) {
		killGroup(pgid, syscall.SIGTERM)
		deadline := time.Now().Add(killDelay)
		for alive(pgid) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	killGroup(pgid, syscall.SIGKILL)
}

func killGroup(pgid int, sig syscall.Signal) {
	if err := syscall.Kill(-pgid, sig); err != nil && alive(pgid) {
		_ = syscall.Kill(pgid, sig)
	}
}

// alive reports whether pid runs and is not a zombie.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no /proc: trust kill(0)
	}
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z' && b[i+2] != 'X'
	}
	return true
}
