//go:build !unix

package worker

import (
	"errors"
	"os"
	"os/exec"
)

func isolate(cmd *exec.Cmd) {}

// terminate stops the remote; without signals it is a kill.
func terminate(cmd *exec.Cmd) error { return cmd.Process.Kill() }

func kill(cmd *exec.Cmd) error { return cmd.Process.Kill() }

// sessionSocket is not made off Unix: remotes are not pre-started there.
func sessionSocket() (remoteEnd, workerEnd *os.File, err error) {
	return nil, nil, errors.New("pre-started remotes need a Unix system")
}

const canPrestart = false
