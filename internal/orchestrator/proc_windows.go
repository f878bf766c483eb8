//go:build windows

package orchestrator

import (
	"syscall"

	"golang.org/x/sys/windows"
)

// groupAttr starts the remote in a process group of its own, so a console
// interrupt meant for the orchestrator does not reach it. Windows has no
// signal for a group: the remote puts every command it runs in a Job Object
// that is killed when the remote's handle to it closes, so killing the
// remote kills its commands.
func groupAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: windows.CREATE_NEW_PROCESS_GROUP}
}

// killGroupNow terminates the remote pid.
func killGroupNow(pid int) { stopGroup(pid) }

// stopGroup terminates the remote pid; its commands end with it (see
// groupAttr). Windows has no SIGTERM to send a console-less process first.
func stopGroup(pid int) {
	h, err := windows.OpenProcess(windows.PROCESS_TERMINATE|windows.SYNCHRONIZE, false, uint32(pid))
	if err != nil {
		return
	}
	defer windows.CloseHandle(h)
	if windows.TerminateProcess(h, 1) == nil {
		_, _ = windows.WaitForSingleObject(h, uint32(killDelay.Milliseconds()))
	}
}

// alive reports whether pid runs.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return false
	}
	defer windows.CloseHandle(h)
	var code uint32
	if err := windows.GetExitCodeProcess(h, &code); err != nil {
		return false
	}
	return code == uint32(windows.STATUS_PENDING) // STILL_ACTIVE
}
