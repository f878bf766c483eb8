package remote

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

func TestExecExitCodeAndStreams(t *testing.T) {
	tc := newTestCall(t, t.TempDir(), nil)
	var res api.ExecResult
	err := tc.run(t, context.Background(), api.ToolExec, api.ExecArgs{Command: "echo out; echo err >&2; exit 3"}, &res)
	if err == nil || err.Error() != "exit code 3" {
		t.Fatalf("err = %v, want exit code 3", err)
	}
	if res.ExitCode != 3 || res.OutputBytes != 8 || !strings.Contains(res.Tail, "out\n") || !strings.Contains(res.Tail, "err\n") {
		t.Errorf("result = %+v", res)
	}
	tc2 := newTestCall(t, t.TempDir(), nil)
	if err := tc2.run(t, context.Background(), api.ToolExec, api.ExecArgs{Command: "echo out; echo err >&2"}, &res); err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Errorf("exit code = %d", res.ExitCode)
	}
	// tc2's outbox still holds both streams.
	items := map[string]string{}
	for {
		it, ok := tc2.out.pop()
		if !ok {
			break
		}
		items[it.output.Stream] += string(it.output.Data)
	}
	if items[api.StreamStdout] != "out\n" || items[api.StreamStderr] != "err\n" {
		t.Errorf("streams = %q", items)
	}
}

func TestExecStreamsWhileRunning(t *testing.T) {
	dir := t.TempDir()
	tc := newTestCall(t, dir, nil)
	errc := make(chan error, 1)
	go func() {
		errc <- tc.run(t, context.Background(), api.ToolExec, api.ExecArgs{
			Command: "echo first; while [ ! -f go ]; do sleep 0.01; done; echo second",
		}, nil)
	}()
	tc.waitOutput(t, api.StreamStdout, "first\n") // the command is still waiting for go
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got := tc.output(api.StreamStdout); got != "second\n" {
		t.Errorf("rest of stdout = %q", got)
	}
}

func TestExecArgvCwdStdinEnv(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(api.EnvConnectToken.Name, "connect-token")
	t.Setenv(api.EnvGatewayURL.Name, "ws://gateway")
	t.Setenv(api.EnvConnectToken.Public, "public-connect-token")
	t.Setenv(api.EnvSessionToken.Public, "session-token")
	t.Setenv("OUTPOST_TEST_KEEP", "kept")
	tc := newTestCall(t, dir, map[string]string{"SESSION_SECRET": "s3cr3t-value"})
	err := tc.run(t, context.Background(), api.ToolExec, api.ExecArgs{
		Argv:  []string{"sh", "-c", `pwd; cat; echo "[$FOO][$OUTPOST_TEST_KEEP][${OUTPOST_CONNECT_TOKEN-unset}][${OUTPOST_GATEWAY_URL-unset}][${DEVIN_OUTPOST_CONNECT_TOKEN-unset}${DEVIN_REMOTE_SESSION_TOKEN-unset}][$SESSION_SECRET]"`},
		Cwd:   "sub",
		Env:   map[string]string{"FOO": "bar"},
		Stdin: "from stdin\n",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "sub") + "\nfrom stdin\n[bar][kept][unset][unset][unsetunset][[REDACTED:SESSION_SECRET]]\n"
	if got := tc.output(api.StreamStdout); got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}

	tc = newTestCall(t, dir, nil)
	if err := tc.run(t, context.Background(), api.ToolExec, api.ExecArgs{Argv: []string{"printf", "%s-%s", "a", "b"}}, nil); err != nil {
		t.Fatal(err)
	}
	if got := tc.output(api.StreamStdout); got != "a-b" {
		t.Errorf("argv stdout = %q", got)
	}
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	tc := newTestCall(t, dir, nil)
	var res api.ExecResult
	start := time.Now()
	err := tc.run(t, context.Background(), api.ToolExec, api.ExecArgs{
		Command:  "sleep 30 & echo $! > child.pid; wait",
		TimeoutS: 1,
	}, &res)
	if err == nil || !strings.Contains(err.Error(), "timed out") || !res.TimedOut {
		t.Fatalf("err = %v, result = %+v; want a timeout", err, res)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("timeout took %s", d)
	}
	b, err := os.ReadFile(filepath.Join(dir, "child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitGone(t, pid)
}

func TestExecCancel(t *testing.T) {
	dir := t.TempDir()
	tc := newTestCall(t, dir, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- tc.run(t, ctx, api.ToolExec, api.ExecArgs{Command: "sleep 30 & echo $! > child.pid; echo started; wait"}, nil)
	}()
	tc.waitOutput(t, api.StreamStdout, "started")
	cancel()
	select {
	case err := <-errc:
		if err == nil || err.Error() != "cancelled" {
			t.Fatalf("err = %v, want cancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel did not stop the command")
	}
	b, _ := os.ReadFile(filepath.Join(dir, "child.pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitGone(t, pid)
}

func TestExecBadArgs(t *testing.T) {
	tc := newTestCall(t, t.TempDir(), nil)
	for _, args := range []any{
		map[string]any{},
		map[string]any{"command": "true", "argv": []string{"true"}},
		map[string]any{"command": "true", "bogus": 1},
	} {
		if err := tc.run(t, context.Background(), api.ToolExec, args, nil); err == nil || !strings.Contains(err.Error(), "bad arguments") {
			t.Errorf("args %v: err = %v", args, err)
		}
	}
	err := tc.run(t, context.Background(), "teleport", map[string]any{}, nil)
	if err == nil || !strings.Contains(err.Error(), `unknown tool "teleport"`) {
		t.Errorf("unknown tool: err = %v", err)
	}
}

// waitGone waits until pid is gone or a zombie.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc to check processes")
	}
	if pid <= 0 {
		t.Fatalf("bad pid %d", pid)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return
		}
		<-time.After(20 * time.Millisecond) // poll interval
	}
	t.Fatalf("process %d survived", pid)
}
