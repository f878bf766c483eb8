package main

import "syscall"

// localServerAttr puts a server the simulator starts in a process group of
// its own, so that a Ctrl-C at the terminal reaches the simulator alone,
// which then ends its sessions on the server and stops it; the server is
// sent SIGTERM should the simulator die without stopping it.
func localServerAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
