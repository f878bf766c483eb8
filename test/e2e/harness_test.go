//go:build linux

// Package e2e runs the built outpost binary — server, workers, remotes and
// CLI — as real processes talking over loopback.
package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// binary is the outpost binary built once for the whole package.
var binary string

func TestMain(m *testing.M) {
	if b := os.Getenv(binaryEnv); b != "" {
		// A test re-executed in namespaces of its own (netpolicy_test.go)
		// reuses its parent's build.
		binary = b
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "outpost-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "outpost")
	args := append(append([]string{"build"}, buildFlags...), "-o", binary, "../../cmd/outpost")
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build outpost:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
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

// start runs the binary with args and extra environment, stopping it when
// the test ends.
func start(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	return startExact(t, name, append(os.Environ(), env...), "", args...)
}

// startExact runs the binary in dir (empty: the test's directory) with env
// as its whole environment, stopping it when the test ends.
func startExact(t *testing.T, name string, env []string, dir string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env, p.cmd.Dir = env, dir
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM, 20*time.Second)
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
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	return p.err
}

// kill9 kills only the process itself (not its children) with SIGKILL.
func (p *proc) kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// killMachine kills p with SIGKILL and every process working in dir (the
// worker's workspace: its remote and the commands it runs), as the death
// of the machine they run on would.
func killMachine(t *testing.T, p *proc, dir string) {
	t.Helper()
	p.kill9()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []int
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/")) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes in %s survive SIGKILL: %v", dir, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run runs the binary to completion and returns its standard output.
func run(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("outpost %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// freeAddr returns a loopback address with a free port.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// freeAddrs returns n distinct loopback addresses with free ports: the
// listeners are held until all are picked, so no two are the same (two
// calls of freeAddr in a row may return one port twice).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addrs[i] = ln.Addr().String()
	}
	return addrs
}

// cluster is a server process and how to reach it.
type cluster struct {
	t       *testing.T
	url     string
	admin   string
	dataDir string
	addr    string
	server  *proc
	extra   []string
	srvEnv  []string // extra environment of the server
	// httpc reaches the server from the test; nil means
	// http.DefaultClient. caFile, when set, is trusted by the CLI
	// (OUTPOST_CA_FILE in env). Both are set for a TLS cluster.
	httpc  *http.Client
	caFile string
}

func (c *cluster) client() *http.Client {
	if c.httpc != nil {
		return c.httpc
	}
	return http.DefaultClient
}

const adminToken = "opt_e2e-admin-token-0123456789"

// startCluster starts `outpost server` on a free loopback port.
func startCluster(t *testing.T, extraArgs ...string) *cluster {
	t.Helper()
	return startClusterEnv(t, nil, extraArgs...)
}

// startClusterEnv is startCluster with extra server environment.
func startClusterEnv(t *testing.T, env []string, extraArgs ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, admin: adminToken, dataDir: t.TempDir(), addr: freeAddr(t), extra: extraArgs, srvEnv: env}
	c.url = "http://" + c.addr
	c.startServer()
	return c
}

func (c *cluster) startServer() {
	c.t.Helper()
	args := append([]string{"server", "--listen", c.addr, "--data-dir", c.dataDir}, c.extra...)
	c.server = start(c.t, "server", append([]string{"OUTPOST_ADMIN_TOKEN=" + c.admin}, c.srvEnv...), args...)
	waitfor.Within(c.t, 20*time.Second, "server ready", func() bool {
		resp, err := c.client().Get(c.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// env is the environment that points the CLI at the cluster.
func (c *cluster) env(token string) []string {
	env := []string{"OUTPOST_SERVER=" + c.url, "OUTPOST_TOKEN=" + token, "HOME=" + c.t.TempDir(), "XDG_CONFIG_HOME=" + c.t.TempDir()}
	if c.caFile != "" {
		env = append(env, "OUTPOST_CA_FILE="+c.caFile)
	}
	return env
}

// api calls the REST API directly and decodes the answer.
// released reports whether the queue entry of session id is held by
// nobody: gone, or, for an ended session, listed without an acceptor for
// the ended-entry retention.
func (c *cluster) released(id, token string) bool {
	var e api.QueueEntry
	switch c.api("GET", "/v1/queue/"+id, token, nil, &e) {
	case 404:
		return true
	case 200:
		return e.Status.AcceptorID == nil
	}
	return false
}

func (c *cluster) api(method, path, token string, body, out any) int {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client().Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return resp.StatusCode
}

func (c *cluster) session(id string) api.Session {
	c.t.Helper()
	var s api.Session
	if code := c.api("GET", "/v1/sessions/"+id, c.admin, nil, &s); code != 200 {
		c.t.Fatalf("get session %s: %d", id, code)
	}
	return s
}

func (c *cluster) events(id string) []api.Event {
	c.t.Helper()
	var all []api.Event
	after := int64(0)
	for {
		var list api.EventList
		if code := c.api("GET", fmt.Sprintf("/v1/sessions/%s/events?after=%d&limit=1000", id, after), c.admin, nil, &list); code != 200 {
			c.t.Fatalf("events %s: %d", id, code)
		}
		all = append(all, list.Items...)
		after = list.Next
		if !list.HasNextPage {
			return all
		}
	}
}

// waitFinal waits until a session reaches a final status.
func (c *cluster) waitFinal(id string, within time.Duration) api.Session {
	c.t.Helper()
	var s api.Session
	waitfor.Within(c.t, within, "session "+id+" to end", func() bool {
		s = c.session(id)
		return api.IsFinal(s.Status.Status)
	})
	return s
}
