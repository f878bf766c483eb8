//go:build !windows

// Package kube runs `outpost operator` end to end: the built outpost
// binary as the server and as the operator, a real kube-apiserver and etcd
// (envtest) with the OutpostPool CRD installed, and the test kubelet
// (internal/kubelettest) running each session's Pod — `outpost worker
// start --session …` in direct-serve mode — as a local process, so that
// sessions go through real Pods, Secrets and PersistentVolumeClaims.
//
// The package needs KUBEBUILDER_ASSETS (export
// KUBEBUILDER_ASSETS=$(bash scripts/envtest-assets.sh)) and bubblewrap;
// without them its tests skip, or fail when CI is set.
package kube

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/outpost-sh/outpost/internal/kubelettest"
)

var (
	// binary is the outpost binary built once for the whole package.
	binary string
	// apiEnv is the package's API server, with deploy/crds installed.
	apiEnv *envtest.Environment
	apiCfg *rest.Config
	// hasOperator says the binary has the operator command (its tests
	// skip without it, while it is being written).
	hasOperator bool
	// setupErr is why the package could not start; every test fails with it.
	setupErr error
)

// binaryEnv names an outpost binary to test instead of the one the
// package builds from this tree (another branch's build, say).
const binaryEnv = "OUTPOST_KUBE_TEST_BINARY"

// logsEnv names a directory that gets the output of every process the
// tests start, passing or not (a benchmark's breakdown, say).
const logsEnv = "OUTPOST_KUBE_TEST_LOGS"

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Getenv(kubelettest.AssetsEnv) == "" {
		return m.Run() // every test skips (or fails under CI) in requireCluster
	}
	if binary = os.Getenv(binaryEnv); binary == "" {
		dir, err := os.MkdirTemp("", "outpost-kube-bin")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binary = filepath.Join(dir, "outpost")
		// outpost-operator next to outpost: `outpost operator` runs it.
		args := append(append([]string{"build"}, buildFlags...), "-o", dir+string(filepath.Separator), "../../cmd/outpost", "../../cmd/outpost-operator")
		build := exec.Command("go", args...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build outpost and outpost-operator:", err)
			return 1
		}
	}
	hasOperator = exec.Command(binary, "operator", "--help").Run() == nil
	ctrllog.SetLogger(logr.Discard()) // envtest logs through it
	apiEnv, apiCfg, setupErr = kubelettest.StartAPIServer(filepath.Join("..", "..", "deploy", "crds"))
	if apiEnv != nil {
		defer apiEnv.Stop()
	}
	return m.Run()
}

// requireCluster skips t without the API server's binaries or bwrap (fails
// under CI) and fails it when the package could not start.
func requireCluster(t testing.TB) {
	t.Helper()
	kubelettest.RequireAssets(t)
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but bwrap is missing: %v", err)
		}
		t.Skip("bwrap not installed (apt-get install bubblewrap)")
	}
	if setupErr != nil {
		t.Fatal(setupErr)
	}
}

// requireOperator is requireCluster for the tests of `outpost operator`.
func requireOperator(t testing.TB) {
	t.Helper()
	requireCluster(t)
	if !hasOperator {
		t.Skip("the outpost binary has no operator command yet")
	}
}

// proc is a running outpost process whose output is kept for failures.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs the binary with args and env added to the test's, stopping it
// (SIGTERM, then SIGKILL) when the test ends.
func start(t testing.TB, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = append(os.Environ(), env...)
	var out io.Writer = p.out
	if dir := os.Getenv(logsEnv); dir != "" {
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s-%d.log",
			strings.ReplaceAll(t.Name(), "/", "_"), name, time.Now().UnixNano())))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { logf.Close() })
		out = io.MultiWriter(p.out, logf)
	}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.stop(syscall.SIGTERM, 20*time.Second)
		if strings.Contains(p.out.String(), "WARNING: DATA RACE") {
			t.Errorf("the race detector found a data race in %s", name)
		}
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", name, p.out.String())
		}
	})
	return p
}

// stop signals the process group and waits, killing it after grace.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	return p.err
}

// kill9 kills the process with SIGKILL, as a node losing it would.
func (p *proc) kill9() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// freeAddr returns a loopback address with a free port.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
