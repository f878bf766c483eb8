//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// execRemote replaces this process with command, the session's variables
// (set from standard input) in its environment. The new program marks
// itself not dumpable as it starts, as this one did.
func execRemote(command []string) error {
	path, err := exec.LookPath(command[0])
	if err != nil {
		return fmt.Errorf("start the session's remote build: %w", err)
	}
	if err := syscall.Exec(path, command, os.Environ()); err != nil {
		return fmt.Errorf("start the session's remote build %s: %w", path, err)
	}
	return nil
}
