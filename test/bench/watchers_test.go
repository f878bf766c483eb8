//go:build !windows

package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// BenchmarkWatchers measures idle queue watchers on one real server: N
// watch streams (OUTPOST_BENCH_WATCHERS, default 10,000; raw HTTP/1.1 SSE
// connections spread over the loopback source addresses 127.0.0.2–9) on
// outpost "bench".
//
//   - Latency: R rounds (OUTPOST_BENCH_WATCHER_ROUNDS, default 5), each
//     creating one session on "bench"; per watcher, the time from the POST
//     returned to the stream carrying the session's event (p50/p99/max over
//     all watchers and rounds).
//   - Memory: the server's RSS with the N watchers connected minus its RSS
//     before they connected, divided by N.
//   - Other outposts: the server's CPU time (utime+stime from
//     /proc/PID/stat) per session for K sessions created one after another
//     on outpost "other" (OUTPOST_BENCH_WATCHER_OTHER, default 200), once
//     before the watchers connect and once with them.
func BenchmarkWatchers(b *testing.B) {
	n := envInt("OUTPOST_BENCH_WATCHERS", 10000)
	rounds := envInt("OUTPOST_BENCH_WATCHER_ROUNDS", 5)
	k := envInt("OUTPOST_BENCH_WATCHER_OTHER", 200)
	raiseNoFile(b)
	for range b.N {
		c := startCluster(b, "", "--max-streams-per-token", "0")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		if _, err := c.admin.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "other", Platform: api.PlatformLinux}); err != nil {
			b.Fatal(err)
		}
		pid := c.server.cmd.Process.Pid
		// Warm the server's paths (and let its heap settle) before the
		// baselines.
		if err := warm(ctx, c, "bench", "other"); err != nil {
			b.Fatal(err)
		}
		cpuIdle, err := otherCost(ctx, c, pid, k)
		if err != nil {
			b.Fatal(err)
		}
		_, rss0, err := procMem(pid)
		if err != nil {
			b.Fatal(err)
		}
		ws := &watcherSet{n: n}
		connected, rss1, err := connectWatchers(ctx, c, pid, ws)
		if err != nil {
			b.Fatal(err)
		}
		perWatcher := float64(rss1-rss0) / float64(n)

		var all []time.Duration
		var worst, roundCPU time.Duration
		for r := range rounds {
			round := ws.arm()
			cpu0, err := procCPU(pid)
			if err != nil {
				b.Fatal(err)
			}
			s, err := c.scriptOn(ctx, "bench", fmt.Sprintf("round %d", r))
			if err != nil {
				b.Fatal(err)
			}
			posted := time.Now()
			lat, err := ws.wait(ctx, round, s.Metadata.SessionID, posted)
			if err != nil {
				b.Fatal(err)
			}
			cpu1, err := procCPU(pid)
			if err != nil {
				b.Fatal(err)
			}
			roundCPU += cpu1 - cpu0
			d := summarize(lat)
			b.Logf("round %d: %s; server CPU %s", r, d, cpu1-cpu0)
			worst = max(worst, d.max)
			all = append(all, lat...)
		}
		cpuWatched, err := otherCost(ctx, c, pid, k)
		if err != nil {
			b.Fatal(err)
		}
		_, rss2, _ := procMem(pid)
		if err := ws.check(); err != nil {
			b.Fatal(err)
		}
		d := summarize(all)
		b.Logf("watchers=%d connected in %s; server RSS %d MiB before, %d MiB with them, %d MiB after the rounds",
			n, rd(connected), rss0>>20, rss1>>20, rss2>>20)
		b.Logf("latency POST returned → event at every watcher, %d rounds: %s; server CPU %.1f ms per round (%.1f µs per watcher)",
			rounds, d, ms(roundCPU)/float64(rounds), us(roundCPU)/float64(rounds*n))
		b.Logf("server CPU per session on another outpost (%d sessions): %.2f ms without watchers, %.2f ms with %d",
			k, cpuIdle, cpuWatched, n)
		b.Logf("SUMMARY watchers=%d p50=%s p99=%s max=%s rss-per-watcher=%.1fKiB other-outpost-cpu=%.2fms/session (%.2f without watchers)",
			n, rd(d.p50), rd(d.p99), rd(worst), perWatcher/1024, cpuWatched, cpuIdle)
		report(b, "watch-", d, "ms")
		b.ReportMetric(ms(worst), "watch-max-ms")
		b.ReportMetric(perWatcher/1024, "KiB/watcher")
		b.ReportMetric(ms(roundCPU)/float64(rounds), "server-cpu-ms/round")
		b.ReportMetric(cpuWatched, "other-cpu-ms/session")
		b.ReportMetric(cpuWatched-cpuIdle, "other-cpu-ms/session-over-idle")
		ws.close()
	}
}

// BenchmarkHeldWatchers is BenchmarkWatchers's cost for workers' watches:
// N streams (OUTPOST_BENCH_WATCHERS) on outpost "bench", each held by an
// acceptor of its own (held_by), as `outpost worker start` watches while
// it claims through waiting requests. It reports the server's CPU per
// session created on "bench" without the watchers and with them (K
// sessions each, OUTPOST_BENCH_WATCHER_OTHER), and their memory; the
// streams carry none of those sessions' changes (they are nobody's).
func BenchmarkHeldWatchers(b *testing.B) {
	n := envInt("OUTPOST_BENCH_WATCHERS", 10000)
	k := envInt("OUTPOST_BENCH_WATCHER_OTHER", 200)
	raiseNoFile(b)
	for range b.N {
		c := startCluster(b, "", "--max-streams-per-token", "0")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		pid := c.server.cmd.Process.Pid
		if err := warm(ctx, c, "bench"); err != nil {
			b.Fatal(err)
		}
		alone, err := sessionCost(ctx, c, pid, "bench", k)
		if err != nil {
			b.Fatal(err)
		}
		_, rss0, err := procMem(pid)
		if err != nil {
			b.Fatal(err)
		}
		ws := &watcherSet{n: n, held: true}
		connected, rss1, err := connectWatchers(ctx, c, pid, ws)
		if err != nil {
			b.Fatal(err)
		}
		watched, err := sessionCost(ctx, c, pid, "bench", k)
		if err != nil {
			b.Fatal(err)
		}
		if err := ws.check(); err != nil {
			b.Fatal(err)
		}
		if got := ws.changes.Load(); got != 0 {
			b.Fatalf("held watchers carried %d changes of sessions nobody of them holds", got)
		}
		perWatcher := float64(rss1-rss0) / float64(n)
		b.Logf("held watchers=%d connected in %s; server RSS %d MiB before, %d MiB with them", n, rd(connected), rss0>>20, rss1>>20)
		b.Logf("SUMMARY held-watchers=%d server-cpu=%.2fms/session (%.2f without watchers) rss-per-watcher=%.1fKiB",
			n, watched, alone, perWatcher/1024)
		b.ReportMetric(watched, "cpu-ms/session")
		b.ReportMetric(watched-alone, "cpu-ms/session-over-alone")
		b.ReportMetric(perWatcher/1024, "KiB/watcher")
		ws.close()
	}
}

// connectWatchers connects ws's streams to outpost "bench" from the
// queue's current cursor, and returns how long that took and the server's
// resident memory with them connected.
func connectWatchers(ctx context.Context, c *cluster, pid int, ws *watcherSet) (time.Duration, int64, error) {
	list, err := c.admin.Queue.List(ctx, client.QueueFilter{Outpost: "bench", Order: "priority"})
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	if err := ws.connect(ctx, c, "bench", list.Cursor); err != nil {
		return 0, 0, err
	}
	connected := time.Since(t0)
	_, rss, err := procMem(pid)
	return connected, rss, err
}

// warm creates 20 sessions on each outpost, so that the server's paths
// are warm and its heap settled before a baseline.
func warm(ctx context.Context, c *cluster, outposts ...string) error {
	for i := range 20 {
		for _, o := range outposts {
			if _, err := c.scriptOn(ctx, o, fmt.Sprintf("warm %d", i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// scriptOn creates a one-step script session on outpost.
func (c *cluster) scriptOn(ctx context.Context, outpost, title string) (*api.Session, error) {
	return c.admin.Sessions.Create(ctx, api.CreateSessionRequest{
		Outpost: outpost, Title: title, Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep("true")}},
	})
}

// otherCost creates k sessions on outpost "other" one after another and
// returns the server's CPU milliseconds per session.
func otherCost(ctx context.Context, c *cluster, pid, k int) (float64, error) {
	return sessionCost(ctx, c, pid, "other", k)
}

// sessionCost creates k sessions on outpost one after another and returns
// the server's CPU milliseconds per session.
func sessionCost(ctx context.Context, c *cluster, pid int, outpost string, k int) (float64, error) {
	before, err := procCPU(pid)
	if err != nil {
		return 0, err
	}
	for i := range k {
		if _, err := c.scriptOn(ctx, outpost, fmt.Sprintf("%s %d", outpost, i)); err != nil {
			return 0, err
		}
	}
	after, err := procCPU(pid)
	if err != nil {
		return 0, err
	}
	return ms(after-before) / float64(k), nil
}

// raiseNoFile lifts the soft file-descriptor limit to the hard one: every
// watcher is a socket here and one in the server (which Go's runtime
// raises by itself).
func raiseNoFile(b *testing.B) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		b.Fatal(err)
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		b.Fatal(err)
	}
	if want := uint64(envInt("OUTPOST_BENCH_WATCHERS", 10000) + 200); l.Cur < want {
		b.Fatalf("RLIMIT_NOFILE is %d; %d watchers need about %d", l.Cur, want-200, want)
	}
}

// watcherSet is n raw SSE watch connections.
type watcherSet struct {
	n int
	// held: each stream is held by an acceptor of its own (held_by), as
	// a worker's is; changes counts the changes (not bookmarks) streams
	// carried.
	held    bool
	changes atomic.Int64
	conns   []net.Conn
	// started frees a connecting slot (connect).
	started func()
	ready   sync.WaitGroup
	wg      sync.WaitGroup
	cur     atomic.Pointer[watchRound]
	// ended counts streams that ended (EOF, error) before close.
	ended  atomic.Int64
	closed atomic.Bool
	errMu  sync.Mutex
	err    error
}

// watchRound is one created session: arrival[i] is when watcher i saw it
// (UnixNano; 0 until then).
type watchRound struct {
	arrival []atomic.Int64
	line    [][]byte // the event each watcher saw first
	left    atomic.Int64
	done    chan struct{}
}

func (ws *watcherSet) connect(ctx context.Context, c *cluster, outpost, cursor string) error {
	host := strings.TrimPrefix(c.url, "http://")
	request := func(i int) []byte {
		held := ""
		if ws.held {
			held = fmt.Sprintf("&%s=watcher-%05d", api.QueryHeldBy, i)
		}
		return []byte("GET /v1/queue?watch=true&outpost=" + outpost + "&cursor=" + cursor + held + " HTTP/1.1\r\nHost: " + host +
			"\r\nAuthorization: Bearer " + adminToken + "\r\nAccept: text/event-stream\r\n\r\n")
	}
	ws.conns = make([]net.Conn, ws.n)
	ws.ready.Add(ws.n)
	// At most 64 connecting at once: the server closes new connections
	// while 1,024 are open and unauthenticated.
	sem := make(chan struct{}, 64)
	ws.started = func() { <-sem }
	var dialErr atomic.Pointer[error]
	for i := range ws.n {
		if e := dialErr.Load(); e != nil {
			return *e
		}
		sem <- struct{}{}
		d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%8))}}
		go func() {
			conn, err := d.DialContext(ctx, "tcp", host)
			if err == nil {
				_, err = conn.Write(request(i))
			}
			if err != nil {
				err = fmt.Errorf("watcher %d: %w", i, err)
				dialErr.Store(&err)
				ws.ready.Done()
				ws.started()
				return
			}
			ws.conns[i] = conn
			ws.wg.Add(1)
			go ws.read(i, conn)
		}()
	}
	done := make(chan struct{})
	go func() { ws.ready.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("watchers connecting: %w", ctx.Err())
	}
	if e := dialErr.Load(); e != nil {
		return *e
	}
	return ws.check()
}

// read follows one stream: ready at its first comment, then it records
// the arrival of the current round's session. The session id is looked for
// on every line, so chunked framing does not matter.
func (ws *watcherSet) read(i int, conn net.Conn) {
	defer ws.wg.Done()
	br := bufio.NewReaderSize(conn, 1024)
	ready := false
	for {
		line, err := br.ReadSlice('\n')
		if err != nil && err != bufio.ErrBufferFull {
			if !ready {
				ws.fail(fmt.Errorf("watcher %d: stream ended before it started: %w", i, err))
				ws.ready.Done()
				ws.started()
			} else if !ws.closed.Load() {
				ws.ended.Add(1)
				ws.fail(fmt.Errorf("watcher %d: stream ended: %w", i, err))
			}
			return
		}
		if !ready {
			if bytes.HasPrefix(line, []byte("HTTP/1.1 ")) && !bytes.HasPrefix(line, []byte("HTTP/1.1 200")) {
				ws.fail(fmt.Errorf("watcher %d: %s", i, bytes.TrimSpace(line)))
			}
			if bytes.HasPrefix(line, []byte(": watching")) {
				ready = true
				ws.ready.Done()
				ws.started()
			}
			continue
		}
		// Nothing but the round's session changes outpost "bench" while
		// a round is armed, so its first event is the session's; wait
		// checks that it is.
		if bytes.Contains(line, []byte(`"type":"MODIFIED"`)) || bytes.Contains(line, []byte(`"type":"DELETED"`)) {
			ws.changes.Add(1)
		}
		r := ws.cur.Load()
		if r == nil || !bytes.Contains(line, []byte(`"type":`)) {
			continue
		}
		if r.arrival[i].CompareAndSwap(0, time.Now().UnixNano()) {
			r.line[i] = bytes.Clone(line)
			if r.left.Add(-1) == 0 {
				close(r.done)
			}
		}
	}
}

func (ws *watcherSet) fail(err error) {
	ws.errMu.Lock()
	defer ws.errMu.Unlock()
	if ws.err == nil {
		ws.err = err
	}
}

func (ws *watcherSet) check() error {
	ws.errMu.Lock()
	defer ws.errMu.Unlock()
	return ws.err
}

// arm starts a round, before its session is created.
func (ws *watcherSet) arm() *watchRound {
	r := &watchRound{arrival: make([]atomic.Int64, ws.n), line: make([][]byte, ws.n), done: make(chan struct{})}
	r.left.Store(int64(ws.n))
	ws.cur.Store(r)
	return r
}

// wait returns each watcher's latency from posted once all saw the round's
// session id. An event that arrived before the POST returned is timed at 0.
func (ws *watcherSet) wait(ctx context.Context, r *watchRound, id string, posted time.Time) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("%d of %d watchers did not see session %s: %w (%v)", r.left.Load(), ws.n, id, ctx.Err(), ws.check())
	}
	out := make([]time.Duration, ws.n)
	for i := range out {
		if !bytes.Contains(r.line[i], []byte(id)) {
			return nil, fmt.Errorf("watcher %d saw %q, not session %s", i, r.line[i], id)
		}
		out[i] = max(time.Duration(r.arrival[i].Load()-posted.UnixNano()), 0)
	}
	return out, nil
}

func (ws *watcherSet) close() {
	ws.closed.Store(true)
	for _, c := range ws.conns {
		if c != nil {
			c.Close()
		}
	}
	ws.wg.Wait()
}
