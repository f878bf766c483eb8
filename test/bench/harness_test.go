//go:build !windows

// Package bench holds the benchmarks behind docs/benchmarks.md: dispatch
// latency, tool round trips, output streaming and claim throughput,
// measured on the real outpost binary (server, worker, remote) over
// loopback, plus an in-process variant of the round trip for profiling and
// the workspace snapshot library (internal/snapshot) in process.
//
// They are Go benchmarks, so `go test ./...` compiles them but never runs
// them. Run them with `make bench`, i.e.
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 30m ./test/bench/...
//
// Each benchmark runs one whole scenario per iteration and reports its own
// metrics (p50/p99, MB/s, RSS) with b.ReportMetric and a summary line with
// b.Logf. Sizes can be changed with environment variables, see envInt.
package bench

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
)

// binary is the outpost binary, built once per run of the package.
var (
	buildOnce sync.Once
	binDir    string
	binary    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if benchPG.srv != nil {
		if err := benchPG.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop PostgreSQL:", err)
		}
	}
	os.Exit(code)
}

// benchPG is the PostgreSQL server of a run with
// OUTPOST_BENCH_DATABASE=postgres: started on first use (fsync on, so the
// numbers are honest), one new database per cluster.
var benchPG struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
	// url is the database the last server started with (pgstats_test.go).
	url string
}

// databaseArgs are the server flags that select the benchmark's store:
// the embedded SQLite database by default, or with
// OUTPOST_BENCH_DATABASE=postgres a new database on a PostgreSQL server the
// benchmark starts itself.
func databaseArgs(b *testing.B) []string {
	b.Helper()
	switch v := os.Getenv("OUTPOST_BENCH_DATABASE"); v {
	case "", "sqlite":
		return nil
	case "postgres":
		pgtest.Require(b)
		benchPG.once.Do(func() {
			// OUTPOST_BENCH_PG_SETTINGS adds server settings (name=value,
			// comma-separated), e.g. synchronous_commit=off to see what
			// the commit's flush costs a benchmark.
			settings := pgStatsSettings()
			if v := os.Getenv("OUTPOST_BENCH_PG_SETTINGS"); v != "" {
				settings = append(settings, strings.Split(v, ",")...)
			}
			benchPG.srv, benchPG.err = pgtest.Start(pgtest.Options{Fsync: true, Settings: settings})
		})
		if benchPG.err != nil {
			b.Fatal(benchPG.err)
		}
		benchPG.url = benchDatabase(b)
		return []string{"--database", benchPG.url}
	default:
		b.Fatalf("OUTPOST_BENCH_DATABASE=%q: want sqlite or postgres", v)
		return nil
	}
}

// benchDatabase creates a new database on the benchmark's PostgreSQL
// server and returns its URL: over TCP on 127.0.0.1, or with
// OUTPOST_BENCH_PG_SOCKET=1 through the server's Unix socket, as a server
// on the database's machine would connect.
func benchDatabase(b *testing.B) string {
	b.Helper()
	u := benchPG.srv.Database(b)
	if os.Getenv("OUTPOST_BENCH_PG_SOCKET") != "1" {
		return u
	}
	u, err := benchPG.srv.ViaSocket(u)
	if err != nil {
		b.Fatal(err)
	}
	return u
}

// outpostBinary builds the outpost binary the first time it is needed, or
// returns OUTPOST_BENCH_BINARY: a binary built beforehand, for a machine
// that has no Go toolchain.
func outpostBinary(b *testing.B) string {
	b.Helper()
	if p := os.Getenv("OUTPOST_BENCH_BINARY"); p != "" {
		// Absolute, so that a bare name found on PATH, or a relative
		// path, names the same file for every process started.
		found, err := exec.LookPath(p)
		if err == nil {
			found, err = filepath.Abs(found)
		}
		if err != nil {
			b.Fatalf("OUTPOST_BENCH_BINARY=%q: %v", p, err)
		}
		return found
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "outpost-bench-bin")
		if buildErr != nil {
			return
		}
		binary = filepath.Join(binDir, "outpost")
		cmd := exec.Command("go", "build", "-o", binary, "github.com/outpost-sh/outpost/cmd/outpost")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		buildErr = cmd.Run()
	})
	if buildErr != nil {
		b.Fatalf("build outpost: %v", buildErr)
	}
	return binary
}

// envInt reads a size knob such as OUTPOST_BENCH_SESSIONS, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// proc is a running outpost process; its output goes to a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// start runs the outpost binary in its own process group and stops it when
// the benchmark ends.
func start(b *testing.B, name string, env []string, args ...string) *proc {
	b.Helper()
	p := &proc{name: name, done: make(chan struct{}), log: filepath.Join(b.TempDir(), name+".log")}
	f, err := os.Create(p.log)
	if err != nil {
		b.Fatal(err)
	}
	p.cmd = exec.Command(outpostBinary(b), args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		b.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	b.Cleanup(func() {
		p.stop()
		if b.Failed() {
			out, _ := os.ReadFile(p.log)
			if len(out) > 8000 {
				out = out[len(out)-8000:]
			}
			b.Logf("--- tail of %s output ---\n%s", name, out)
		}
	})
	return p
}

// stop asks the process group to stop, killing it after a grace period.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// cluster is a real `outpost server` process with one outpost and a
// machine token for it.
type cluster struct {
	b       *testing.B
	url     string
	dataDir string
	server  *proc
	admin   *client.Client
	outpost string
	machine string // machine-scope token limited to the outpost
}

const adminToken = "opt_bench-admin-token-0123456789"

// startCluster starts `outpost server` on a free loopback port with its
// data in dataDir ("" means a fresh temporary directory) and the extra
// server flags (BenchmarkWatchers lifts the per-token bound on streams to
// hold thousands of queue watchers with one token).
func startCluster(b *testing.B, dataDir string, extra ...string) *cluster {
	b.Helper()
	if dataDir == "" {
		dataDir = b.TempDir()
	}
	addr := freeAddr(b)
	c := &cluster{b: b, url: "http://" + addr, dataDir: dataDir, outpost: "bench"}
	// OUTPOST_BENCH_HISTORY starts the server on a database of ended
	// sessions of the outpost, which then exists (history_test.go), to
	// measure with a long history behind the live work.
	seeded := seedHistory(b, dataDir)
	c.server = start(b, "server", []string{"OUTPOST_ADMIN_TOKEN=" + adminToken},
		append(append([]string{"server", "--listen", addr, "--data-dir", dataDir, "--log-level", "warn"}, databaseArgs(b)...), extra...)...)
	var err error
	if c.admin, err = client.New(c.url, adminToken); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for c.admin.Ready(ctx) != nil {
		select {
		case <-ctx.Done():
			b.Fatal("the server did not become ready")
		case <-c.server.done:
			b.Fatalf("the server exited: %v", c.server.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := c.admin.Outposts.Create(ctx, api.CreateOutpostRequest{Name: c.outpost, Platform: api.PlatformLinux}); err != nil && !seeded {
		b.Fatal(err)
	}
	tok, err := c.admin.Tokens.Create(ctx, api.CreateTokenRequest{Name: "bench-worker", Scopes: []string{api.ScopeMachine}, Outpost: c.outpost})
	if err != nil {
		b.Fatal(err)
	}
	c.machine = tok.Secret
	return c
}

// startWorker starts `outpost worker start` serving the cluster's outpost
// with workspace dir, and waits until it is watching the queue. The
// workspace is kept between sessions (--keep-workspace): BenchmarkDispatch's
// FIFO lives there, and clearing it is not what a benchmark measures.
//
// OUTPOST_BENCH_NO_PRESTART=1 starts workers with --no-prestart (each
// remote started at claim time), to measure what pre-starting saves.
func (c *cluster) startWorker(dir string) *proc {
	c.b.Helper()
	home := c.b.TempDir()
	args := []string{"worker", "start", "--outpost", c.outpost, "--dir", dir, "--data-dir", filepath.Join(home, "worker"), "--log-level", "warn", "--keep-workspace"}
	if os.Getenv("OUTPOST_BENCH_NO_PRESTART") == "1" {
		args = append(args, "--no-prestart")
	}
	w := start(c.b, "worker", []string{"OUTPOST_SERVER=" + c.url, "OUTPOST_TOKEN=" + c.machine, "HOME=" + home, "XDG_CONFIG_HOME=" + home}, args...)
	time.Sleep(500 * time.Millisecond) // machine detection, list, then watch
	select {
	case <-w.done:
		c.b.Fatalf("the worker exited: %v", w.err)
	default:
	}
	return w
}

// script creates a script session with the given steps.
func (c *cluster) script(ctx context.Context, title string, steps ...api.Step) (*api.Session, error) {
	return c.admin.Sessions.Create(ctx, api.CreateSessionRequest{
		Outpost: c.outpost, Title: title, Agent: api.Agent{Kind: api.AgentScript, Steps: steps},
	})
}

// waitGone waits until a session's queue entry is released and ended (the
// entry stays listed as terminated for the server's retention), or gone:
// the session ended and its worker released the claim.
func (c *cluster) waitGone(ctx context.Context, id string) error {
	for {
		e, err := c.admin.Queue.Get(ctx, id)
		if client.IsNotFound(err) || err == nil && e.Status.AcceptorID == nil && e.Status.SessionStatus == api.QueueSessionTerminated {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("session %s still queued: %w", id, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func freeAddr(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func step(tool, args string) api.Step { return api.Step{Tool: tool, Args: []byte(args)} }

// execStep is an exec step of a shell command.
func execStep(command string) api.Step {
	return step(api.ToolExec, fmt.Sprintf(`{"command":%q}`, command))
}

// percentile returns the nearest-rank q-quantile (0 < q ≤ 1) of sorted d.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// dist summarises durations.
type dist struct {
	n                       int
	min, p50, p90, p99, max time.Duration
	mean                    time.Duration
}

func summarize(d []time.Duration) dist {
	if len(d) == 0 {
		return dist{}
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return dist{n: len(s), min: s[0], p50: percentile(s, 0.5), p90: percentile(s, 0.9), p99: percentile(s, 0.99), max: s[len(s)-1], mean: sum / time.Duration(len(s))}
}

func (d dist) String() string {
	return fmt.Sprintf("n=%d min=%s p50=%s p90=%s p99=%s max=%s mean=%s", d.n, rd(d.min), rd(d.p50), rd(d.p90), rd(d.p99), rd(d.max), rd(d.mean))
}

// rd rounds a duration for display.
func rd(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// report adds p50/p99 (and mean) of d as metrics named prefix-p50-ms etc.
func report(b *testing.B, prefix string, d dist, unit string) {
	conv := ms
	if unit == "us" {
		conv = us
	}
	b.ReportMetric(conv(d.p50), prefix+"p50-"+unit)
	b.ReportMetric(conv(d.p99), prefix+"p99-"+unit)
}

// procMem reads VmHWM and VmRSS (bytes) of a process.
func procMem(pid int) (hwm, rss int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fields[0], 10, 64)
		switch k {
		case "VmHWM":
			hwm = n << 10
		case "VmRSS":
			rss = n << 10
		}
	}
	return hwm, rss, sc.Err()
}

// children lists the pids of a process's children.
func children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// follower records the arrival time of every event of a session, as a live
// SSE follower (client.Sessions.Follow) sees them.
type follower struct {
	mu     sync.Mutex
	events []arrival
	done   chan error
}

type arrival struct {
	at time.Time
	ev api.Event
}

// follow starts following a session; keep is called for each event and
// decides whether to store it (nil keeps every event).
func follow(ctx context.Context, c *client.Client, id string, keep func(api.Event, time.Time) bool) *follower {
	f := &follower{done: make(chan error, 1)}
	go func() {
		f.done <- c.Sessions.Follow(ctx, id, 0, func(ev api.Event) error {
			now := time.Now()
			if keep == nil || keep(ev, now) {
				f.mu.Lock()
				f.events = append(f.events, arrival{now, ev})
				f.mu.Unlock()
			}
			return nil
		})
	}()
	return f
}

func (f *follower) wait(ctx context.Context) ([]arrival, error) {
	select {
	case err := <-f.done:
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.events, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// discardLogger drops logs of in-process components.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// pooledHTTP is an HTTP client that keeps enough idle connections for n
// concurrent callers of one host.
func pooledHTTP(n int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = n * 2
	t.MaxIdleConnsPerHost = n * 2
	return &http.Client{Transport: t}
}

// machineInfo is logged once so a result line carries its context.
func machineInfo() string {
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, model, _ = strings.Cut(l, ":")
				model = strings.TrimSpace(model)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d CPUs, %s", model, runtime.NumCPU(), runtime.Version())
}

// apiScript is a create request for a script session without steps.
func apiScript(outpost, title string) api.CreateSessionRequest {
	return api.CreateSessionRequest{Outpost: outpost, Title: title, Agent: api.Agent{Kind: api.AgentScript}}
}
