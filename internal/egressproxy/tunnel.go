package egressproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-sh/outpost/internal/egress"
)

// tunnel is one open connection through the proxy.
type tunnel struct {
	id   string
	t    target
	addr netip.Addr
	rule string
	up   net.Conn // the destination

	start   time.Time
	out, in atomic.Int64 // bytes client→destination, destination→client
	last    atomic.Int64 // UnixNano of the last byte moved

	mu      sync.Mutex // guards up and addr (while they are set), client, closed, revoked
	client  net.Conn
	closed  bool
	revoked string
}

// setUp sets the destination connection; false (and it is closed) when
// the tunnel was closed meanwhile.
func (tn *tunnel) setUp(c net.Conn, addr netip.Addr) bool {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	tn.up, tn.addr = c, addr
	if tn.closed {
		_ = c.Close()
	}
	return !tn.closed
}

func (tn *tunnel) setClient(c net.Conn) bool {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	tn.client = c
	return !tn.closed
}

// close closes both ends; the copy loops then return.
func (tn *tunnel) close() {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	tn.closed = true
	if tn.client != nil {
		_ = tn.client.Close()
	}
	if tn.up != nil {
		_ = tn.up.Close()
	}
}

func (tn *tunnel) revoke(why string) {
	tn.mu.Lock()
	if tn.revoked == "" {
		tn.revoked = why
	}
	tn.mu.Unlock()
	tn.close()
}

func (tn *tunnel) revokedWhy() string {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return tn.revoked
}

// dialled is the destination address once dialled.
func (tn *tunnel) dialled() netip.Addr {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	if tn.up == nil {
		return netip.Addr{}
	}
	return tn.addr
}

func (tn *tunnel) touch() { tn.last.Store(time.Now().UnixNano()) }

// connect answers a CONNECT: 200, then a look at the client's first bytes
// (a ClientHello must name the tunnel's host), then bytes both ways.
func (p *Proxy) connect(w http.ResponseWriter, tn *tunnel) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = tn.up.Close()
		http.Error(w, "the proxy cannot open a tunnel on this connection", http.StatusInternalServerError)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		_ = tn.up.Close()
		return
	}
	tn.start = time.Now()
	tn.touch()
	if !tn.setClient(conn) {
		tn.close()
		return
	}
	defer tn.close()
	// From here the connection was allowed and dialled: it is reported as
	// allowed, with its bytes, however it ends, unless its ClientHello
	// named another host.
	fronted := false
	defer func() {
		if !fronted {
			p.report(tn)
		}
	}()
	_ = conn.SetWriteDeadline(time.Now().Add(p.o.HandshakeTimeout))
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	_ = conn.SetWriteDeadline(time.Time{})
	first, err := p.firstBytes(conn, brw.Reader)
	if err != nil {
		return
	}
	if tn.t.host != "" && len(first) > 0 {
		// A ClientHello must name the tunnel's host. One without a name,
		// or split so that its first record holds no whole ClientHello,
		// is refused: the server could read another name from it.
		sni, _ := egress.TLSServerName(first)
		switch {
		case sni == "":
			fronted = true
			p.deny(tn.id, tn.t, tn.addr, "the TLS ClientHello names no server (SNI), or is split so that it cannot be read")
			return
		case !strings.EqualFold(strings.TrimSuffix(sni, "."), tn.t.host):
			fronted = true
			p.deny(tn.id, target{host: strings.ToLower(sni), port: tn.t.port}, tn.addr,
				"the TLS server name "+sni+" is not the tunnel's host "+tn.t.host)
			return
		}
	}
	if len(first) > 0 {
		if _, err := tn.up.Write(first); err != nil {
			return
		}
		tn.out.Add(int64(len(first)))
	}
	p.splice(tn, brw.Reader)
}

// firstBytes reads what the client sends first: a whole TLS record when
// it starts one (up to egress.MaxClientHello), else whatever came. None
// within FirstBytesWait is a protocol whose server speaks first.
func (p *Proxy) firstBytes(conn net.Conn, br *bufio.Reader) ([]byte, error) {
	_ = conn.SetReadDeadline(time.Now().Add(p.o.FirstBytesWait))
	b, err := br.Peek(1)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			_ = conn.SetReadDeadline(time.Time{})
			return nil, nil
		}
		return nil, err
	}
	if b[0] != 0x16 {
		_ = conn.SetReadDeadline(time.Time{})
		return nil, nil // not TLS: spliced as it comes
	}
	_ = conn.SetReadDeadline(time.Now().Add(p.o.HandshakeTimeout))
	defer func() { _ = conn.SetReadDeadline(time.Time{}) }()
	buf := make([]byte, 0, 1024)
	for {
		if _, done := egress.TLSServerName(buf); done && len(buf) > 0 {
			return buf, nil
		}
		if len(buf) >= egress.MaxClientHello {
			return buf, nil
		}
		chunk := make([]byte, min(egress.MaxClientHello-len(buf), 4096))
		n, err := br.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if err != nil {
			return nil, err
		}
	}
}

// splice copies bytes both ways until either side ends, the tunnel moved
// nothing for IdleTimeout, or it is closed.
func (p *Proxy) splice(tn *tunnel, fromClient io.Reader) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		p.pipe(tn, tn.up, fromClient, tn.client, &tn.out)
		if cw, ok := tn.up.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			tn.close()
		}
	}()
	go func() {
		defer wg.Done()
		p.pipe(tn, tn.client, tn.up, tn.up, &tn.in)
		tn.close()
	}()
	wg.Wait()
}

// pipe copies src to dst, counting into n. rd is the connection src reads
// from, whose deadline bounds idleness.
func (p *Proxy) pipe(tn *tunnel, dst io.Writer, src io.Reader, rd net.Conn, n *atomic.Int64) {
	buf := make([]byte, 32<<10)
	for {
		_ = rd.SetReadDeadline(time.Now().Add(p.o.IdleTimeout))
		k, err := src.Read(buf)
		if k > 0 {
			tn.touch()
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
			n.Add(int64(k))
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, tn.last.Load())) < p.o.IdleTimeout {
				continue // the other direction is busy
			}
			return
		}
	}
}

// report reports a finished tunnel: allowed with its bytes, and denied
// too when a policy change closed it.
func (p *Proxy) report(tn *tunnel) {
	p.allow(tn)
	if why := tn.revokedWhy(); why != "" {
		p.deny(tn.id, tn.t, tn.addr, why)
	}
}

// hopHeaders are not forwarded (RFC 9110 7.6.1), nor the proxy's own.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// forward sends a plain-HTTP request over the connection open already and
// relays the response. The destination connection serves this request
// only; the client may send its next one on the same proxy connection.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, tn *tunnel) {
	tn.start = time.Now()
	tn.touch()
	defer tn.close()
	cc := &countConn{Conn: tn.up, tn: tn}
	var once sync.Once
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			var c net.Conn
			once.Do(func() { c = cc })
			if c == nil {
				return nil, errors.New("the proxy dials once per request")
			}
			return c, nil
		},
		DisableKeepAlives:      true,
		ResponseHeaderTimeout:  p.o.IdleTimeout,
		MaxResponseHeaderBytes: 64 << 10,
	}
	defer tr.CloseIdleConnections()
	out := r.Clone(r.Context())
	out.RequestURI = ""
	if c := r.Header.Get("Connection"); c != "" {
		for _, f := range strings.Split(c, ",") {
			out.Header.Del(strings.TrimSpace(f))
		}
	}
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		p.log.Debug("plain-HTTP request failed", "session", tn.id, "target", tn.t, "err", err)
		http.Error(w, "the destination did not answer: "+err.Error(), http.StatusBadGateway)
		p.report(tn)
		return
	}
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
	p.report(tn)
}

// countConn counts what a plain-HTTP request moved.
type countConn struct {
	net.Conn
	tn *tunnel
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.tn.in.Add(int64(n))
	c.tn.touch()
	return n, err
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.tn.out.Add(int64(n))
	c.tn.touch()
	return n, err
}
