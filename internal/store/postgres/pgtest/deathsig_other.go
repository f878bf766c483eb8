//go:build unix && !linux

package pgtest

import "syscall"

// setDeathSignal does nothing: only Linux has a parent-death signal, so a
// server may outlive a crashed test run here.
func setDeathSignal(*syscall.SysProcAttr, syscall.Signal) {}
