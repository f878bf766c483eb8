package remote

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// workDirForWine is a temporary directory removed at the end as far as the
// system allows: under Wine, os.RemoveAll fails ("Invalid function"), which
// would fail t.TempDir's cleanup.
func workDirForWine(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "outpost-shell-test-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// startConPTYShell starts a persistent cmd.exe on a pseudo console.
func startConPTYShell(t *testing.T, name string) (*testCall, string) {
	t.Helper()
	dir := workDirForWine(t)
	tc := newTestCall(t, dir, nil)
	t.Cleanup(tc.c.shells.closeAll)
	var res api.ShellStartResult
	if err := tc.run(t, context.Background(), api.ToolShellStart, api.ShellStartArgs{Name: name}, &res); err != nil {
		t.Fatalf("shell_start: %v", err)
	}
	if res.PID <= 0 || !strings.EqualFold(filepath.Base(res.Shell), "cmd.exe") {
		t.Fatalf("shell_start result = %+v", res)
	}
	if out := tc.output(api.StreamStdout); out != "" {
		t.Errorf("shell_start printed %q", out)
	}
	return tc, dir
}

func conptyRun(t *testing.T, tc *testCall, name, command string) (api.ShellRunResult, string, error) {
	t.Helper()
	var res api.ShellRunResult
	err := tc.run(t, context.Background(), api.ToolShellRun, api.ShellRunArgs{Name: name, Command: command, TimeoutS: 20}, &res)
	return res, tc.output(api.StreamStdout), err
}

// TestConPTYShellStatePersists: a directory change and a variable set by
// one shell_run are there in the next; output comes without the console's
// controls or the echo of what was typed; exit codes come back, also from
// exit /b; a multi-line command runs as a batch file.
func TestConPTYShellStatePersists(t *testing.T) {
	tc, dir := startConPTYShell(t, "main")
	if _, out, err := conptyRun(t, tc, "main", "mkdir sub\ncd sub\nset GREETING=hello"); err != nil {
		t.Fatalf("run: %v, %q", err, out)
	}
	res, out, err := conptyRun(t, tc, "main", "cd\necho %GREETING% world")
	if err != nil || res.ExitCode != 0 || res.Running {
		t.Fatalf("run: %+v, %v, %q", res, err, out)
	}
	wantDir := filepath.Join(dir, "sub")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 2 || !strings.EqualFold(strings.TrimSpace(lines[0]), wantDir) || strings.TrimSpace(lines[1]) != "hello world" {
		t.Fatalf("output = %q, want %s and hello world", out, wantDir)
	}
	if strings.Contains(out, "\x1b") || strings.Contains(out, "\r") || strings.Contains(out, markerTag) || strings.Contains(out, envShellDir) {
		t.Fatalf("output has controls, the marker or the typed line: %q", out)
	}
	res, out, err = conptyRun(t, tc, "main", "echo oops\nexit /b 7")
	if err == nil || res.ExitCode != 7 || !strings.Contains(err.Error(), "exit code 7") || strings.TrimSpace(out) != "oops" {
		t.Fatalf("failing run: %+v, %v, %q", res, err, out)
	}
	res, _, err = conptyRun(t, tc, "main", `cmd /c exit 3`)
	if err == nil || res.ExitCode != 3 {
		t.Fatalf("a program's exit code: %+v, %v", res, err)
	}
	if _, out, err := conptyRun(t, tc, "main", "echo still %GREETING%"); err != nil || strings.TrimSpace(out) != "still hello" {
		t.Fatalf("after failures: %v, %q", err, out)
	}
}

// TestConPTYShellKill: shell_kill ends the shell and its name is free again.
func TestConPTYShellKill(t *testing.T) {
	tc, _ := startConPTYShell(t, "k")
	if err := tc.run(t, context.Background(), api.ToolShellKill, api.ShellKillArgs{Name: "k"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := conptyRun(t, tc, "k", "echo x"); err == nil || !strings.Contains(err.Error(), "no shell named") {
		t.Fatalf("run after kill: %v", err)
	}
	var res api.ShellStartResult
	if err := tc.run(t, context.Background(), api.ToolShellStart, api.ShellStartArgs{Name: "k"}, &res); err != nil {
		t.Fatalf("start again: %v", err)
	}
}

// TestConPTYAvailable: this Windows has the pseudo console API.
func TestConPTYAvailable(t *testing.T) {
	if err := conPTYAvailable(); err != nil {
		t.Fatal(err)
	}
}
