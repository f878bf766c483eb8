//go:build unix

package remote

import (
	"context"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/api"
)

func TestZZDebug(t *testing.T) {
	t.Parallel()
	tc, _ := startTestShell(t, "sleepy")
	sh, _ := lookupShell(tc.c, "sleepy")
	ctx := context.Background()
	done := make(chan struct{})
	var res api.ShellRunResult
	var runErr error
	go func() {
		defer close(done)
		runErr = tc.run(t, ctx, api.ToolShellRun, api.ShellRunArgs{Name: "sleepy", Command: "echo started; sleep 100; echo not-reached", TimeoutS: 5}, &res)
	}()
	tc.waitOutput(t, api.StreamStdout, "started")
	if err := tc.run(t, ctx, api.ToolShellInterrupt, api.ShellInterruptArgs{Name: "sleepy"}, nil); err != nil {
		t.Fatalf("shell_interrupt: %v", err)
	}
	<-done
	out, _ := exec.Command("ps", "-o", "pid,ppid,pgid,tpgid,stat,comm", "-s", itoa(sh.cmd.Process.Pid)).CombinedOutput()
	t.Logf("res %+v err %v\n%s", res, runErr, out)
	if runErr == nil || res.Running {
		sh.mu.Lock()
		t.Logf("buf %q", sh.buf)
		sh.mu.Unlock()
		t.Fail()
	}
	res2, err, o := shellRun(t, tc, "sleepy", "echo alive", 3)
	if err != nil {
		out, _ := exec.Command("ps", "-o", "pid,ppid,pgid,tpgid,stat,comm", "-s", itoa(sh.cmd.Process.Pid)).CombinedOutput()
		sh.mu.Lock()
		t.Logf("second: %+v %v %q buf %q\n%s", res2, err, o, sh.buf, out)
		sh.mu.Unlock()
		t.Fail()
	}
	_ = time.Now
}

func itoa(i int) string { return fmtInt(i) }

func fmtInt(i int) string { return strconv.Itoa(i) }
