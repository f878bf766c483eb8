//go:build linux

package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

const (
	// dnsTTL is the TTL of the engine's answers: short, so a name the
	// policy stops allowing stops resolving soon.
	dnsTTL = 30
	// dnsIdle is how long a DNS flow (one client port) stays open unused.
	dnsIdle = 5 * time.Second
)

// answerDNS answers one query: names the policy allows (on some port) are
// resolved on the host, others get NXDOMAIN. It returns nil for a message
// that is not a query it can answer.
func (e *Engine) answerDNS(ctx context.Context, q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return nil
	}
	resp := dnsmessage.Message{Header: dnsmessage.Header{
		ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true,
	}}
	if h.OpCode != 0 || len(qs) != 1 {
		resp.RCode = dnsmessage.RCodeNotImplemented
		resp.Questions = qs
		b, _ := resp.Pack()
		return b
	}
	question := qs[0]
	resp.Questions = qs
	host := normalizeHost(question.Name.String())
	pol := e.currentPolicy()
	rule := ""
	if restricted(pol) {
		r, ok := pol.AllowName(host, 0)
		if !ok {
			resp.RCode = dnsmessage.RCodeNameError
			e.deny(ProtoDNS, host, netip.Addr{}, 0, "no rule allows the name")
			b, _ := resp.Pack()
			return b
		}
		rule = r
	}
	switch question.Type {
	case dnsmessage.TypeA, dnsmessage.TypeAAAA:
		network := "ip4"
		if question.Type == dnsmessage.TypeAAAA {
			network = "ip6"
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		addrs, err := e.resolver.LookupNetIP(ctx, network, host)
		cancel()
		var dnsErr *net.DNSError
		switch {
		case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			resp.RCode = dnsmessage.RCodeNameError
		case err != nil:
			resp.RCode = dnsmessage.RCodeServerFailure
		}
		e.remember(host, addrs)
		for _, a := range addrs {
			a = a.Unmap()
			rh := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL}
			switch {
			case question.Type == dnsmessage.TypeA && a.Is4():
				rh.Type = dnsmessage.TypeA
				resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AResource{A: a.As4()}})
			case question.Type == dnsmessage.TypeAAAA && a.Is6():
				rh.Type = dnsmessage.TypeAAAA
				resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
			}
		}
	default:
		// Other types (HTTPS, MX, TXT…) get an empty answer: the engine
		// hands out addresses and nothing that could carry data out.
	}
	e.n.dnsAllowed.Add(1)
	e.decide(Decision{Time: time.Now(), Allow: true, Host: host, Protocol: ProtoDNS, Rule: rule, Count: 1})
	b, err := resp.Pack()
	if err != nil {
		return nil
	}
	return b
}

// serveDNSOverUDP answers the queries of one client port until it idles.
func (e *Engine) serveDNSOverUDP(r *udp.ForwarderRequest) {
	// Each client port holds a goroutine for a few seconds: it takes a
	// flow slot, and a query past the cap is dropped (the client retries).
	if !e.takeSlot() {
		return
	}
	var wq waiter.Queue
	ep, err := r.CreateEndpoint(&wq)
	if err != nil {
		e.giveSlot()
		return
	}
	conn := gonet.NewUDPConn(&wq, ep)
	if !e.goTracked(func() {
		defer e.giveSlot()
		defer conn.Close()
		stop := context.AfterFunc(e.ctx, func() { conn.Close() })
		defer stop()
		buf := make([]byte, 4096)
		for {
			conn.SetReadDeadline(time.Now().Add(dnsIdle))
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			if resp := e.answerDNS(e.ctx, buf[:n]); resp != nil {
				if len(resp) > 512 {
					// Too big for plain UDP DNS: truncated, so the client asks over TCP.
					resp = truncated(buf[:n])
				}
				if resp != nil {
					conn.Write(resp)
				}
			}
		}
	}) {
		conn.Close()
		e.giveSlot()
	}
}

func truncated(q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	qs, _ := p.AllQuestions()
	m := dnsmessage.Message{Header: dnsmessage.Header{ID: h.ID, Response: true, Truncated: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}, Questions: qs}
	b, _ := m.Pack()
	return b
}

// serveDNSOverTCP answers length-prefixed queries on one connection.
func (e *Engine) serveDNSOverTCP(r *tcp.ForwarderRequest) {
	if !e.takeSlot() {
		r.Complete(true)
		return
	}
	defer e.giveSlot()
	if !e.enter() {
		r.Complete(true)
		return
	}
	defer e.wg.Done()
	conn, _ := accept(r)
	if conn == nil {
		return
	}
	defer conn.Close()
	stop := context.AfterFunc(e.ctx, func() { conn.Close() })
	defer stop()
	var lenBuf [2]byte
	for {
		conn.SetReadDeadline(time.Now().Add(dnsIdle))
		if _, err := io.ReadFull(conn, lenBuf[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(lenBuf[:]))
		if _, err := io.ReadFull(conn, q); err != nil {
			return
		}
		resp := e.answerDNS(e.ctx, q)
		if resp == nil {
			return
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
		if _, err := conn.Write(append(out, resp...)); err != nil {
			return
		}
	}
}
