// Package balancer is a round-robin TCP load balancer for tests that run
// several `outpost server` replicas behind one address, as a production
// balancer in TCP mode does.
//
// Each new connection goes to the next backend in turn; a backend that
// refuses the connection (a replica that is down) is skipped, as a
// balancer's connect-time health check would. The balancer also reads the
// head of each connection's first request, without changing a byte of what
// it forwards, to learn which backend each remote's gateway connection
// went to: Holder tells a test which replica holds a session's remote.
package balancer

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// maxHead is the most of a first request's head read to learn its path.
const maxHead = 16 << 10

// dialTimeout bounds the connect to one backend before the next is tried.
const dialTimeout = time.Second

// Balancer is a running balancer. Its methods are safe for concurrent use.
type Balancer struct {
	ln       net.Listener
	backends []string

	mu       sync.Mutex // guards the following
	next     int
	conns    map[net.Conn]struct{}
	gateways map[string]*gateway // session id → its latest gateway connection
	closed   bool

	wg sync.WaitGroup // the accept loop and every connection's copier
}

// gateway is a remote's gateway connection as the balancer saw it.
type gateway struct {
	backend int
	open    bool
}

// Start listens on listen (host:port; "" means a free loopback port) and
// balances over backends (host:port addresses).
func Start(listen string, backends []string) (*Balancer, error) {
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	b := &Balancer{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}, gateways: map[string]*gateway{}}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

// Addr is the balancer's host:port.
func (b *Balancer) Addr() string { return b.ln.Addr().String() }

// URL is the balancer's http:// URL.
func (b *Balancer) URL() string { return "http://" + b.Addr() }

// Close stops accepting, cuts every connection and waits for their
// copiers.
func (b *Balancer) Close() {
	b.ln.Close()
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// Holder returns the index of the backend holding session's open gateway
// connection, or -1 when none is open.
func (b *Balancer) Holder(session string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g := b.gateways[session]; g != nil && g.open {
		return g.backend
	}
	return -1
}

func (b *Balancer) serve() {
	defer b.wg.Done()
	for {
		in, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.handle(in)
		}()
	}
}

// dial connects to the next backend that accepts, round robin.
func (b *Balancer) dial() (net.Conn, int) {
	b.mu.Lock()
	first := b.next
	b.next = (b.next + 1) % len(b.backends)
	b.mu.Unlock()
	for i := range b.backends {
		k := (first + i) % len(b.backends)
		if out, err := net.DialTimeout("tcp", b.backends[k], dialTimeout); err == nil {
			return out, k
		}
	}
	return nil, -1
}

// track adds (or, with add false, removes) connections; it reports false
// when the balancer is closed.
func (b *Balancer) track(add bool, cs ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range cs {
		if add {
			b.conns[c] = struct{}{}
		} else {
			delete(b.conns, c)
		}
	}
	return !b.closed
}

func (b *Balancer) handle(in net.Conn) {
	out, backend := b.dial()
	if out == nil {
		in.Close()
		return
	}
	if !b.track(true, in, out) {
		in.Close()
		out.Close()
		return
	}
	defer b.track(false, in, out)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(in, out)
		in.Close()
	}()
	var g *gateway
	var head []byte // the first request's head, while it is incomplete
	sniffing := true
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if sniffing { // record before forwarding, so an answer never precedes it
				head = append(head, buf[:n]...)
				if bytes.Contains(head, []byte("\r\n\r\n")) || len(head) > maxHead {
					sniffing = false
					if session := gatewaySession(head); session != "" {
						g = &gateway{backend: backend, open: true}
						b.mu.Lock()
						b.gateways[session] = g
						b.mu.Unlock()
					}
					head = nil
				}
			}
			if _, werr := out.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	out.Close()
	<-done
	if g != nil {
		b.mu.Lock()
		g.open = false
		b.mu.Unlock()
	}
}

// gatewaySession returns the session a request head names when it is a
// remote's gateway connection, else "".
func gatewaySession(head []byte) string {
	i := bytes.Index(head, []byte("\r\n\r\n"))
	if i < 0 {
		return ""
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head[:i+4])))
	if err != nil || req.URL.Path != api.GatewayPath {
		return ""
	}
	return req.Header.Get(api.HeaderSessionID)
}
