package worker

import "syscall"

// dieWithWorker makes the kernel kill the remote when the worker dies,
// however it ends (kill -9 included): a restarted worker hands the claims
// its predecessor held back to the queue at once (fleet.Consumer.HandBack),
// which is right only if no remote of its goes on serving them. Under bwrap
// the sandbox already dies with the worker (--die-with-parent). The kernel
// sends the signal when the thread that started the remote ends; the Go
// runtime ends a thread only when a goroutine locked to it returns, which
// the worker never does, so its threads last as long as it does.
func dieWithWorker(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
