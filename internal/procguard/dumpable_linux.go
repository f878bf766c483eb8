package procguard

import "syscall"

// prSetDumpable and prGetDumpable are prctl(2) options.
const (
	prSetDumpable = 4
	prGetDumpable = 3
)

// NotDumpable marks this process not dumpable, so processes of the same
// user without CAP_SYS_PTRACE (the remotes a worker starts, the commands
// agents run) can neither read its /proc/PID/environ, where a token may
// be, nor attach to it, and it leaves no core dump. Children start
// dumpable again at execve, so the programs it runs are unaffected.
func NotDumpable() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// Dumpable reports whether this process is dumpable.
func Dumpable() bool {
	r, _, _ := syscall.RawSyscall(syscall.SYS_PRCTL, prGetDumpable, 0, 0)
	return r != 0
}
