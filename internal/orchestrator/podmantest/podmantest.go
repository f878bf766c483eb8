//go:build linux

// Package podmantest runs the real Podman API service that tests and
// benchmarks of the docker backend talk to: Debian's podman, its
// Docker-compatible API started with `--runtime runc --cgroup-manager
// cgroupfs` on a socket of its own, and a test image (Image) made by
// scripts/test-image.sh. Without podman it skips, unless CI is set.
package podmantest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	imageOnce sync.Once
	imageErr  error

	mu    sync.Mutex
	users int
	svc   *exec.Cmd
	host  string
)

// Require skips tb when podman is not installed, and fails it when CI is
// set.
func Require(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatal("podman is not installed (CI is set: apt-get install podman runc debootstrap uidmap)")
		}
		tb.Skip("podman is not installed; the docker backend's tests need it (apt-get install podman runc debootstrap)")
	}
}

// API returns the address (unix://…) of a running Podman API service that
// has Image. Tests running at the same time share it; the last one to
// finish stops it.
func API(tb testing.TB) string {
	tb.Helper()
	Require(tb)
	imageOnce.Do(func() { imageErr = makeImage() })
	if imageErr != nil {
		tb.Fatal(imageErr)
	}
	mu.Lock()
	defer mu.Unlock()
	if users == 0 {
		cmd, addr, err := startService()
		if err != nil {
			tb.Fatal(err)
		}
		svc, host = cmd, addr
	}
	users++
	cmd, addr := svc, host
	tb.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if users--; users == 0 {
			stop(cmd, filepath.Dir(strings.TrimPrefix(addr, "unix://")))
			svc, host = nil, ""
		}
	})
	return addr
}

// Containers lists the names of the containers, running or not, with label
// (key=value).
func Containers(tb testing.TB, label string) []string {
	tb.Helper()
	out, err := exec.Command("podman", "ps", "-a", "--filter", "label="+label, "--format", "{{.Names}}").CombinedOutput()
	if err != nil {
		tb.Fatalf("podman ps: %v: %s", err, out)
	}
	return strings.Fields(string(out))
}

// makeImage runs scripts/test-image.sh, which builds Image once and caches
// its root filesystem between runs.
func makeImage() error {
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "test-image.sh")
	cmd := exec.Command(script, Image)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("scripts/test-image.sh: %w", err)
	}
	return nil
}

func startService() (*exec.Cmd, string, error) {
	dir, err := os.MkdirTemp("", "outpost-podman")
	if err != nil {
		return nil, "", err
	}
	sock := filepath.Join(dir, "podman.sock")
	cmd := exec.Command("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "system", "service", "--time=0", "unix://"+sock)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startPinned(cmd); err != nil {
		os.RemoveAll(dir)
		return nil, "", fmt.Errorf("start the podman API service: %w", err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := hc.Get("http://podman/_ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cmd, "unix://" + sock, nil
			}
		}
		if time.Now().After(deadline) {
			stop(cmd, dir)
			return nil, "", fmt.Errorf("the podman API service at %s did not answer: %v", sock, err)
		}
	}
}

// pinned are the threads that started services, by service: see
// startPinned. Guarded by mu.
var pinned = map[*exec.Cmd]chan struct{}{}

// startPinned starts cmd from an OS thread kept for it until stop: the
// kernel sends a child's parent-death signal (Pdeathsig) when the thread
// that forked it ends, and code under test ends threads (a goroutine that
// enters a network namespace exits locked, and the runtime discards its
// thread), which may be the one that forked the service a moment earlier.
func startPinned(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		errc <- err
		if err == nil {
			<-release
		}
	}()
	if err := <-errc; err != nil {
		return err
	}
	pinned[cmd] = release
	return nil
}

// stop ends the service's process group (SIGTERM, SIGKILL after 10 s) and
// removes its socket directory.
func stop(cmd *exec.Cmd, dir string) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	os.RemoveAll(dir)
	if release := pinned[cmd]; release != nil {
		close(release)
		delete(pinned, cmd)
	}
}
