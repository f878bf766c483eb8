//go:build unix

package fleet

import (
	"errors"
	"syscall"
)

// processAlive reports whether a process with pid runs on this machine (in
// this pid namespace).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
