package orchestrator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/dist"
)

// pinnedBuild writes a stand-in for a downloaded build where the resolver
// caches one (<cache>/remote/<id>_<platform>/devin-remote): a script that
// says under which name and with which arguments it ran, on stderr, and
// exits 3.
func pinnedBuild(t *testing.T, id string) string {
	t.Helper()
	suffix := dist.HostSuffix()
	if suffix == "" {
		t.Skip("no platform suffix for this machine")
	}
	path := dist.CachedPath(t.TempDir(), id, suffix)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho \"ran as $0 $*\" >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestExecBackendPinnedBuild: the exec backend's commands get a pinned
// build as $OUTPOST_BIN, under a name that makes "$OUTPOST_BIN" remote serve
// run it, and the pin and static base URL for a worker they start there.
func TestExecBackendPinnedBuild(t *testing.T) {
	const pin = "0e2e0000beef"
	bin := pinnedBuild(t, pin)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	b := ExecBackend{ProvisionCmd: `env > env.txt; "$OUTPOST_BIN" remote serve 2> "` + out + `"; mv env.txt "` + dir + `/"`, TeardownCmd: "true"}
	for i := range 2 { // the second finds the link made
		ws := filepath.Join(dir, MachineName("ses_p"))
		s := Spec{SessionID: "ses_p", Name: MachineName("ses_p"), Workspace: ws, Platform: "linux", Env: []string{"PATH=" + os.Getenv("PATH")},
			Remote: []string{bin, "serve"}, Pin: pin, StaticBaseURL: "http://127.0.0.1:1/dist/"}
		if _, err := b.Provision(context.Background(), s); err != nil {
			t.Fatalf("provision %d: %v", i, err)
		}
		link := filepath.Join(filepath.Dir(bin), "outpost")
		if got, _ := os.ReadFile(out); strings.TrimSpace(string(got)) != "ran as "+link+" remote serve" {
			t.Errorf("provision %d: the build %s", i, got)
		}
		env, _ := os.ReadFile(filepath.Join(dir, "env.txt"))
		for _, want := range []string{"OUTPOST_BIN=" + link + "\n", "OUTPOST_WORKER_REMOTE_SHA=" + pin + "\n", "OUTPOST_WORKER_STATIC_BASE_URL=http://127.0.0.1:1/dist/\n"} {
			if !strings.Contains(string(env), want) {
				t.Errorf("provision %d: env lacks %q", i, want)
			}
		}
		if err := b.Teardown(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDockerBackendPinnedBuild: a pinned build is mounted as the
// container's outpost and run as `outpost remote serve`.
func TestDockerBackendPinnedBuild(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, DockerOptions{})
	ctx := context.Background()
	s := shellSpec(t, "")
	s.Remote = []string{pinnedBuild(t, "0e2e0000beef"), "serve"}
	m, err := b.Provision(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Teardown(context.WithoutCancel(ctx), s) })
	select {
	case <-m.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the container's exit was not seen")
	}
	if exit := m.Exit(); !strings.Contains(exit, "ran as "+DockerBinary+" remote serve") {
		t.Fatalf("exit: %q", exit)
	}
}

// TestOutpostLinkConcurrent: sessions pinning the same build are provisioned
// at once by one orchestrator, so its link to the build is made by several
// goroutines of one process together; each must find it made, none fail.
func TestOutpostLinkConcurrent(t *testing.T) {
	t.Parallel()
	for round := range 20 {
		bin := pinnedBuild(t, "0e2e0000beef")
		errs := make(chan error, 8)
		start := make(chan struct{})
		for range cap(errs) {
			go func() {
				<-start
				errs <- outpostLink(bin)
			}()
		}
		close(start)
		for range cap(errs) {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		link := execBinary(bin)
		if got, err := os.Readlink(link); err != nil || got != filepath.Base(bin) {
			t.Fatalf("round %d: link %s -> %q, %v", round, link, got, err)
		}
		if left, _ := filepath.Glob(link + ".*"); len(left) > 0 {
			t.Fatalf("round %d: left behind %v", round, left)
		}
	}
}
