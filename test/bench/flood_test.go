//go:build !windows

package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
)

// BenchmarkConnFlood measures what a flood of unauthenticated connections
// that send nothing (nine in ten) or half a request line (one in ten)
// does to the clients that matter: for each flood size, a health probe,
// an authenticated API request and a remote's gateway dial, each on a new
// connection, are timed without the flood and then while it is held open
// (every connection the server closes is opened again at once).
//
//	go test -run '^$' -bench ConnFlood -benchtime 1x ./test/bench/
//	# OUTPOST_BENCH_FLOOD (1100 and 2000), OUTPOST_BENCH_FLOOD_PROBES (100)
func BenchmarkConnFlood(b *testing.B) {
	sizes := []int{1100, 2000}
	if n := envInt("OUTPOST_BENCH_FLOOD", 0); n > 0 {
		sizes = []int{n}
	}
	probes := envInt("OUTPOST_BENCH_FLOOD_PROBES", 100)
	raiseNoFileTo(b, uint64(max(sizes[0], sizes[len(sizes)-1])+500))
	for _, n := range sizes {
		b.Run(fmt.Sprintf("conns=%d", n), func(b *testing.B) {
			for b.Loop() {
				runConnFlood(b, n, probes)
			}
		})
	}
}

func runConnFlood(b *testing.B, n, probes int) {
	c := startCluster(b, "")
	addr := strings.TrimPrefix(c.url, "http://")
	ctx := b.Context()
	s, err := c.script(ctx, "flood", execStep("sleep 600"))
	if err != nil {
		b.Fatal(err)
	}
	claim, err := c.admin.Queue.Claim(ctx, s.Metadata.SessionID, "bench-flood")
	if err != nil {
		b.Fatal(err)
	}
	kinds := floodProbes(c, addr, s.Metadata.SessionID, claim.Status.ConnectToken)

	before := measureProbes(kinds, probes)
	f := startFloodProcess(b, addr, n)
	during := measureProbes(kinds, probes)
	reopened := f.stop(b)

	for i, k := range kinds {
		b.Logf("%-22s no flood: %s; %d conns held: %s", k.name, before[i], n, during[i])
		b.ReportMetric(ms(during[i].p50), k.short+"-p50-ms")
		b.ReportMetric(ms(during[i].p99), k.short+"-p99-ms")
		b.ReportMetric(float64(during[i].failed), k.short+"-failed")
	}
	b.Logf("SUMMARY flood of %d connections (%d reopened after the server closed them): %s", n, reopened, summaryLine(kinds, during))
}

// probeKind is one kind of client request timed under the flood.
type probeKind struct {
	name, short string
	do          func(ctx context.Context) error
}

func floodProbes(c *cluster, addr, sessionID, connectToken string) []probeKind {
	// A new connection per request: a flood keeps out new connections.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(ctx context.Context, path, token string) error {
		req, _ := http.NewRequestWithContext(ctx, "GET", c.url+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	return []probeKind{
		{"health probe", "healthz", func(ctx context.Context) error { return get(ctx, "/healthz", "") }},
		{"authenticated request", "api", func(ctx context.Context) error { return get(ctx, "/v1/outposts", adminToken) }},
		{"gateway dial", "gateway", func(ctx context.Context) error {
			h := http.Header{}
			h.Set("Authorization", "Bearer "+connectToken)
			h.Set(api.HeaderSessionID, sessionID)
			ws, _, err := websocket.Dial(ctx, "ws://"+addr+api.GatewayPath, &websocket.DialOptions{HTTPClient: hc, HTTPHeader: h})
			if err != nil {
				return err
			}
			ws.CloseNow()
			return nil
		}},
	}
}

// probeStats are the latencies of the probes of one kind that were
// answered, and how many were not (an error, or no answer in 5 s).
type probeStats struct {
	p50, p99, max time.Duration
	ok, failed    int
	firstErr      error
}

func (s probeStats) String() string {
	if s.ok == 0 {
		return fmt.Sprintf("%d of %d answered", s.ok, s.ok+s.failed)
	}
	str := fmt.Sprintf("%d of %d answered, p50 %s, p99 %s, max %s", s.ok, s.ok+s.failed, rd(s.p50), rd(s.p99), rd(s.max))
	if s.firstErr != nil {
		str += fmt.Sprintf(" (first failure: %v)", s.firstErr)
	}
	return str
}

// measureProbes runs n probes of each kind in turn, 20 ms apart.
func measureProbes(kinds []probeKind, n int) []probeStats {
	lat := make([][]time.Duration, len(kinds))
	out := make([]probeStats, len(kinds))
	for range n {
		for i, k := range kinds {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			start := time.Now()
			err := k.do(ctx)
			took := time.Since(start)
			cancel()
			if err != nil {
				if out[i].failed == 0 {
					out[i].firstErr = err
				}
				out[i].failed++
			} else {
				lat[i] = append(lat[i], took)
			}
			time.Sleep(20 * time.Millisecond) // probes are spaced in time, not waiting for anything
		}
	}
	for i, d := range lat {
		sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
		out[i].ok = len(d)
		if len(d) > 0 {
			out[i].p50, out[i].p99, out[i].max = percentile(d, 0.5), percentile(d, 0.99), d[len(d)-1]
		}
	}
	return out
}

func summaryLine(kinds []probeKind, st []probeStats) string {
	var parts []string
	for i, k := range kinds {
		parts = append(parts, k.short+" "+st[i].String())
	}
	return strings.Join(parts, "; ")
}

// flood holds n connections to addr open: nine in ten send nothing, one
// in ten half a request line; each the server closes is opened again.
type flood struct {
	addr     string
	n        int64
	open     atomic.Int64
	reopened atomic.Int64
	done     chan struct{}
	wg       sync.WaitGroup
}

func startFlood(addr string, n int) *flood {
	f := &flood{addr: addr, n: int64(n), done: make(chan struct{})}
	for i := range n {
		f.wg.Go(func() { f.hold(i%10 == 0) })
	}
	return f
}

// hold keeps one connection open until the flood stops.
func (f *flood) hold(partial bool) {
	first := true
	for {
		select {
		case <-f.done:
			return
		default:
		}
		c, err := net.DialTimeout("tcp", f.addr, 5*time.Second)
		if err != nil {
			select {
			case <-f.done:
				return
			case <-time.After(10 * time.Millisecond): // the backlog is full: try again
			}
			continue
		}
		if partial {
			_, _ = io.WriteString(c, "GET /heal")
		}
		if first {
			f.open.Add(1)
			first = false
		} else {
			f.reopened.Add(1)
		}
		stop := make(chan struct{})
		go func() {
			select {
			case <-f.done:
				c.Close()
			case <-stop:
			}
		}()
		// Until the server closes it (or the flood stops).
		var buf [512]byte
		for {
			if _, err := c.Read(buf[:]); err != nil {
				break
			}
		}
		close(stop)
		c.Close()
	}
}

// waitOpen waits until every connection of the flood was opened once.
func (f *flood) waitOpen(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		if f.open.Load() >= f.n {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("the flood's connections did not all open")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// floodProcess is the flood run by another process, as an attacker is:
// in this one its thousands of goroutines would delay the probes' own.
type floodProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// floodChildEnv makes the test binary a flood (TestFloodChild).
const floodChildEnv = "OUTPOST_BENCH_FLOOD_CHILD"

// startFloodProcess starts the test binary as a flood of n connections
// to addr and waits until each was opened once.
func startFloodProcess(b *testing.B, addr string, n int) *floodProcess {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFloodChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d", floodChildEnv, addr, n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	f := &floodProcess{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	for f.out.Scan() {
		if f.out.Text() == "open" {
			return f
		}
	}
	b.Fatal("the flood process ended before its connections were open")
	return nil
}

// stop ends the flood and returns how many connections it opened again
// after the server closed them.
func (f *floodProcess) stop(b *testing.B) int64 {
	b.Helper()
	f.stdin.Close()
	var reopened int64
	for f.out.Scan() {
		if v, ok := strings.CutPrefix(f.out.Text(), "reopened "); ok {
			reopened, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if err := f.cmd.Wait(); err != nil {
		b.Fatalf("flood process: %v", err)
	}
	return reopened
}

// TestFloodChild is the flood process of BenchmarkConnFlood; it does
// nothing unless that benchmark started it. It prints "open" once every
// connection was opened, holds them until its stdin closes, then prints
// how many it reopened.
func TestFloodChild(t *testing.T) {
	spec := os.Getenv(floodChildEnv)
	if spec == "" {
		t.Skip("only run by BenchmarkConnFlood")
	}
	addr, count, _ := strings.Cut(spec, ",")
	n, err := strconv.Atoi(count)
	if err != nil {
		t.Fatal(err)
	}
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err == nil {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	f := startFlood(addr, n)
	if err := f.waitOpen(context.Background(), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	fmt.Println("open")
	_, _ = io.Copy(io.Discard, os.Stdin)
	f.stop()
	fmt.Printf("reopened %d\n", f.reopened.Load())
}

// raiseNoFileTo lifts the soft file-descriptor limit to the hard one and
// checks it holds want: each flood connection is a socket here.
func raiseNoFileTo(b *testing.B, want uint64) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		b.Fatal(err)
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		b.Fatal(err)
	}
	if l.Cur < want {
		b.Fatalf("RLIMIT_NOFILE is %d; the flood needs about %d", l.Cur, want)
	}
}

func (f *flood) stop() {
	close(f.done)
	f.wg.Wait()
}
