package remote

import (
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// jobs maps a running command (*exec.Cmd) to the Job Object that holds its
// process tree, so that its Cancel can end the whole tree.
var jobs sync.Map

// killProcessGroup makes context cancellation end cmd's whole process tree:
// the Job Object groupStarted puts it in, or the process alone when it has
// none.
func killProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.Cancel = func() error {
		if job, ok := jobs.Load(cmd); ok {
			return windows.TerminateJobObject(job.(windows.Handle), 1)
		}
		return cmd.Process.Kill()
	}
}

// groupStarted puts the started cmd in a Job Object of its own; its
// children join it as they start. release closes the job without killing
// what is left in it (background processes live on, as on Unix, until the
// session's job ends them). A child started in the instant between the
// start and the assignment escapes this job but not the session's.
func groupStarted(cmd *exec.Cmd) (release func()) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return func() {}
	}
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(cmd.Process.Pid))
	if err == nil {
		err = windows.AssignProcessToJobObject(job, h)
		windows.CloseHandle(h)
	}
	if err != nil {
		windows.CloseHandle(job)
		return func() {}
	}
	jobs.Store(cmd, job)
	return func() {
		jobs.Delete(cmd)
		windows.CloseHandle(job)
	}
}

// sessionJob is the Job Object holdSessionJob put this remote in, made
// once per process; its handle stays open until the process exits.
var sessionJob struct {
	once sync.Once
	h    windows.Handle
	err  error
}

// holdSessionJob puts this remote in a Job Object that kills every process
// in it when its last handle closes: the remote holds the only one, so
// when the remote exits, however it exits, every command it started ends
// with it. Windows has no process groups to signal.
func holdSessionJob() error {
	sessionJob.once.Do(func() { sessionJob.h, sessionJob.err = newSessionJob() })
	return sessionJob.err
}

func newSessionJob() (windows.Handle, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return 0, fmt.Errorf("create the session's job object: %w", err)
	}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{
		BasicLimitInformation: windows.JOBOBJECT_BASIC_LIMIT_INFORMATION{LimitFlags: windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE},
	}
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		windows.CloseHandle(job)
		return 0, fmt.Errorf("make the session's job object kill on close: %w", err)
	}
	if err := windows.AssignProcessToJobObject(job, windows.CurrentProcess()); err != nil {
		windows.CloseHandle(job)
		return 0, fmt.Errorf("enter the session's job object: %w", err)
	}
	return job, nil
}
