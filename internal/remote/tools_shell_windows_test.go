package remote

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestConPTYShellInteractive: a command waiting for input is answered with
// shell_write and followed with shell_read until it ends.
func TestConPTYShellInteractive(t *testing.T) {
	tc, _ := startConPTYShell(t, "talk")
	ctx := context.Background()
	var res api.ShellRunResult
	err := tc.run(t, ctx, api.ToolShellRun, api.ShellRunArgs{Name: "talk", Command: "set /p NAME=name? \necho hi %NAME%", TimeoutS: 2}, &res)
	if err == nil || !res.Running || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("run = %+v, %v; want still running", res, err)
	}
	got := tc.output(api.StreamStdout)
	if err := tc.run(t, ctx, api.ToolShellWrite, api.ShellWriteArgs{Name: "talk", Text: "bob\r"}, nil); err != nil {
		t.Fatalf("shell_write: %v", err)
	}
	var rr api.ShellReadResult
	for deadline := time.Now().Add(15 * time.Second); rr.ExitCode == nil && time.Now().Before(deadline); {
		rr = api.ShellReadResult{}
		if err := tc.run(t, ctx, api.ToolShellRead, api.ShellReadArgs{Name: "talk", WaitMS: 2000}, &rr); err != nil {
			t.Fatalf("shell_read: %v", err)
		}
		got += tc.output(api.StreamStdout)
	}
	if rr.ExitCode == nil || *rr.ExitCode != 0 || rr.Running {
		t.Fatalf("shell_read = %+v, output %q; want finished with 0", rr, got)
	}
	// The console echoes what was typed: "name? bob", then the answer.
	if !strings.Contains(got, "name? ") || !strings.HasSuffix(got, "hi bob\n") || strings.Contains(got, markerTag) {
		t.Fatalf("output = %q", got)
	}
}

// TestConPTYShellInterrupt: shell_interrupt ends the program a command
// runs, the command's next line runs (as in cmd.exe answering no to
// "Terminate batch job?"), and the shell takes the next command.
func TestConPTYShellInterrupt(t *testing.T) {
	tc, _ := startConPTYShell(t, "sleepy")
	ctx := context.Background()
	done := make(chan struct{})
	var res api.ShellRunResult
	var runErr error
	start := time.Now()
	go func() {
		defer close(done)
		runErr = tc.run(t, ctx, api.ToolShellRun, api.ShellRunArgs{Name: "sleepy", Command: "echo started\nping -n 120 127.0.0.1 >nul\necho after ping", TimeoutS: 100}, &res)
	}()
	tc.waitOutput(t, api.StreamStdout, "started")
	time.Sleep(time.Second) // ping has started
	if err := tc.run(t, ctx, api.ToolShellInterrupt, api.ShellInterruptArgs{Name: "sleepy"}, nil); err != nil {
		t.Fatalf("shell_interrupt: %v", err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("shell_run did not return after the interrupt")
	}
	if time.Since(start) > 60*time.Second || res.Running {
		t.Fatalf("interrupted run = %+v, %v after %s", res, runErr, time.Since(start))
	}
	if out := tc.output(api.StreamStdout); !strings.Contains(out, "after ping") {
		t.Errorf("output after the interrupt = %q", out)
	}
	if _, out, err := conptyRun(t, tc, "sleepy", "echo again"); err != nil || strings.TrimSpace(out) != "again" {
		t.Fatalf("next run: %v, %q", err, out)
	}
}
