//go:build unix && !linux

package worker

import "syscall"

// dieWithWorker does nothing where the kernel has no parent-death signal.
func dieWithWorker(*syscall.SysProcAttr) {}
