//go:build !unix

package worker

import "os/exec"

func isolate(cmd *exec.Cmd) {}

// terminate stops the remote; without signals it is a kill.
func terminate(cmd *exec.Cmd) error { return cmd.Process.Kill() }

func kill(cmd *exec.Cmd) error { return cmd.Process.Kill() }
