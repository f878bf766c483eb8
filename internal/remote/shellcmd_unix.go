//go:build unix

package remote

import (
	"context"
	"os"
	"os/exec"
	"runtime"
)

// defaultShell is sh on Linux and other Unix systems, as scripts written
// for Linux machines expect, and the user's shell on macOS ($SHELL, else
// zsh, macOS's default since 10.15), as a person at that Mac would get.
func defaultShell(context.Context) string {
	if runtime.GOOS == "darwin" {
		if s := os.Getenv("SHELL"); s != "" {
			return s
		}
		return "/bin/zsh"
	}
	return "sh"
}

// cmdShell is never called off Windows (shellCommand refuses cmd there).
func cmdShell(ctx context.Context, path, line string) *exec.Cmd {
	return exec.CommandContext(ctx, path, "/c", line)
}
