package fleet

import (
	"errors"
	"os/exec"

	"github.com/outpost-sh/outpost/api"
)

// RemoteRejected reports whether a remote's exit error (from
// exec.Cmd.Wait) says the gateway kept refusing it
// (api.RemoteExitRejected): the claim is then someone else's, see
// HandedOff.
func RemoteRejected(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == api.RemoteExitRejected
}

// ExitString describes how a process ended ("exit 0", "exit status 3",
// "signal: killed").
func ExitString(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit 0"
	case errors.As(err, &ee):
		return ee.ProcessState.String()
	}
	return err.Error()
}
