//go:build !unix && !windows

package remote

import "os/exec"

// killProcessGroup leaves cmd as it is: context cancellation kills the
// process itself.
func killProcessGroup(cmd *exec.Cmd) {}

// groupStarted has nothing to set up here.
func groupStarted(*exec.Cmd) (release func()) { return func() {} }

// holdSessionJob has nothing to hold here.
func holdSessionJob() error { return nil }
