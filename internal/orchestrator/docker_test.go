package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/outpost-sh/outpost/internal/orchestrator/podmantest"
)

// The docker backend's tests run against Podman's Docker-compatible API
// service and the test image of package podmantest.

const testImage = podmantest.Image

func randomID(t testing.TB) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "ses_dt" + hex.EncodeToString(b)
}

// shellSpec is a session whose "outpost binary" is the host's /bin/sh
// (bookworm's dash, on the image's glibc) running script.
func shellSpec(t testing.TB, script string) Spec {
	id := randomID(t)
	return Spec{SessionID: id, Name: MachineName(id), Workspace: filepath.Join(t.TempDir(), MachineName(id)), Platform: "linux",
		Env: []string{"OUTPOST_GATEWAY_URL=ws://127.0.0.1:1/v1/gateway", "OUTPOST_CONNECT_TOKEN=connect-token", "OUTPOST_SESSION_ID=" + id,
			"OUTPOST_STATE_DIR=/host/state", "PATH=/host/only/bin", "HOME=/host/home", "OUTPOST_TOKEN=secret-orchestrator-token"},
		Remote: []string{"/bin/sh", "-c", script}}
}

func newTestBackend(t testing.TB, opts DockerOptions) *DockerBackend {
	t.Helper()
	if opts.Host == "" {
		opts.Host = podmantest.API(t)
	}
	if opts.Image == "" {
		opts.Image = testImage
	}
	b, err := NewDockerBackend(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestDockerBackendProvisionAdoptTeardown(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, DockerOptions{Outpost: "unit", CPUs: 1, Memory: 256 << 20})
	ctx := context.Background()
	if v, err := b.Check(ctx); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("Engine API %s at %s", v, b.Host())
	}
	s := shellSpec(t, `env > /tmp/env; echo started; exec sleep 300`)
	t0 := time.Now()
	m, err := b.Provision(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("provisioned in %s", time.Since(t0).Round(time.Millisecond))
	if _, err := os.Stat(s.Workspace); err != nil {
		t.Fatalf("no workspace: %v", err)
	}
	if got := podmantest.Containers(t, LabelSession+"="+s.SessionID); len(got) != 1 || got[0] != s.Name {
		t.Fatalf("containers of the session: %v", got)
	}
	if got := podmantest.Containers(t, LabelOutpost+"=unit"); len(got) == 0 {
		t.Fatal("no container with the outpost label")
	}
	var env string
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("podman", "exec", s.Name, "cat", "/tmp/env").CombinedOutput()
		if env = string(out); err == nil && strings.Contains(env, "OUTPOST_SESSION_ID") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, want := range []string{"OUTPOST_SESSION_ID=" + s.SessionID, "OUTPOST_CONNECT_TOKEN=connect-token", "OUTPOST_GATEWAY_URL=ws://127.0.0.1:1/v1/gateway", "OUTPOST_STATE_DIR=/outpost/state", "PWD=/workspace"} {
		if !strings.Contains(env, want) {
			t.Errorf("container env lacks %s:\n%s", want, env)
		}
	}
	for _, bad := range []string{"secret-orchestrator-token", "/host/only/bin", "/host/home", "/host/state"} {
		if strings.Contains(env, bad) {
			t.Errorf("container env has %s:\n%s", bad, env)
		}
	}
	select {
	case <-m.Done():
		t.Fatalf("the machine is done already: %s", m.Exit())
	default:
	}

	// A restarted orchestrator (a new backend) adopts the running container.
	b2 := newTestBackend(t, DockerOptions{Outpost: "unit", StopGrace: time.Second}) // sh as PID 1 ignores SIGTERM
	m2, ok := b2.Adopt(ctx, s)
	if !ok {
		t.Fatal("cannot adopt the running container")
	}
	other := s
	other.SessionID = "ses_someoneelse"
	if _, ok := b2.Adopt(ctx, other); ok {
		t.Fatal("adopted a container of another session")
	}

	t0 = time.Now()
	if err := b2.Teardown(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Logf("torn down in %s", time.Since(t0).Round(time.Millisecond))
	for _, mm := range []Machine{m, m2} {
		select {
		case <-mm.Done():
		case <-time.After(15 * time.Second):
			t.Fatal("a machine is not done after teardown")
		}
	}
	if got := podmantest.Containers(t, LabelSession+"="+s.SessionID); len(got) != 0 {
		t.Fatalf("containers left: %v", got)
	}
	if _, err := os.Stat(s.Workspace); !os.IsNotExist(err) {
		t.Fatalf("workspace left: %v", err)
	}
	if err := b.Teardown(ctx, s); err != nil {
		t.Fatalf("second teardown: %v", err)
	}
	if _, ok := b.Adopt(ctx, s); ok {
		t.Fatal("adopted a removed container")
	}
}

func TestDockerBackendExitCode(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, DockerOptions{})
	ctx := context.Background()
	s := shellSpec(t, `echo boom >&2; exit 3`)
	// The binary is mounted even from a path a -v bind could not name.
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	odd := filepath.Join(t.TempDir(), "with:colon", "sh")
	if err := os.MkdirAll(filepath.Dir(odd), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(odd, sh, 0o755); err != nil {
		t.Fatal(err)
	}
	s.Remote[0] = odd
	m, err := b.Provision(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the container's exit was not seen")
	}
	if exit := m.Exit(); !strings.Contains(exit, "exit status 3") || !strings.Contains(exit, "boom") {
		t.Fatalf("exit: %q", exit)
	}
	if code, ok := m.(ExitCoder).ExitCode(); !ok || code != 3 {
		t.Fatalf("exit code: %d %v, want 3", code, ok)
	}
	// An exited container is not adopted; Teardown removes it.
	if _, ok := b.Adopt(ctx, s); ok {
		t.Fatal("adopted an exited container")
	}
	if err := b.Teardown(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got := podmantest.Containers(t, LabelSession+"="+s.SessionID); len(got) != 0 {
		t.Fatalf("containers left: %v", got)
	}
}

func TestDockerBackendProvisionFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	host := podmantest.API(t)

	// No such image, and no registry to pull it from.
	missing := "localhost:1/outpost-test-missing:none"
	b := newTestBackend(t, DockerOptions{Host: host, Image: missing})
	s := shellSpec(t, "true")
	if _, err := b.Provision(ctx, s); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("provision with a missing image: %v", err)
	} else {
		t.Logf("missing image: %v", err)
	}

	// The runtime refuses to start the container: nothing is left.
	u, err := ParseUlimit("nofile=4000000000:4000000000")
	if err != nil {
		t.Fatal(err)
	}
	b = newTestBackend(t, DockerOptions{Host: host, Ulimits: []*container.Ulimit{u}})
	s = shellSpec(t, "sleep 60")
	if _, err := b.Provision(ctx, s); err == nil {
		t.Fatal("provisioned with an impossible ulimit")
	} else {
		t.Logf("start failure: %v", err)
	}
	if got := podmantest.Containers(t, LabelSession+"="+s.SessionID); len(got) != 0 {
		t.Fatalf("containers left after a failed start: %v", got)
	}
	if err := b.Teardown(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// A container of the session's name that outpost did not make is left alone.
func TestDockerBackendLeavesForeignContainers(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, DockerOptions{})
	s := shellSpec(t, "true")
	if out, err := exec.Command("podman", "create", "--name", s.Name, testImage, "true").CombinedOutput(); err != nil {
		t.Fatalf("podman create: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("podman", "rm", "-f", s.Name).Run() })
	if err := b.Teardown(context.Background(), s); err == nil || !strings.Contains(err.Error(), "not one outpost made") {
		t.Fatalf("teardown of a foreign container: %v", err)
	}
	if out, err := exec.Command("podman", "container", "exists", s.Name).CombinedOutput(); err != nil {
		t.Fatalf("the foreign container was removed: %v %s", err, out)
	}
}

func TestDockerHelpers(t *testing.T) {
	env := containerEnv([]string{"OUTPOST_GATEWAY_URL=g", "OUTPOST_CONNECT_TOKEN=c", "OUTPOST_SESSION_ID=s", "OUTPOST_STATE_DIR=/host", "PATH=/x", "OUTPOST_TOKEN=t"})
	if got := strings.Join(env, " "); got != "OUTPOST_GATEWAY_URL=g OUTPOST_CONNECT_TOKEN=c OUTPOST_SESSION_ID=s OUTPOST_STATE_DIR=/outpost/state" {
		t.Fatalf("containerEnv: %s", got)
	}
	if n, err := ParseMemory("2g"); err != nil || n != 2<<30 {
		t.Fatalf("ParseMemory(2g) = %d, %v", n, err)
	}
	if _, err := ParseMemory("lots"); err == nil {
		t.Fatal("ParseMemory(lots) succeeded")
	}
	if u, err := ParseUlimit("nofile=1024:2048"); err != nil || u.Name != "nofile" || u.Soft != 1024 || u.Hard != 2048 {
		t.Fatalf("ParseUlimit: %+v %v", u, err)
	}
	if _, err := ParseUlimit("nofile"); err == nil {
		t.Fatal("ParseUlimit(nofile) succeeded")
	}
	def := withDefaultUlimits(nil)
	names := map[string]bool{}
	for _, u := range def {
		names[u.Name] = true
		if u.Soft > u.Hard || u.Hard <= 0 {
			t.Errorf("default ulimit %+v", u)
		}
	}
	if !names["nofile"] {
		t.Errorf("no default nofile: %v", names)
	}
	custom := withDefaultUlimits([]*container.Ulimit{{Name: "nofile", Soft: 1, Hard: 2}})
	for _, u := range custom {
		if u.Name == "nofile" && u.Soft != 1 {
			t.Errorf("a set ulimit was overridden: %+v", u)
		}
	}
	if !versionLess("1.24", "1.41") || versionLess("1.41", "1.41") || versionLess("1.41", "1.9") || !versionLess("1.9", "1.41") {
		t.Error("versionLess")
	}
}

// When the API cannot be reached, Teardown fails and keeps the workspace,
// so a restarted orchestrator tries again instead of leaking the container.
func TestDockerTeardownKeepsWorkspaceWhenAPIFails(t *testing.T) {
	b, err := NewDockerBackend(DockerOptions{Image: testImage, Host: "unix://" + filepath.Join(t.TempDir(), "none.sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := shellSpec(t, "true")
	if err := os.MkdirAll(s.Workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := b.Teardown(context.Background(), s); err == nil || !strings.Contains(err.Error(), "kept") {
		t.Fatalf("teardown without an API: %v", err)
	}
	if _, err := os.Stat(s.Workspace); err != nil {
		t.Fatalf("the workspace is gone: %v", err)
	}
	if _, err := b.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "reach the Engine API") {
		t.Fatalf("check without an API: %v", err)
	}
	if _, err := NewDockerBackend(DockerOptions{}); err == nil {
		t.Fatal("a backend without an image")
	}
}

// A container whose workspace is gone is still found, by its acceptor
// label, and only by the acceptor that made it.
func TestDockerBackendLeftovers(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, DockerOptions{Outpost: "unit"})
	ctx := context.Background()
	s := shellSpec(t, `exec sleep 300`)
	s.Acceptor = "orch-" + s.SessionID
	if _, err := b.Provision(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Teardown(context.Background(), s) })
	if err := os.RemoveAll(s.Workspace); err != nil {
		t.Fatal(err)
	}
	ids, err := b.Leftovers(ctx, s.Acceptor)
	if err != nil || len(ids) != 1 || ids[0] != s.SessionID {
		t.Fatalf("leftovers of %s: %v, %v; want [%s]", s.Acceptor, ids, err, s.SessionID)
	}
	if ids, err := b.Leftovers(ctx, "someone-else"); err != nil || len(ids) != 0 {
		t.Fatalf("another acceptor's leftovers: %v, %v; want none", ids, err)
	}
	if err := b.Teardown(ctx, s); err != nil {
		t.Fatal(err)
	}
	if ids, err := b.Leftovers(ctx, s.Acceptor); err != nil || len(ids) != 0 {
		t.Fatalf("leftovers after teardown: %v, %v", ids, err)
	}
}
