package main

import "syscall"

// localServerAttr puts a server the simulator starts in a process group of
// its own, so that a Ctrl-C at the console reaches the simulator alone.
func localServerAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}
