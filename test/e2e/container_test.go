//go:build linux

package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/orchestrator/podmantest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// podmanCLI runs podman with the runtime settings the docker backend's
// tests use (runc, cgroupfs), failing the test on an error.
func podmanCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := podmanTry(args...)
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func podmanTry(args ...string) (string, error) {
	cmd := exec.Command("podman", append([]string{"--runtime", "runc", "--cgroup-manager", "cgroupfs"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// containerUlimits are this process's own nofile and nproc limits, for
// podman to give its containers: its defaults can be above what this
// machine lets a process set (runc then fails with "error setting
// rlimits"). nproc stays within pid_max.
func containerUlimits() []string {
	var args []string
	for _, l := range []struct {
		name string
		res  int
	}{{"nofile", unix.RLIMIT_NOFILE}, {"nproc", unix.RLIMIT_NPROC}} {
		var rl unix.Rlimit
		if unix.Getrlimit(l.res, &rl) != nil || rl.Cur == unix.RLIM_INFINITY {
			continue
		}
		hard := rl.Max
		if hard == unix.RLIM_INFINITY {
			hard = rl.Cur
		}
		if l.name == "nproc" {
			if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
				if pm, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
					rl.Cur, hard = min(rl.Cur, pm), min(hard, pm)
				}
			}
		}
		args = append(args, "--ulimit", fmt.Sprintf("%s=%d:%d", l.name, rl.Cur, hard))
	}
	return args
}

// buildImages builds the server and worker targets of the repository's
// Dockerfile with Podman from the test image, with a static binary built
// outside (no Go toolchain and no registry needed), and returns their tags.
// Every image the builds made is removed when the test ends.
func buildImages(t *testing.T) (server, worker string) {
	t.Helper()
	ctx := t.TempDir()
	for _, f := range []string{"Dockerfile", ".dockerignore"} {
		b, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ctx, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gobuild := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(ctx, "bin")+string(filepath.Separator),
		"../../cmd/outpost", "../../cmd/outpost-operator")
	gobuild.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := gobuild.CombinedOutput(); err != nil {
		t.Fatalf("build a static outpost and outpost-operator: %v\n%s", err, out)
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	repo := "localhost/outpost-e2e-" + hex.EncodeToString(suffix)
	server, worker = repo+":server", repo+":worker"
	var made []string
	t.Cleanup(func() {
		// Tags first, then the stages' images, newest first.
		_, _ = podmanTry("rmi", server, worker)
		for i := len(made) - 1; i >= 0; i-- {
			_, _ = podmanTry("rmi", made[i])
		}
	})
	step := regexp.MustCompile(`(?m)^--> (?:Using cache )?([0-9a-f]{11,64})$`)
	for _, b := range [][]string{{"--target", "worker", "-t", worker}, {"-t", server}} {
		args := append([]string{"build", "--build-arg", "BINARY=context", "--build-arg", "BASE=" + podmantest.Image,
			"--build-arg", "PACKAGES=", "--build-arg", "WORKER_PACKAGES="}, containerUlimits()...)
		out := podmanCLI(t, append(append(args, b...), ctx)...)
		for _, m := range step.FindAllStringSubmatch(out, -1) {
			made = append(made, m[1])
		}
	}
	return server, worker
}

// runContainer starts a detached container on the host's network and
// removes it, with its anonymous volumes, when the test ends.
func runContainer(t *testing.T, name string, args ...string) {
	t.Helper()
	run := append(append([]string{"run", "-d", "--name", name, "--network", "host"}, containerUlimits()...), args...)
	podmanCLI(t, run...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := podmanTry("logs", name)
			t.Logf("--- container %s ---\n%s", name, logs)
		}
		_, _ = podmanTry("rm", "-f", "-v", "-t", "5", name)
	})
}

// TestContainerImage builds the Dockerfile's images with Podman (from the
// local test image, the binary built outside) and runs them: a server
// container and a worker container, on the host's loopback network, finish
// a session; the server image runs `outpost operator` too. Both run as the image's non-root user; the session sees git
// and the worker's workspace /work; a backup is made inside the server's
// container.
func TestContainerImage(t *testing.T) {
	t.Parallel()
	podmantest.Require(t)
	script := exec.Command("../../scripts/test-image.sh", podmantest.Image)
	if out, err := script.CombinedOutput(); err != nil {
		t.Fatalf("scripts/test-image.sh: %v\n%s", err, out)
	}
	serverImage, workerImage := buildImages(t)

	addr := freeAddr(t)
	c := &cluster{t: t, admin: adminToken, addr: addr, url: "http://" + addr}
	name := strings.ReplaceAll(strings.TrimPrefix(serverImage, "localhost/"), ":", "-")
	runContainer(t, name, "-e", "OUTPOST_ADMIN_TOKEN="+adminToken, serverImage, "server", "--listen", addr)
	waitfor.Within(t, 30*time.Second, "the server container to be ready", func() bool {
		resp, err := http.Get(c.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if uid := strings.TrimSpace(podmanCLI(t, "exec", name, "id", "-u")); uid != "10001" {
		t.Errorf("the server container runs as uid %s, want 10001", uid)
	}

	token := setupOutpost(t, c, "containers")
	runContainer(t, name+"-worker", "-e", "OUTPOST_SERVER="+c.url, "-e", "OUTPOST_TOKEN="+token,
		workerImage, "worker", "start", "--outpost", "containers", "--isolation", "none")
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "containers", Title: "in a container",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec,
			Args: json.RawMessage(`{"command":"echo uid=$(id -u) cwd=$PWD; git --version"}`)}}}})
	s := c.waitFinal(id, 90*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	out := transcriptOutput(c, id)
	for _, want := range []string{"uid=10001", "cwd=/work", "git version"} {
		if !strings.Contains(out, want) {
			t.Errorf("the session's output %q lacks %q", out, want)
		}
	}
	// The image has the operator, which `outpost operator` runs.
	if help := podmanCLI(t, "exec", name, "outpost", "operator", "--help"); !strings.Contains(help, "--leader-elect") {
		t.Errorf("outpost operator --help in the server image printed %q", help)
	}
	backup := podmanCLI(t, "exec", name, "outpost", "server", "backup", "/tmp/outpost-backup.tar.gz")
	if !strings.Contains(backup, "Backed up /var/lib/outpost") {
		t.Errorf("backup in the server container printed %q", backup)
	}
}
