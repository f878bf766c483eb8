//go:build linux

package egress

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// handleTCP decides a connection the namespace opens. A destination the
// policy allows by address (or that is always reachable, or any destination
// under an unrestricted policy) is dialed before the handshake completes, so
// an unreachable one is refused as it would be directly. Otherwise the
// handshake completes, the first bytes are read for a TLS SNI or HTTP Host,
// and the name decides; a denied connection is reset.
func (e *Engine) handleTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	dst, port := addrOf(id.LocalAddress), id.LocalPort
	start := time.Now()
	if port == 53 {
		e.serveDNSOverTCP(r)
		return
	}
	pol := e.currentPolicy()
	rule, ok := e.permits(pol, "", dst, port)
	if !ok && rule == ruleHostOnly {
		r.Complete(true)
		e.deny(ProtoTCP, "", dst, port, rule)
		return
	}
	f := &flow{proto: ProtoTCP, addr: dst, port: port, start: start, rule: rule}
	if ok {
		if !e.begin(f) {
			r.Complete(true)
			e.deny(ProtoTCP, "", dst, port, "too many open connections")
			return
		}
		defer e.finish(f)
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		up, err := e.dial(ctx, "tcp", netip.AddrPortFrom(dst, port).String())
		if err != nil {
			r.Complete(true)
			e.log.Debug("egress: dial failed", "address", dst, "port", port, "err", err)
			return
		}
		conn, ep := accept(r)
		if conn == nil {
			up.Close()
			return
		}
		e.n.tcpAllowed.Add(1)
		e.splice(f, conn, ep, up, nil)
		return
	}

	// The address alone is not allowed: only a name can let it through.
	if nr, ok := pol.(NameRules); ok && !nr.HasNameRules(port) {
		r.Complete(true)
		e.deny(ProtoTCP, "", dst, port, "no rule allows the address")
		return
	}
	// Until its name is known the flow is left out of SetPolicy's checks
	// (by address alone it would be closed at every change): it meets the
	// policy in force once decided, in splice, before any byte goes up.
	f.peeking = true
	if !e.begin(f) {
		r.Complete(true)
		e.deny(ProtoTCP, "", dst, port, "too many open connections")
		return
	}
	defer e.finish(f)
	conn, ep := accept(r)
	if conn == nil {
		f.denied = true
		return
	}
	f.setKill(func() { ep.Abort(); conn.Close() })
	peeked, host := peekName(conn, e.peekWait)
	reject := func(why string) {
		f.denied = true
		ep.Abort()
		conn.Close()
		e.deny(ProtoTCP, host, dst, port, why)
	}
	if host == "" {
		reject("no rule allows the address")
		return
	}
	rule, ok = pol.AllowName(host, port)
	if !ok {
		reject("no rule allows the name")
		return
	}
	if !e.resolvesTo(e.ctx, host, dst) {
		reject("the name does not resolve to the address")
		return
	}
	// SetPolicy reads an open flow's name under e.mu.
	e.mu.Lock()
	f.host, f.rule, f.peeking = host, rule, false
	e.mu.Unlock()
	up, err := e.dial(e.ctx, "tcp", net.JoinHostPort(dst.String(), strconv.Itoa(int(port))))
	if err != nil {
		ep.Abort()
		conn.Close()
		e.log.Debug("egress: dial failed", "host", host, "address", dst, "port", port, "err", err)
		return
	}
	e.n.tcpAllowed.Add(1)
	e.splice(f, conn, ep, up, peeked)
}

// accept completes the handshake of r; nil (after a reset) when it fails.
func accept(r *tcp.ForwarderRequest) (*gonet.TCPConn, tcpip.Endpoint) {
	var wq waiter.Queue
	ep, err := r.CreateEndpoint(&wq)
	if err != nil {
		r.Complete(true)
		return nil, nil
	}
	r.Complete(false)
	ep.SocketOptions().SetKeepAlive(true)
	return gonet.NewTCPConn(&wq, ep), ep
}

// splice relays between the session's connection and the upstream one,
// after sending up the bytes already read, until both directions end or the
// flow is killed.
func (e *Engine) splice(f *flow, conn *gonet.TCPConn, ep tcpip.Endpoint, up net.Conn, peeked []byte) {
	var once sync.Once
	f.setKill(func() {
		once.Do(func() {
			ep.Abort()
			conn.Close()
			up.Close()
		})
	})
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	// The policy may have changed while the flow was being decided and
	// dialed, before SetPolicy could close it: decide again now that it can.
	if _, ok := e.permits(e.currentPolicy(), f.host, f.addr, f.port); closed || !ok {
		if !closed {
			e.n.closed.Add(1)
		}
		f.kill()
		return
	}
	if len(peeked) > 0 {
		n, err := up.Write(peeked)
		f.out.Add(int64(n))
		if err != nil {
			f.kill()
			return
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := copyCounting(conn, up, &f.in); err != nil {
			f.kill()
			return
		}
		conn.CloseWrite()
	}()
	if err := copyCounting(up, conn, &f.out); err != nil {
		f.kill()
	} else if cw, ok := up.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	<-done
	once.Do(func() {
		conn.Close()
		up.Close()
	})
}

// peekName reads the first bytes of conn, up to a TLS record or an HTTP
// request head, and returns them with the name they carry (SNI or Host), or
// no name when they carry none or nothing came within wait.
func peekName(conn *gonet.TCPConn, wait time.Duration) ([]byte, string) {
	conn.SetReadDeadline(time.Now().Add(wait))
	defer conn.SetReadDeadline(time.Time{})
	buf := make([]byte, 0, 1024)
	for len(buf) < maxPeek {
		if cap(buf)-len(buf) < 512 {
			nb := make([]byte, len(buf), min(2*cap(buf), maxPeek))
			copy(nb, buf)
			buf = nb
		}
		n, err := conn.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		host, st := sniff(buf)
		switch st {
		case sniffDone:
			return buf, normalizeHost(host)
		case sniffNone:
			return buf, ""
		}
		if err != nil {
			return buf, ""
		}
	}
	return buf, ""
}
