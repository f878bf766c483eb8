package remote

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// shellFamily is how a shell takes a command line.
type shellFamily int

const (
	familyPOSIX      shellFamily = iota // sh, bash, zsh, …: -c LINE
	familyPowerShell                    // powershell, pwsh: -NoProfile -NonInteractive -Command LINE
	familyCmd                           // cmd.exe: /d /s /c "LINE"
)

// familyOf returns the family of a shell named by its program name or path.
func familyOf(shell string) shellFamily {
	base := strings.ToLower(filepath.Base(strings.ReplaceAll(shell, `\`, "/")))
	base = strings.TrimSuffix(base, ".exe")
	switch base {
	case api.ShellPowerShell, api.ShellPwsh:
		return familyPowerShell
	case api.ShellCmd:
		return familyCmd
	}
	return familyPOSIX
}

// checkShell refuses a shell argument that is not one of api's Shell names.
func checkShell(shell string) error {
	switch shell {
	case api.ShellDefault, api.ShellSh, api.ShellBash, api.ShellZsh, api.ShellPowerShell, api.ShellPwsh, api.ShellCmd:
		return nil
	}
	return fmt.Errorf("bad arguments: shell %q is not one of sh, bash, zsh, powershell, pwsh, cmd (or absent for the machine's default)", shell)
}

// shellCommand returns the command that runs line in shell (api.Shell…,
// empty for the default), or an error saying why that shell cannot run
// here.
func shellCommand(ctx context.Context, shell, line string) (*exec.Cmd, error) {
	if err := checkShell(shell); err != nil {
		return nil, err
	}
	prog := shell
	if prog == api.ShellDefault {
		prog = defaultShell(ctx)
	}
	if familyOf(prog) == familyCmd && runtime.GOOS != "windows" {
		return nil, fmt.Errorf("shell cmd is not available on %s: it is Windows' command interpreter", runtime.GOOS)
	}
	path, err := exec.LookPath(prog)
	if err != nil {
		return nil, fmt.Errorf("shell %s is not installed on this %s machine: %w", prog, runtime.GOOS, err)
	}
	switch familyOf(prog) {
	case familyPowerShell:
		return exec.CommandContext(ctx, path, "-NoProfile", "-NonInteractive", "-Command", line), nil
	case familyCmd:
		return cmdShell(ctx, path, line), nil
	}
	return exec.CommandContext(ctx, path, "-c", line), nil
}
