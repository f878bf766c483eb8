package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outpost-sh/outpost/api"
)

// Defaults of the limits at the server's network edge.
const (
	// DefaultIdleTimeout closes keep-alive connections idle this long. It
	// is above the 90 s after which Go clients drop idle connections
	// themselves, so a client never reuses one the server is closing.
	DefaultIdleTimeout = 120 * time.Second
	// DefaultReadHeaderTimeout bounds reading a request's headers, and a
	// TLS handshake.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultMaxHeaderBytes bounds a request's line and headers.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxUnauthenticatedConns bounds the connections that have not
	// made an authenticated request yet.
	DefaultMaxUnauthenticatedConns = 1024
	// DefaultMaxStreamsPerToken bounds the event streams open at once with
	// one API token.
	DefaultMaxStreamsPerToken = 256

	// httpHeaderHardLimit is what net/http itself reads of a request's
	// headers at least; beyond it, it answers a text/plain 431 before any
	// handler runs. Below it, the handler answers the JSON 431.
	httpHeaderHardLimit = 1 << 20
	// streamRetryAfter is the Retry-After of a refused stream, in seconds.
	streamRetryAfter = 10
	// refusalLogEvery spaces the warnings about refused connections.
	refusalLogEvery = 10 * time.Second
)

// edgeMetrics count what the network edge refuses.
type edgeMetrics struct {
	connsRefused   prometheus.Counter
	connsShed      *prometheus.CounterVec
	streamsRefused prometheus.Counter
}

func newEdgeMetrics(reg registerer, unauthenticated func() float64) *edgeMetrics {
	m := &edgeMetrics{
		connsRefused: counter("outpost_http_connections_refused_total",
			"Connections closed on arrival because the unauthenticated ones open were all being served."),
		connsShed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_http_connections_shed_total",
			Help: "Unauthenticated connections closed to make room for a new one, by what they had sent: nothing, part of a request, or a request being served.",
		}, []string{"state"}),
		streamsRefused: counter("outpost_http_streams_refused_total",
			"Event streams refused with 429 because their token had too many open."),
	}
	reg.MustRegister(m.connsRefused, m.connsShed, m.streamsRefused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outpost_http_unauthenticated_connections",
		Help: "Open connections that have not made an authenticated request yet.",
	}, unauthenticated))
	return m
}

// connStage is how far an unauthenticated connection got, which says how
// soon the guard sheds it.
type connStage uint8

const (
	// stageSilent: nothing sent since it was accepted, or since its last
	// answer (an idle keep-alive connection). Shed first.
	stageSilent connStage = iota
	// stagePartial: part of a request sent — a TLS handshake, a request
	// line, headers.
	stagePartial
	// stageBusy: a request is being served. Shed last.
	stageBusy
	// stageGone: authenticated or closed, no longer counted.
	stageGone
)

// stageNames label outpost_http_connections_shed_total.
var stageNames = [...]string{stageSilent: "silent", stagePartial: "partial", stageBusy: "busy"}

// connGuard is a listener that bounds the connections which have not yet
// made an authenticated request. Past max, a new connection takes the
// place of the oldest unauthenticated one that sent nothing (else of the
// oldest that sent part of a request, else of the oldest being served),
// which is closed. A client that sends its request as soon as it connects
// — a health probe, an API client, a remote dialling the gateway — is
// therefore served however many idle or slow connections a flood holds
// open: to shed it a flood has to open max connections in the moment
// between its connect and its request. Connections of callers who
// authenticated (and gateway connections, which are upgraded only after
// their connect token passed) do not count and are never shed.
type connGuard struct {
	net.Listener
	max     int64 // <= 0: no bound
	unauth  atomic.Int64
	metrics *edgeMetrics
	log     func(open int64, shed string)
	lastLog atomic.Int64 // unix nanoseconds of the last shedding warning

	mu     sync.Mutex          // guards the following
	stages [stageGone]connList // unauthenticated connections by stage, oldest first
}

// connList is a doubly linked list of connections through their prev and
// next; the guard's mu guards it.
type connList struct{ head, tail *guardedConn }

func (l *connList) push(c *guardedConn) {
	c.prev, c.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (l *connList) remove(c *guardedConn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next = nil, nil
}

func (g *connGuard) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		// Accept is called by one goroutine, so the count cannot pass
		// max between the check and the increment.
		if g.max > 0 && g.unauth.Load() >= g.max {
			stage, ok := g.shedOldest()
			if !ok {
				_ = c.Close()
				if g.metrics != nil {
					g.metrics.connsRefused.Inc()
				}
				g.warn("refused")
				continue
			}
			if g.metrics != nil {
				g.metrics.connsShed.WithLabelValues(stageNames[stage]).Inc()
			}
			g.warn(stageNames[stage])
		}
		gc := &guardedConn{Conn: c, g: g}
		g.unauth.Add(1)
		g.mu.Lock()
		gc.stage = stageSilent
		gc.silent.Store(true)
		g.stages[stageSilent].push(gc)
		g.mu.Unlock()
		return gc, nil
	}
}

// warn logs, at most once per refusalLogEvery, that connections are shed.
func (g *connGuard) warn(what string) {
	now := time.Now().UnixNano()
	if last := g.lastLog.Load(); now-last >= int64(refusalLogEvery) && g.lastLog.CompareAndSwap(last, now) && g.log != nil {
		g.log(g.unauth.Load(), what)
	}
}

// shedOldest closes the unauthenticated connection that got least far,
// the oldest of its stage, and reports its stage; false when none is
// left to close.
func (g *connGuard) shedOldest() (connStage, bool) {
	g.mu.Lock()
	var victim *guardedConn
	stage := stageSilent
	for ; stage < stageGone && victim == nil; stage++ {
		for c := g.stages[stage].head; c != nil; {
			next := c.next
			if stage == stageSilent && hasPending(c.Conn) {
				// Its request is there, unread while the machine is
				// busy: it is not silent.
				g.stages[stageSilent].remove(c)
				c.stage = stagePartial
				c.silent.Store(false)
				g.stages[stagePartial].push(c)
				c = next
				continue
			}
			// A connection authenticating right now is left to it.
			if c.trusted.CompareAndSwap(false, true) {
				victim = c
				break
			}
			c = next
		}
	}
	if victim == nil {
		g.mu.Unlock()
		return 0, false
	}
	stage = victim.stage
	g.stages[stage].remove(victim)
	victim.stage = stageGone
	victim.silent.Store(false)
	g.mu.Unlock()
	g.unauth.Add(-1)
	_ = victim.Conn.Close()
	return stage, true
}

// move puts c, when still counted, at the end of stage's list.
func (g *connGuard) move(c *guardedConn, stage connStage) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.stage == stageGone {
		return
	}
	g.stages[c.stage].remove(c)
	c.stage = stage
	c.silent.Store(stage == stageSilent)
	g.stages[stage].push(c)
}

// guardedConn is a connection counted by its guard until it authenticates
// or closes.
type guardedConn struct {
	net.Conn
	g       *connGuard
	trusted atomic.Bool
	// silent mirrors stage == stageSilent, so that Read takes the guard's
	// lock only on the first bytes after a silence.
	silent atomic.Bool

	// The guard's mu guards the following.
	stage      connStage
	prev, next *guardedConn
}

// Read notes that c sent something: it is no longer silent.
func (c *guardedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.silent.Load() {
		c.g.move(c, stagePartial)
	}
	return n, err
}

// authenticated stops counting c as unauthenticated. It is safe on nil.
func (c *guardedConn) authenticated() {
	if c != nil && c.trusted.CompareAndSwap(false, true) {
		c.g.unauth.Add(-1)
		c.g.mu.Lock()
		if c.stage != stageGone {
			c.g.stages[c.stage].remove(c)
			c.stage = stageGone
		}
		c.silent.Store(false)
		c.g.mu.Unlock()
	}
}

func (c *guardedConn) Close() error {
	c.authenticated() // no longer counted either way
	return c.Conn.Close()
}

// guardedConnOf finds the guardedConn under c (under a *tls.Conn, say).
func guardedConnOf(c net.Conn) *guardedConn {
	for c != nil {
		switch x := c.(type) {
		case *guardedConn:
			return x
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}

type connKey struct{}

// connContext is the http.Server's ConnContext: requests carry their
// connection, so that authenticating one trusts the connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if gc := guardedConnOf(c); gc != nil {
		return context.WithValue(ctx, connKey{}, gc)
	}
	return ctx
}

// connState is the http.Server's ConnState hook: the gateway hijacks a
// connection only after its connect token passed, and a queue watch
// (queuewatch.go) only after its API token did, so a hijacked connection
// is an authenticated one.
//
// It also moves an unauthenticated connection between the guard's
// stages: being served once its request's headers are read, silent again
// once answered and waiting for the next request.
func connState(c net.Conn, st http.ConnState) {
	gc := guardedConnOf(c)
	if gc == nil {
		return
	}
	switch st {
	case http.StateHijacked:
		gc.authenticated()
	case http.StateActive:
		gc.g.move(gc, stageBusy)
	case http.StateIdle:
		gc.g.move(gc, stageSilent)
	}
}

// markAuthenticated trusts the connection of a request whose token passed.
func markAuthenticated(ctx context.Context) {
	gc, _ := ctx.Value(connKey{}).(*guardedConn)
	gc.authenticated()
}

// streamLimiter bounds the event streams (queue watches, transcript
// follows) one API token holds open at once.
type streamLimiter struct {
	max     int // <= 0: no bound
	metrics *edgeMetrics

	mu   sync.Mutex     // guards the following
	open map[string]int // streams by token id
}

// acquire counts a new stream of the request's token, or refuses it with
// 429 and a Retry-After. The caller runs release when the stream ends.
func (l *streamLimiter) acquire(w http.ResponseWriter, r *http.Request) (release func(), err error) {
	if l.max <= 0 {
		return func() {}, nil
	}
	id := principalFrom(r.Context()).tokenID
	l.mu.Lock()
	if l.open[id] >= l.max {
		l.mu.Unlock()
		if l.metrics != nil {
			l.metrics.streamsRefused.Inc()
		}
		w.Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		return nil, &httpError{http.StatusTooManyRequests, api.CodeTooManyRequests,
			fmt.Sprintf("This token already has %d event streams open, the most one token may hold; close one or retry in %d seconds.", l.max, streamRetryAfter)}
	}
	l.open[id]++
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.open[id]--; l.open[id] <= 0 {
				delete(l.open, id)
			}
		})
	}, nil
}

// withRequestChecks answers requests net/http accepts but this API does
// not with the JSON error envelope, before any route sees them: headers
// larger than MaxHeaderBytes (431), and paths that are not canonical —
// with "." or ".." segments or repeated slashes, which ServeMux would
// otherwise answer with an HTML redirect (400).
func (s *Server) withRequestChecks(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := headerSize(r); n > s.opts.MaxHeaderBytes {
			w.Header().Set("Connection", "close")
			s.writeError(w, r, &httpError{http.StatusRequestHeaderFieldsTooLarge, api.CodeTooLarge,
				fmt.Sprintf("The request line and headers are %d bytes, more than the %d this server accepts.", n, s.opts.MaxHeaderBytes)})
			return
		}
		if p := r.URL.Path; p == "" || p[0] != '/' || cleanPath(p) != p {
			s.writeError(w, r, errBadRequest("The path %q is not canonical: it must start with '/' and hold no '.' or '..' segments and no repeated slashes.", p))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// headerSize is the size of a request's line and headers as sent.
func headerSize(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	n += len("Host: ") + len(r.Host) + 2
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n + 2
}

// cleanPath is path.Clean keeping a trailing slash, as ServeMux does.
func cleanPath(p string) string {
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// noRoute answers a request no route took: 405 with Allow when the path
// has routes for other methods, 404 otherwise. catchAll is the pattern this
// handler is registered under.
func (s *Server) noRoute(mux *http.ServeMux, catchAll string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		allow := allowedMethods(mux, r, catchAll)
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			s.writeError(w, r, &httpError{http.StatusMethodNotAllowed, api.CodeMethodNotAllowed,
				fmt.Sprintf("%s is not allowed on %s; use %s.", r.Method, r.URL.Path, strings.Join(allow, " or "))})
			return
		}
		s.writeError(w, r, errNotFound("No such endpoint: %s %s.", r.Method, r.URL.Path))
	}
}
