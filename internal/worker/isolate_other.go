//go:build !unix

package worker

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
)

var errNoRunAs = errors.New("--run-as needs a Unix system")

func lookupSessionUser(string) (*sessionUser, error) { return nil, errNoRunAs }

func (u *sessionUser) sysProcAttr() *syscall.SysProcAttr { return nil }

func setCredential(*exec.Cmd, *sessionUser) {}

func (iso *isolation) prepareUser(context.Context, string, string) error { return errNoRunAs }

func (iso *isolation) prepareHome() error { return errNoRunAs }

func (iso *isolation) prepareSession(string) error { return errNoRunAs }

func chownDir(string, *sessionUser) error { return errNoRunAs }

func (u *sessionUser) endProcesses(context.Context) (int, error) { return 0, errNoRunAs }

func (u *sessionUser) passwordlessSudo(context.Context) bool { return false }

// openRemoteLog opens (creating it) a session's remote.log for appending.
func openRemoteLog(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
}

// terminate asks the remote to stop.
func (iso *isolation) terminate(cmd *exec.Cmd) error { return terminate(cmd) }

func (u *sessionUser) ancestorOf(string) string { return "" }
