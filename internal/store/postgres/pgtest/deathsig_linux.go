package pgtest

import "syscall"

// setDeathSignal has the kernel send sig to the child when the test process
// dies, so no server outlives a crashed test run.
func setDeathSignal(a *syscall.SysProcAttr, sig syscall.Signal) { a.Pdeathsig = sig }
