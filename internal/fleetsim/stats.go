package fleetsim

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// latencies collects durations of one kind; safe for concurrent use.
type latencies struct {
	mu sync.Mutex // guards d
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// Dist is the distribution of one latency, in milliseconds.
type Dist struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

func (l *latencies) dist() Dist {
	d, _ := l.since(0)
	return d
}

// since is the distribution of the durations added after the first from,
// and how many there are in all: since(n) with the n it returned gives
// the next interval's.
func (l *latencies) since(from int) (Dist, int) {
	l.mu.Lock()
	n := len(l.d)
	s := slices.Clone(l.d[min(from, n):])
	l.mu.Unlock()
	return distOf(s), n
}

// distOf sorts s and returns its distribution.
func distOf(s []time.Duration) Dist {
	if len(s) == 0 {
		return Dist{}
	}
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return Dist{N: len(s), P50: ms(rank(s, 0.5)), P90: ms(rank(s, 0.9)), P99: ms(rank(s, 0.99)),
		Max: ms(s[len(s)-1]), Mean: ms(sum / time.Duration(len(s)))}
}

// rank is the nearest-rank q-quantile of sorted s.
func rank(s []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// errorLog counts errors by kind and keeps the first few messages.
type errorLog struct {
	total atomic.Int64
	mu    sync.Mutex // guards the following
	kinds map[string]int64
	first []string
}

const keptErrors = 10

func (e *errorLog) add(kind string, err error) {
	e.total.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kinds == nil {
		e.kinds = map[string]int64{}
	}
	e.kinds[kind]++
	if len(e.first) < keptErrors {
		e.first = append(e.first, kind+": "+err.Error())
	}
}

func (e *errorLog) snapshot() (map[string]int64, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := make(map[string]int64, len(e.kinds))
	for n, v := range e.kinds {
		k[n] = v
	}
	return k, slices.Clone(e.first)
}

// transports are the HTTP transports of the simulated fleet. Against
// servers on loopback addresses on Linux, connections are spread over the
// source addresses 127.0.0.2 to 127.0.0.9: one source address and the
// server's one port give at most ~28,000 ephemeral ports, fewer than
// 10,000 watchers plus their requests and remotes need while closed
// connections linger in TIME_WAIT.
type transports struct {
	clients []*http.Client
	next    atomic.Uint64
}

// sourceAddrs is how many loopback source addresses connections use.
const sourceAddrs = 8

// newTransports returns the transports to servers; tlsCfg (nil: the
// system's roots) is every connection's TLS configuration.
func newTransports(servers []string, perHost int, tlsCfg *tls.Config) *transports {
	local := runtime.GOOS == "linux"
	for _, u := range servers {
		local = local && loopback(u)
	}
	var srcs []net.Addr
	if local {
		for i := range sourceAddrs {
			srcs = append(srcs, &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))})
		}
	} else {
		srcs = []net.Addr{nil}
	}
	t := &transports{}
	for _, src := range srcs {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		if src != nil {
			d.LocalAddr = src
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = d.DialContext
		tr.MaxIdleConns = 0
		tr.MaxIdleConnsPerHost = perHost/len(srcs) + 64
		tr.IdleConnTimeout = 2 * time.Minute
		tr.ForceAttemptHTTP2 = false
		tr.DisableCompression = true
		if tlsCfg != nil {
			tr.TLSClientConfig = tlsCfg.Clone()
		}
		t.clients = append(t.clients, &http.Client{Transport: tr})
	}
	return t
}

// own returns an HTTP client with a transport of its own, as a worker
// process has: it keeps its idle connection between requests, so that a
// burst of requests from many workers reuses their warm connections
// rather than dialling thousands at once. Its source address is the next
// of the shared transports'.
func (t *transports) own() *http.Client {
	base := t.pick().Transport.(*http.Transport)
	tr := base.Clone()
	tr.MaxIdleConnsPerHost = 2
	return &http.Client{Transport: tr}
}

// pick returns the next HTTP client, round robin.
func (t *transports) pick() *http.Client {
	return t.clients[int(t.next.Add(1)-1)%len(t.clients)]
}

func (t *transports) close() {
	for _, c := range t.clients {
		c.CloseIdleConnections()
	}
}

// loopback reports whether rawURL's host is a loopback IP or localhost.
func loopback(rawURL string) bool {
	_, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return false
	}
	host, _, _ := strings.Cut(rest, "/")
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback() && ip.To4() != nil
}

// timed is the RoundTripper of one simulated worker: it times claims and
// heartbeats, counts failed requests, and reports the worker's first
// watch stream (open, below).
type timed struct {
	base  http.RoundTripper
	sim   *sim
	open  func()
	once  sync.Once
	watch atomic.Bool // a watch stream is open now

	// won is the last claim that won a session, until its runner takes
	// it: one slot, as a simulated worker runs one session at a time.
	mu  sync.Mutex // guards won
	won span
}

// span is when a request was sent and when its answer came.
type span struct{ start, end time.Time }

// takeWon returns the span of the last claim that won a session and
// forgets it.
func (t *timed) takeWon() span {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.won
	t.won = span{}
	return w
}

func (t *timed) RoundTrip(req *http.Request) (*http.Response, error) {
	kind := requestKind(req)
	start := time.Now()
	resp, err := t.base.RoundTrip(req)
	d := time.Since(start)
	if err != nil {
		if req.Context().Err() == nil {
			t.sim.errs.add(kind, err)
		}
		return resp, err
	}
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		t.sim.errs.add(kind, &statusError{code: resp.StatusCode, method: req.Method, path: req.URL.Path})
	}
	switch kind {
	case "claim":
		t.sim.claimAttempts.Add(1)
		if resp.StatusCode == http.StatusOK {
			// Timed once the runner knows the session (sim.claimed):
			// a claim waits at the server for a session to exist, and
			// that wait is not the claim's latency.
			t.sim.claims.Add(1)
			t.mu.Lock()
			t.won = span{start, start.Add(d)}
			t.mu.Unlock()
		} else if resp.StatusCode == http.StatusConflict {
			t.sim.conflicts.Add(1)
		}
	case "heartbeat":
		t.sim.heartbeats.Add(1)
		t.sim.lat.heartbeat.add(d)
	case "watch":
		if resp.StatusCode == http.StatusOK {
			t.sim.watching.Add(1)
			t.watch.Store(true)
			t.once.Do(t.open)
			resp.Body = &watchBody{ReadCloser: resp.Body, t: t}
		}
	}
	return resp, nil
}

// watchBody counts the end of a watch stream.
type watchBody struct {
	io.ReadCloser
	t    *timed
	once sync.Once
}

func (b *watchBody) Close() error {
	b.once.Do(func() {
		b.t.watch.Store(false)
		b.t.sim.watching.Add(-1)
	})
	return b.ReadCloser.Close()
}

type statusError struct {
	code         int
	method, path string
}

func (e *statusError) Error() string {
	return http.StatusText(e.code) + " (" + strconv.Itoa(e.code) + ") from " + e.method + " " + e.path
}

// requestKind names a fleet request for the counters.
func requestKind(req *http.Request) string {
	p := req.URL.Path
	switch {
	case req.Method == http.MethodGet && strings.HasPrefix(p, "/v1/queue") && req.URL.Query().Get("watch") == "true":
		return "watch"
	case req.Method == http.MethodPost && strings.HasSuffix(p, "/queue:claim"):
		return "claim"
	case req.Method == http.MethodPost && strings.HasSuffix(p, "/claim"):
		// A consumer claims by id to renew the claims it holds.
		return "renew"
	case strings.HasSuffix(p, "/release"):
		return "release"
	case strings.Contains(p, "/workers/") && req.Method == http.MethodDelete:
		return "goodbye"
	case strings.Contains(p, "/workers/"):
		return "heartbeat"
	case strings.HasPrefix(p, "/v1/queue"):
		return "queue"
	}
	return "other"
}

// waitCtx waits for d or ctx's end, whichever is first.
func waitCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
