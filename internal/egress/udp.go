//go:build linux

package egress

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

const (
	// denyWindow groups denied UDP datagrams to one destination into one
	// decision per window.
	denyWindow = 10 * time.Second
	// maxDenyGroups bounds the groups kept at once.
	maxDenyGroups = 1024
	// maxDatagram is the largest datagram relayed.
	maxDatagram = 65535
)

type denyGroup struct {
	first   time.Time
	rule    string
	pending int // denials since the last report
}

// handleUDP decides a UDP flow (one source port to one destination) on its
// first datagram: DNS is answered by the engine, an allowed destination is
// relayed through a host socket, others are dropped.
func (e *Engine) handleUDP(r *udp.ForwarderRequest) bool {
	id := r.ID()
	dst, port := addrOf(id.LocalAddress), id.LocalPort
	if port == 53 {
		e.serveDNSOverUDP(r)
		return true
	}
	rule, ok := e.permits(e.currentPolicy(), "", dst, port)
	if !ok {
		e.denyUDP(dst, port, denyRule(rule))
		return true
	}
	f := &flow{proto: ProtoUDP, addr: dst, port: port, start: time.Now(), rule: rule}
	if !e.begin(f) {
		e.denyUDP(dst, port, "too many open flows")
		return true
	}
	var wq waiter.Queue
	ep, err := r.CreateEndpoint(&wq)
	if err != nil {
		f.denied = true
		e.finish(f)
		return true
	}
	conn := gonet.NewUDPConn(&wq, ep)
	go e.relayUDP(f, conn)
	return true
}

// relayUDP dials the destination from the host and copies datagrams both
// ways until the flow idles for UDPIdle or is killed.
func (e *Engine) relayUDP(f *flow, conn *gonet.UDPConn) {
	defer e.finish(f)
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	up, err := e.dial(ctx, "udp", netip.AddrPortFrom(f.addr, f.port).String())
	cancel()
	if err != nil {
		conn.Close()
		return
	}
	e.n.udpAllowed.Add(1)
	var once sync.Once
	f.setKill(func() { once.Do(func() { conn.Close(); up.Close() }) })
	stop := context.AfterFunc(e.ctx, f.kill)
	defer stop()
	// The policy may have changed while the flow was being dialed.
	if _, ok := e.permits(e.currentPolicy(), "", f.addr, f.port); !ok {
		e.n.closed.Add(1)
		f.kill()
		return
	}
	var last sync.Mutex
	lastSeen := time.Now()
	touch := func() { last.Lock(); lastSeen = time.Now(); last.Unlock() }
	idle := func() bool { last.Lock(); defer last.Unlock(); return time.Since(lastSeen) >= e.udpIdle }
	copyDatagrams := func(dst, src net.Conn, count func(int)) {
		buf := make([]byte, maxDatagram)
		for {
			src.SetReadDeadline(time.Now().Add(e.udpIdle))
			n, err := src.Read(buf)
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() && !idle() {
					continue
				}
				f.kill()
				return
			}
			touch()
			if _, err := dst.Write(buf[:n]); err == nil {
				count(n)
			}
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyDatagrams(conn, up, func(n int) { f.in.Add(int64(n)) })
	}()
	copyDatagrams(up, conn, func(n int) { f.out.Add(int64(n)) })
	<-done
}

// denyUDP reports a dropped datagram, grouped per destination: the first of
// a window at once, the rest of it with a count when the next window opens
// or the engine closes.
func (e *Engine) denyUDP(dst netip.Addr, port uint16, why string) {
	e.n.udpDenied.Add(1)
	key := netip.AddrPortFrom(dst, port)
	now := time.Now()
	var report []Decision
	e.mu.Lock()
	g := e.udpDenied[key]
	switch {
	case g == nil:
		if len(e.udpDenied) >= maxDenyGroups {
			report = e.takeDeniedLocked(true)
		}
		e.udpDenied[key] = &denyGroup{first: now, rule: why}
		report = append(report, Decision{Time: now, Addr: dst, Port: port, Protocol: ProtoUDP, Rule: why, Count: 1})
	case now.Sub(g.first) >= denyWindow:
		report = append(report, Decision{Time: g.first, Addr: dst, Port: port, Protocol: ProtoUDP, Rule: why, Count: g.pending + 1})
		g.first, g.pending = now, 0
	default:
		g.pending++
	}
	e.mu.Unlock()
	for _, d := range report {
		e.decide(d)
	}
}

// denyRule is the reason a denial carries: the one permits gave, if any.
func denyRule(rule string) string {
	if rule != "" {
		return rule
	}
	return "no rule allows the address"
}

// takeDeniedLocked empties the groups (all, or those whose window ended)
// and returns the reports of their pending denials.
func (e *Engine) takeDeniedLocked(all bool) []Decision {
	var out []Decision
	now := time.Now()
	for k, g := range e.udpDenied {
		if !all && now.Sub(g.first) < denyWindow {
			continue
		}
		if g.pending > 0 {
			out = append(out, Decision{Time: g.first, Addr: k.Addr(), Port: k.Port(), Protocol: ProtoUDP, Rule: g.rule, Count: g.pending})
		}
		delete(e.udpDenied, k)
	}
	return out
}

func (e *Engine) flushUDPDenied(all bool) {
	e.mu.Lock()
	out := e.takeDeniedLocked(all)
	e.mu.Unlock()
	for _, d := range out {
		e.decide(d)
	}
}
