package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/dist"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
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

// specBackend hands the spec of its first provisioning to the test, then
// waits on its context.
type specBackend struct{ specs chan Spec }

func (specBackend) Name() string { return "spec" }
func (b specBackend) Provision(ctx context.Context, s Spec) (Machine, error) {
	select {
	case b.specs <- s:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}
func (specBackend) Adopt(context.Context, Spec) (Machine, bool) { return nil, false }
func (specBackend) Teardown(context.Context, Spec) error        { return nil }

// TestRelativeCacheDir: a --cache-dir given relative to the working
// directory makes an absolute Remote, which the backends start in a
// machine's workspace: the build checked is the build that runs.
func TestRelativeCacheDir(t *testing.T) {
	const pin = "00000000900d"
	suffix := dist.HostSuffix()
	if suffix == "" {
		t.Skip("no platform suffix for this machine")
	}
	builds := t.TempDir()
	bin := []byte("#!/bin/sh\nexit 0\n")
	sum := sha256.Sum256(bin)
	for name, b := range map[string][]byte{
		dist.BinaryName(pin, suffix):   bin,
		dist.ChecksumName(pin, suffix): []byte(dist.CheckLine(hex.EncodeToString(sum[:]), suffix)),
	} {
		if err := os.WriteFile(filepath.Join(builds, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h, err := dist.NewHandler(dist.HandlerOptions{Dir: builds, NoSelf: true})
	if err != nil {
		t.Fatal(err)
	}
	published := httptest.NewServer(http.StripPrefix("/dist/", h))
	t.Cleanup(published.Close)

	sctx := t.Context()
	c := servertest.Start(t, server.Options{}).Client
	if _, err := c.Outposts.Create(sctx, api.CreateOutpostRequest{Name: "dev", Platform: api.PlatformLinux}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sessions.Create(sctx, api.CreateSessionRequest{Outpost: "dev", Prompt: "x", RemoteBinarySHA: pin,
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}}); err != nil {
		t.Fatal(err)
	}

	cwd := t.TempDir()
	t.Chdir(cwd)
	b := specBackend{specs: make(chan Spec, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Client: c, Outpost: "dev", StateDir: t.TempDir(), Backend: b, RemoteCommand: []string{"/bin/true"},
			StaticBaseURL: published.URL + "/dist/", CacheDir: "cache", PollInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	}()
	defer func() { cancel(); <-done }()
	var s Spec
	select {
	case s = <-b.specs:
	case err := <-done:
		t.Fatalf("Run = %v before any provisioning", err)
	case <-time.After(20 * time.Second):
		t.Fatal("provision never started")
	}
	want := dist.CachedPath(filepath.Join(cwd, "cache"), pin, suffix)
	if len(s.Remote) == 0 || s.Remote[0] != want {
		t.Fatalf("Remote = %q, want %s first", s.Remote, want)
	}
}
