//go:build !unix

package remote

import "os/exec"

// killProcessGroup leaves cmd as it is: context cancellation kills the
// process itself.
func killProcessGroup(cmd *exec.Cmd) {}
