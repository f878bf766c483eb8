//go:build unix

package remote

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// startTestShell starts a shell named name in a fresh workspace and ends it
// with the test.
func startTestShell(t *testing.T, name string) (*testCall, string) {
	t.Helper()
	dir := t.TempDir()
	tc := newTestCall(t, dir, nil)
	t.Cleanup(tc.c.shells.closeAll)
	var res api.ShellStartResult
	if err := tc.run(t, context.Background(), api.ToolShellStart, api.ShellStartArgs{Name: name}, &res); err != nil {
		t.Fatalf("shell_start: %v", err)
	}
	if res.PID <= 0 || res.Shell == "" {
		t.Fatalf("shell_start result = %+v", res)
	}
	tc.output(api.StreamStdout)
	return tc, dir
}

// shellRun runs command and returns its result, output and error.
func shellRun(t *testing.T, tc *testCall, name, command string, timeoutS int64) (api.ShellRunResult, string, error) {
	t.Helper()
	var res api.ShellRunResult
	err := tc.run(t, context.Background(), api.ToolShellRun, api.ShellRunArgs{Name: name, Command: command, TimeoutS: timeoutS}, &res)
	return res, tc.output(api.StreamStdout), err
}

func TestShellStatePersists(t *testing.T) {
	t.Parallel()
	tc, dir := startTestShell(t, "main")
	if _, _, err := shellRun(t, tc, "main", "mkdir -p sub/deeper && cd sub\nexport GREETING=hello", 10); err != nil {
		t.Fatalf("run: %v", err)
	}
	res, out, err := shellRun(t, tc, "main", `pwd; echo "$GREETING world"`, 10)
	if err != nil || res.ExitCode != 0 || res.Running {
		t.Fatalf("run: %+v, %v", res, err)
	}
	if want := dir + "/sub\nhello world\n"; out != want {
		t.Fatalf("output = %q, want %q", out, want)
	}
	if res.OutputBytes != int64(len(out)) {
		t.Errorf("output_bytes = %d, want %d", res.OutputBytes, len(out))
	}
	// A failing command reports its exit code, and the shell goes on.
	res, out, err = shellRun(t, tc, "main", "echo oops >&2; (exit 7)", 10)
	if err == nil || res.ExitCode != 7 || !strings.Contains(err.Error(), "exit code 7") || out != "oops\n" {
		t.Fatalf("failing run: %+v, %v, %q", res, err, out)
	}
	// Output without a final newline, and multi-line syntax.
	_, out, err = shellRun(t, tc, "main", "for i in 1 2 3; do\n  printf %s $i\ndone", 10)
	if err != nil || out != "123" {
		t.Fatalf("loop: %v, %q", err, out)
	}
	// A syntax error is the command's failure, not the shell's.
	if res, _, err := shellRun(t, tc, "main", "if then fi (", 10); err == nil || res.ExitCode == 0 || res.Exited {
		t.Fatalf("syntax error: %+v, %v", res, err)
	}
	if _, out, err := shellRun(t, tc, "main", "echo still $GREETING", 10); err != nil || out != "still hello\n" {
		t.Fatalf("after syntax error: %v, %q", err, out)
	}
}

func TestShellInteractive(t *testing.T) {
	t.Parallel()
	tc, _ := startTestShell(t, "talk")
	ctx := context.Background()
	res, out, err := shellRun(t, tc, "talk", `read -p "name? " n; echo "hi $n"`, 1)
	if err == nil || !res.Running || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("run = %+v, %v; want still running", res, err)
	}
	// Another run is refused while this one waits for input.
	if _, _, err := shellRun(t, tc, "talk", "true", 1); err == nil || !strings.Contains(err.Error(), "still running a command") {
		t.Fatalf("second run: %v", err)
	}
	var w api.ShellWriteResult
	if err := tc.run(t, ctx, api.ToolShellWrite, api.ShellWriteArgs{Name: "talk", Text: "bob\n"}, &w); err != nil || w.Bytes != 4 {
		t.Fatalf("shell_write: %+v, %v", w, err)
	}
	got := out
	deadline := time.Now().Add(10 * time.Second)
	var rr api.ShellReadResult
	for rr.ExitCode == nil && time.Now().Before(deadline) {
		rr = api.ShellReadResult{}
		if err := tc.run(t, ctx, api.ToolShellRead, api.ShellReadArgs{Name: "talk", WaitMS: 2000}, &rr); err != nil {
			t.Fatalf("shell_read: %v", err)
		}
		got += tc.output(api.StreamStdout)
	}
	if rr.ExitCode == nil || *rr.ExitCode != 0 || rr.Running {
		t.Fatalf("shell_read = %+v; want finished with 0", rr)
	}
	if got != "name? hi bob\n" {
		t.Fatalf("output = %q", got)
	}
	// The shell is ready again.
	if _, out, err := shellRun(t, tc, "talk", "echo again", 10); err != nil || out != "again\n" {
		t.Fatalf("next run: %v, %q", err, out)
	}
}

func TestShellInterrupt(t *testing.T) {
	t.Parallel()
	tc, _ := startTestShell(t, "sleepy")
	ctx := context.Background()
	done := make(chan struct{})
	var res api.ShellRunResult
	var runErr error
	start := time.Now()
	go func() {
		defer close(done)
		runErr = tc.run(t, ctx, api.ToolShellRun, api.ShellRunArgs{Name: "sleepy", Command: "echo started; sleep 100; echo not-reached", TimeoutS: 60}, &res)
	}()
	tc.waitOutput(t, api.StreamStdout, "started")
	if err := tc.run(t, ctx, api.ToolShellInterrupt, api.ShellInterruptArgs{Name: "sleepy"}, nil); err != nil {
		t.Fatalf("shell_interrupt: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("shell_run did not return after the interrupt")
	}
	if time.Since(start) > 10*time.Second || res.Running || res.ExitCode != 130 || runErr == nil {
		t.Fatalf("interrupted run = %+v, %v", res, runErr)
	}
	if out := tc.output(api.StreamStdout); strings.Contains(out, "not-reached") {
		t.Fatalf("output = %q", out)
	}
	if _, out, err := shellRun(t, tc, "sleepy", "echo alive", 10); err != nil || out != "alive\n" {
		t.Fatalf("after interrupt: %v, %q", err, out)
	}
}

func TestShellOutputBound(t *testing.T) {
	t.Parallel()
	tc, _ := startTestShell(t, "loud")
	sh, err := lookupShell(tc.c, "loud")
	if err != nil {
		t.Fatal(err)
	}
	const total = 3 << 20
	// Started in the background, so its output is buffered for shell_read.
	if _, _, err := shellRun(t, tc, "loud", "head -c 3145728 /dev/zero | tr '\\0' a &", 10); err != nil {
		t.Fatalf("run: %v", err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer wcancel()
	var got int64
	if !waitfor.Poll(wctx, func() bool {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		got = sh.received
		return got >= total
	}) {
		t.Fatalf("received only %d bytes", got)
	}
	var rr api.ShellReadResult
	if err := tc.run(t, context.Background(), api.ToolShellRead, api.ShellReadArgs{Name: "loud"}, &rr); err != nil {
		t.Fatal(err)
	}
	out := tc.output(api.StreamStdout)
	if len(out) > shellBufferSize || rr.OutputBytes != int64(len(out)) || rr.DroppedBytes < total-int64(shellBufferSize) {
		t.Fatalf("read %d bytes (result %+v); want at most %d and the rest dropped", len(out), rr, shellBufferSize)
	}
	if strings.Trim(out, "a\n") != "" {
		t.Fatalf("unexpected output bytes: %q", strings.Trim(out, "a"))
	}
}

func TestShellLifecycle(t *testing.T) {
	t.Parallel()
	tc, _ := startTestShell(t, "one")
	ctx := context.Background()
	if err := tc.run(t, ctx, api.ToolShellStart, api.ShellStartArgs{Name: "one"}, nil); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second start: %v", err)
	}
	for _, name := range []string{"", "a b", "../x", strings.Repeat("x", 65)} {
		if err := tc.run(t, ctx, api.ToolShellStart, api.ShellStartArgs{Name: name}, nil); err == nil || !strings.Contains(err.Error(), "bad arguments") {
			t.Errorf("start %q: %v", name, err)
		}
	}
	if err := tc.run(t, ctx, api.ToolShellRead, api.ShellReadArgs{Name: "nope"}, nil); err == nil || !strings.Contains(err.Error(), "no shell named") {
		t.Fatalf("read unknown: %v", err)
	}
	// exit ends the shell; the run reports it.
	res, _, err := shellRun(t, tc, "one", "exit 3", 10)
	if err == nil || !res.Exited || res.ExitCode != 3 {
		t.Fatalf("exit: %+v, %v", res, err)
	}
	if _, _, err := shellRun(t, tc, "one", "true", 10); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("run after exit: %v", err)
	}
	// An exited shell's name can be started again.
	if err := tc.run(t, ctx, api.ToolShellStart, api.ShellStartArgs{Name: "one"}, nil); err != nil {
		t.Fatalf("restart: %v", err)
	}
	sh, err := lookupShell(tc.c, "one")
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.run(t, ctx, api.ToolShellKill, api.ShellKillArgs{Name: "one"}, nil); err != nil {
		t.Fatalf("kill: %v", err)
	}
	select {
	case <-sh.waitDone:
	default:
		t.Fatal("the shell process is still there after shell_kill")
	}
	if _, err := lookupShell(tc.c, "one"); err == nil {
		t.Fatal("the killed shell is still registered")
	}
	// closeAll (the end of the session) kills what is left.
	if err := tc.run(t, ctx, api.ToolShellStart, api.ShellStartArgs{Name: "two"}, nil); err != nil {
		t.Fatal(err)
	}
	two, _ := lookupShell(tc.c, "two")
	tc.c.shells.closeAll()
	select {
	case <-two.waitDone:
	default:
		t.Fatal("closeAll left the shell running")
	}
}

// TestShellWithSh runs the basics on sh, the fallback when bash is missing.
// It is not parallel: it changes shellPrograms while no parallel test runs.
func TestShellWithSh(t *testing.T) {
	saved := shellPrograms
	shellPrograms = [][]string{{"sh", "-i"}}
	defer func() { shellPrograms = saved }()
	tc, dir := startTestShell(t, "posix")
	if _, _, err := shellRun(t, tc, "posix", "mkdir -p d && cd d && export V=1", 10); err != nil {
		t.Fatalf("run: %v", err)
	}
	res, out, err := shellRun(t, tc, "posix", "pwd; echo v=$V; false", 10)
	if err == nil || res.ExitCode != 1 || out != dir+"/d\nv=1\n" {
		t.Fatalf("run = %+v, %v, %q", res, err, out)
	}
}
