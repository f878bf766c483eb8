package remote

import (
	"context"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

func TestShellFamily(t *testing.T) {
	t.Parallel()
	for shell, want := range map[string]shellFamily{
		"sh": familyPOSIX, "/bin/zsh": familyPOSIX, "bash": familyPOSIX,
		"powershell": familyPowerShell, `C:\Windows\System32\WindowsPowerShell\v1.0\powershell.exe`: familyPowerShell,
		"pwsh": familyPowerShell, "PWSH.EXE": familyPowerShell,
		"cmd": familyCmd, `C:\Windows\system32\cmd.exe`: familyCmd,
	} {
		if got := familyOf(shell); got != want {
			t.Errorf("familyOf(%q) = %d, want %d", shell, got, want)
		}
	}
}

// TestExecShellArgument: the shell argument picks the program that runs a
// command line, and a shell that is unknown, missing or foreign to this
// system is a clear tool error, not a command run by another shell.
func TestExecShellArgument(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if runtime.GOOS != "windows" {
		if _, err := exec.LookPath("bash"); err == nil {
			tc := newTestCall(t, t.TempDir(), nil)
			var res api.ExecResult
			if err := tc.run(t, ctx, api.ToolExec, api.ExecArgs{Command: `echo "bash $BASH_VERSION"`, Shell: api.ShellBash}, &res); err != nil {
				t.Fatal(err)
			}
			if out := tc.output(api.StreamStdout); !strings.HasPrefix(out, "bash ") || strings.TrimSpace(out) == "bash" {
				t.Errorf("shell bash printed %q, want bash's version", out)
			}
		}
		tc := newTestCall(t, t.TempDir(), nil)
		err := tc.run(t, ctx, api.ToolExec, api.ExecArgs{Command: "echo hi", Shell: api.ShellCmd}, nil)
		if err == nil || !strings.Contains(err.Error(), "shell cmd is not available on "+runtime.GOOS) {
			t.Errorf("shell cmd off Windows: err = %v", err)
		}
		if tc.output(api.StreamStdout) != "" {
			t.Errorf("shell cmd off Windows ran something: %q", tc.output(api.StreamStdout))
		}
	}
	for _, tt := range []struct {
		args api.ExecArgs
		want string
	}{
		{api.ExecArgs{Command: "echo hi", Shell: "fish; rm -rf /"}, `bad arguments: shell "fish; rm -rf /" is not one of`},
		{api.ExecArgs{Argv: []string{"echo", "hi"}, Shell: api.ShellSh}, "shell applies to command, not to argv"},
	} {
		tc := newTestCall(t, t.TempDir(), nil)
		err := tc.run(t, ctx, api.ToolExec, tt.args, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("exec %+v: err = %v, want %q", tt.args, err, tt.want)
		}
	}
	if _, err := exec.LookPath("pwsh"); err != nil && runtime.GOOS != "windows" {
		tc := newTestCall(t, t.TempDir(), nil)
		err := tc.run(t, ctx, api.ToolExec, api.ExecArgs{Command: "echo hi", Shell: api.ShellPwsh}, nil)
		if err == nil || !strings.Contains(err.Error(), "shell pwsh is not installed on this "+runtime.GOOS+" machine") {
			t.Errorf("missing pwsh: err = %v", err)
		}
	}
}

// TestDefaultShell: sh on Linux; the user's shell on macOS.
func TestDefaultShell(t *testing.T) {
	switch runtime.GOOS {
	case "linux":
		if got := defaultShell(context.Background()); got != "sh" {
			t.Errorf("defaultShell = %q, want sh", got)
		}
	case "darwin":
		t.Setenv("SHELL", "/bin/bash")
		if got := defaultShell(context.Background()); got != "/bin/bash" {
			t.Errorf("defaultShell with SHELL=/bin/bash = %q", got)
		}
		t.Setenv("SHELL", "")
		if got := defaultShell(context.Background()); got != "/bin/zsh" {
			t.Errorf("defaultShell without SHELL = %q, want /bin/zsh", got)
		}
	}
}
