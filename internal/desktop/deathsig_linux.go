package desktop

import "syscall"

// dieWithParent makes the kernel send SIGTERM to the process when the one
// that started it ends, however it ends: Xvfb then removes its socket and
// lock file as on Close, so a remote that was killed leaves no display
// behind, still running with the session's screen. (The signal follows
// the thread that forked; the Go runtime keeps its threads unless a
// goroutine ends locked to one, which nothing that starts a desktop does.)
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGTERM }
