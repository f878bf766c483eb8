package worker

import "syscall"

// prSetDumpable and prGetDumpable are prctl(2) options.
const (
	prSetDumpable = 4
	prGetDumpable = 3
)

// ProtectSecrets marks this process not dumpable, so processes of the same
// user without CAP_SYS_PTRACE (the remotes it starts, and the commands
// agents run) can neither read its /proc/PID/environ, where its API token
// may be, nor attach to it. Children start dumpable again at execve.
func ProtectSecrets() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

func dumpable() bool {
	r, _, _ := syscall.RawSyscall(syscall.SYS_PRCTL, prGetDumpable, 0, 0)
	return r != 0
}
