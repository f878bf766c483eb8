package orchestrator

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestProcessBackendTeardownKillsGroupAndRemovesWorkspace(t *testing.T) {
	ws := filepath.Join(t.TempDir(), MachineName("ses_1"))
	s := Spec{SessionID: "ses_1", Name: MachineName("ses_1"), Workspace: ws,
		Env: []string{"PATH=" + os.Getenv("PATH")}, Remote: []string{"sh", "-c", "sleep 300 & sleep 300"}}
	var b ProcessBackend
	m, err := b.Provision(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	pid := readPid(ws)
	if pid <= 0 || !alive(pid) {
		t.Fatalf("pid file %d: not running", pid)
	}
	// A restarted orchestrator finds the same machine by name.
	if _, ok := b.Adopt(context.Background(), s); !ok {
		t.Fatal("cannot adopt a running machine")
	}
	if err := b.Teardown(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the remote did not exit")
	}
	if _, err := os.Stat(ws); !os.IsNotExist(err) {
		t.Fatalf("workspace left: %v", err)
	}
	if alive(pid) {
		t.Fatal("the remote's process is still alive")
	}
	if _, ok := b.Adopt(context.Background(), s); ok {
		t.Fatal("adopted a torn-down machine")
	}
}

func TestExecBackendEnvAndFailure(t *testing.T) {
	t.Setenv("OUTPOST_TOKEN", "secret-orchestrator-token")
	dir := t.TempDir()
	ws := filepath.Join(dir, MachineName("ses_2"))
	s := Spec{SessionID: "ses_2", Name: MachineName("ses_2"), Workspace: ws, Platform: "linux",
		Env: []string{"PATH=" + os.Getenv("PATH"), "OUTPOST_SESSION_ID=ses_2", "OUTPOST_CONNECT_TOKEN=ct"}, Remote: []string{"/bin/outpost"}}
	out := filepath.Join(dir, "env")
	b := ExecBackend{ProvisionCmd: "env > " + out, TeardownCmd: "true"}
	if _, err := b.Provision(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	env, _ := os.ReadFile(out)
	for _, want := range []string{"OUTPOST_SESSION_ID=ses_2", "OUTPOST_CONNECT_TOKEN=ct", "OUTPOST_PLATFORM=linux", "OUTPOST_WORKSPACE=" + ws, "OUTPOST_MACHINE_NAME=outpost-ses_2"} {
		if !strings.Contains(string(env), want) {
			t.Errorf("provision env lacks %s", want)
		}
	}
	if strings.Contains(string(env), "secret-orchestrator-token") {
		t.Error("the orchestrator's token reached the provision command")
	}
	if err := b.Teardown(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ws); !os.IsNotExist(err) {
		t.Fatal("workspace left after teardown")
	}
	b.ProvisionCmd = "echo no capacity >&2; exit 3"
	if _, err := b.Provision(context.Background(), s); err == nil || !strings.Contains(err.Error(), "no capacity") {
		t.Fatalf("failing provision: %v", err)
	}
}

// After a crash the pid in a workspace may belong to another process by
// now: it is neither adopted nor signalled.
func TestProcessBackendIgnoresReusedPid(t *testing.T) {
	ws := filepath.Join(t.TempDir(), MachineName("ses_2"))
	s := Spec{SessionID: "ses_2", Name: MachineName("ses_2"), Workspace: ws,
		Env: []string{"PATH=" + os.Getenv("PATH")}, Remote: []string{"sh", "-c", "exit 7"}}
	var b ProcessBackend
	m, err := b.Provision(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	<-m.Done()
	if code, ok := m.(ExitCoder).ExitCode(); !ok || code != 7 {
		t.Fatalf("exit code %d, %v; want 7", code, ok)
	}
	// Another process now has a pid the file could name (started a few
	// clock ticks later, as a reused pid would be).
	time.Sleep(50 * time.Millisecond)
	other := exec.Command("sleep", "300")
	other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	if err := os.WriteFile(filepath.Join(ws, pidFile), []byte(strconv.Itoa(other.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Adopt(context.Background(), s); ok {
		t.Fatal("adopted an unrelated process whose pid was reused")
	}
	if err := b.Teardown(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if !alive(other.Process.Pid) {
		t.Fatal("teardown signalled an unrelated process whose pid was reused")
	}
	if _, err := os.Stat(ws); !os.IsNotExist(err) {
		t.Fatalf("workspace left: %v", err)
	}
}
