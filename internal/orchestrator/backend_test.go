//go:build unix

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

	"github.com/outpost-sh/outpost/api"
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
		Env: []string{"PATH=" + os.Getenv("PATH"), "OUTPOST_SESSION_ID=ses_2", "OUTPOST_CONNECT_TOKEN=ct"}, Remote: []string{"/bin/outpost"},
		Requirements: &api.Requirements{GPUs: 2, GPUModel: "*H200*"}}
	out := filepath.Join(dir, "env")
	b := ExecBackend{ProvisionCmd: "env > " + out, TeardownCmd: "true"}
	if _, err := b.Provision(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	env, _ := os.ReadFile(out)
	for _, want := range []string{"OUTPOST_SESSION_ID=ses_2", "OUTPOST_CONNECT_TOKEN=ct", "OUTPOST_PLATFORM=linux", "OUTPOST_WORKSPACE=" + ws, "OUTPOST_MACHINE_NAME=outpost-ses_2",
		`OUTPOST_REQUIREMENTS={"gpus":2,"gpu_model":"*H200*"}`} {
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

// TestExecBackendStatusCommand: the status command runs every StatusEvery
// while it exits 0, and the machine is done once it fails, or once the
// workspace is gone.
func TestExecBackendStatusCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := ExecBackend{ProvisionCmd: "true", TeardownCmd: "true", StatusEvery: 10 * time.Millisecond,
		StatusCmd: `echo run >> "$OUTPOST_WORKSPACE/runs"; [ ! -e "$OUTPOST_WORKSPACE/stopped" ]`}
	spec := func(id string) Spec {
		return Spec{SessionID: id, Name: MachineName(id), Workspace: filepath.Join(dir, MachineName(id)), Platform: "linux",
			Env: []string{"PATH=" + os.Getenv("PATH")}}
	}
	waitDone := func(m Machine, what string) {
		t.Helper()
		select {
		case <-m.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("the machine is not done 10s after %s", what)
		}
	}

	s := spec("ses_status")
	m, err := b.Provision(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	runs := func() int {
		b, _ := os.ReadFile(filepath.Join(s.Workspace, "runs"))
		return strings.Count(string(b), "run")
	}
	for deadline := time.Now().Add(10 * time.Second); runs() < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the status command ran %d times in 10s, want 3", runs())
		}
		select {
		case <-m.Done():
			t.Fatal("the machine is done while its status command exits 0")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := os.WriteFile(filepath.Join(s.Workspace, "stopped"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitDone(m, "its status command failed")
	if !strings.Contains(m.Exit(), "status command") {
		t.Errorf("exit %q, want the status command named", m.Exit())
	}

	s = spec("ses_gone")
	m, err = b.Provision(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(s.Workspace); err != nil {
		t.Fatal(err)
	}
	waitDone(m, "its workspace was removed")
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
