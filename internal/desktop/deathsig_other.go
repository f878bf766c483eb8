//go:build unix && !linux

package desktop

import "syscall"

// dieWithParent does nothing where the kernel has no parent-death signal;
// Close stops the display.
func dieWithParent(*syscall.SysProcAttr) {}
