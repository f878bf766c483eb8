//go:build linux

package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
)

func webPolicy() *testPolicy {
	return &testPolicy{
		names:    []string{"allowed.test", "web.test"},
		prefixes: []netip.Prefix{netip.MustParsePrefix("10.99.0.11/32"), netip.MustParsePrefix("fd99::11/128")},
	}
}

func TestAllowedNameReachesOverHTTPS(t *testing.T) {
	s := newSession(t, webPolicy(), nil)
	out, code := s.curl(t, "-4", "https://allowed.test/")
	if code != 0 || out != "hello from allowed" {
		t.Fatalf("curl https://allowed.test/ = %d %q, want 0 and the page", code, out)
	}
	d := s.dec.wait(t, "allow tcp allowed.test", func(d Decision) bool {
		return d.Allow && d.Protocol == ProtoTCP && d.Host == "allowed.test" && d.Port == 443
	})
	if d.Addr != hostAllowed4 || d.Rule != "hostname allowed.test" || d.BytesOut == 0 || d.BytesIn == 0 {
		t.Errorf("decision = %+v, want address %s, the rule, bytes both ways", d, hostAllowed4)
	}
	s.dec.wait(t, "allow dns allowed.test", func(d Decision) bool {
		return d.Allow && d.Protocol == ProtoDNS && d.Host == "allowed.test"
	})
}

func TestAllowedNameReachesOverHTTP(t *testing.T) {
	s := newSession(t, &testPolicy{names: []string{"web.test"}}, nil)
	out, code := s.curl(t, "http://web.test/")
	if code != 0 || !strings.HasPrefix(out, "hello from web") {
		t.Fatalf("curl http://web.test/ = %d %q", code, out)
	}
}

func TestAllowedAddressReaches(t *testing.T) {
	s := newSession(t, webPolicy(), nil)
	c, err := s.dial("tcp", hostPort(hostWeb4, 7000))
	if err != nil {
		t.Fatalf("dial allowed address: %v", err)
	}
	msg := "ping over an allowed prefix\n"
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || got != msg {
		t.Fatalf("echo = %q, %v", got, err)
	}
	// The engine counts a write once it returns, which may be just after
	// the other end has read it, either way: the echo can be back before
	// the write that carried the message out has returned.
	st := s.eng.Stats()
	for deadline := time.Now().Add(2 * time.Second); (st.BytesIn != int64(len(msg)) || st.BytesOut != int64(len(msg))) && time.Now().Before(deadline); st = s.eng.Stats() {
		time.Sleep(time.Millisecond)
	}
	if st.ActiveFlows != 1 || st.BytesOut != int64(len(msg)) || st.BytesIn != int64(len(msg)) {
		t.Errorf("stats while open = %+v, want one flow and its bytes", st)
	}
	c.Close()
	d := s.dec.wait(t, "allow tcp 10.99.0.11:7000", func(d Decision) bool {
		return d.Allow && d.Addr == hostWeb4 && d.Port == 7000
	})
	if d.BytesOut != int64(len(msg)) || d.BytesIn != int64(len(msg)) || d.Rule != "address 10.99.0.11/32" {
		t.Errorf("decision = %+v, want %d bytes each way by the prefix rule", d, len(msg))
	}
	if st := s.eng.Stats(); st.TCPAllowed < 1 || st.BytesOut < int64(len(msg)) {
		t.Errorf("stats = %+v", st)
	}
}

// isReset reports whether err is the session's view of a TCP reset.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

func TestUnlistedAddressIsResetFast(t *testing.T) {
	s := newSession(t, webPolicy(), nil)
	c, err := s.dial("tcp", hostPort(hostOther4, 7000))
	if err != nil {
		t.Fatalf("dial: %v (the handshake completes so the engine can look for a name)", err)
	}
	defer c.Close()
	start := time.Now()
	io.WriteString(c, "no name in here\n")
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = c.Read(make([]byte, 64))
	if !isReset(err) {
		t.Fatalf("read after writing to an unlisted address: %v, want a reset", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("reset took %v", el)
	}
	s.dec.wait(t, "deny tcp 10.99.0.12:7000", func(d Decision) bool {
		return !d.Allow && d.Protocol == ProtoTCP && d.Addr == hostOther4 && d.Port == 7000 && d.Rule == "no rule allows the address"
	})

	// A silent client is reset when the peek times out.
	c2, err := s.dial("tcp", hostPort(hostOther4, 7000))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); !isReset(err) {
		t.Fatalf("silent client: %v, want a reset", err)
	}

	// curl to an address literal: its Host is the address, decided by address.
	if out, code := s.curl(t, "http://10.99.0.12/"); code == 0 {
		t.Fatalf("curl http://10.99.0.12/ succeeded: %q", out)
	}
}

func TestUnlistedNameIsRefused(t *testing.T) {
	s := newSession(t, webPolicy(), nil)
	if out, code := s.curl(t, "https://other.test/"); code != 6 {
		t.Fatalf("curl https://other.test/ = %d %q, want 6 (could not resolve)", code, out)
	}
	s.dec.wait(t, "deny dns other.test", func(d Decision) bool {
		return !d.Allow && d.Protocol == ProtoDNS && d.Host == "other.test"
	})
	// Knowing the address does not help: the SNI names an unlisted host.
	if out, code := s.curl(t, "--resolve", "other.test:443:10.99.0.12", "https://other.test/"); code == 0 {
		t.Fatalf("curl with a known address succeeded: %q", out)
	}
	s.dec.wait(t, "deny tcp other.test", func(d Decision) bool {
		return !d.Allow && d.Protocol == ProtoTCP && d.Host == "other.test" && d.Rule == "no rule allows the name"
	})
}

func TestDomainFrontingIsRefused(t *testing.T) {
	s := newSession(t, webPolicy(), nil)
	// TLS: an allowed SNI sent to an address the name does not resolve to.
	if out, code := s.curl(t, "--resolve", "allowed.test:443:10.99.0.12", "https://allowed.test/"); code == 0 {
		t.Fatalf("fronted TLS reached %q", out)
	}
	s.dec.wait(t, "deny fronted TLS", func(d Decision) bool {
		return !d.Allow && d.Host == "allowed.test" && d.Addr == hostOther4 && d.Rule == "the name does not resolve to the address"
	})
	// HTTP: an allowed Host header to an unrelated address.
	if out, code := s.curl(t, "-H", "Host: web.test", "http://10.99.0.12/"); code == 0 {
		t.Fatalf("fronted HTTP reached %q", out)
	}
	s.dec.wait(t, "deny fronted HTTP", func(d Decision) bool {
		return !d.Allow && d.Host == "web.test" && d.Addr == hostOther4
	})
	// The same name to its own address goes through.
	if out, code := s.curl(t, "-H", "Host: web.test", "http://10.99.0.11/"); code != 0 {
		t.Fatalf("Host web.test to its own address = %d %q", code, out)
	}
}

func TestDNSToAnotherServerIsAnsweredByTheEngine(t *testing.T) {
	s := newSession(t, webPolicy(), nil)
	for _, server := range []netip.Addr{{}, hostDNS4, netip.MustParseAddr("192.0.2.53"), netip.MustParseAddr("fd99::53")} {
		addrs, err := s.lookup(t, server, "ip4", "allowed.test")
		if err != nil || len(addrs) != 1 || addrs[0] != hostAllowed4 {
			t.Errorf("lookup allowed.test at %v = %v, %v", server, addrs, err)
		}
		// The test DNS server at 10.99.0.13 knows blocked.test; the engine answers instead.
		_, err = s.lookup(t, server, "ip4", "blocked.test")
		var de *net.DNSError
		if !errors.As(err, &de) || !de.IsNotFound {
			t.Errorf("lookup blocked.test at %v: %v, want NXDOMAIN", server, err)
		}
	}
	addrs, err := s.lookup(t, netip.Addr{}, "ip6", "allowed.test")
	if err != nil || len(addrs) != 1 || addrs[0] != hostAllowed6 {
		t.Errorf("AAAA allowed.test = %v, %v", addrs, err)
	}
	if st := s.eng.Stats(); st.DNSDenied < 4 || st.DNSAllowed < 5 {
		t.Errorf("stats = %+v", st)
	}
}

func TestDNSOverTCP(t *testing.T) {
	s := newSession(t, webPolicy(), nil)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return s.dial("tcp", hostPort(hostDNS4, 53))
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip4", "web.test")
	if err != nil || len(addrs) != 1 || addrs[0] != hostWeb4 {
		t.Fatalf("lookup over TCP = %v, %v", addrs, err)
	}
	_, err = r.LookupNetIP(ctx, "ip4", "blocked.test")
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsNotFound {
		t.Fatalf("blocked.test over TCP: %v, want NXDOMAIN", err)
	}
}

func TestDNSOverHTTPSToUnlistedHostIsRefused(t *testing.T) {
	s := newSession(t, webPolicy(), nil)
	if out, code := s.curl(t, "https://doh.test/dns-query"); code == 0 {
		t.Fatalf("DoH by name reached %q", out)
	}
	if out, code := s.curl(t, "--resolve", "doh.test:443:10.99.0.13", "https://doh.test/dns-query"); code == 0 {
		t.Fatalf("DoH by address reached %q", out)
	}
	if out, code := s.curl(t, "https://10.99.0.13/dns-query"); code == 0 {
		t.Fatalf("DoH by address literal reached %q", out)
	}
}

func TestUDP(t *testing.T) {
	s := newSession(t, &testPolicy{prefixes: []netip.Prefix{netip.MustParsePrefix("10.99.0.11/32")}}, nil)
	c, err := s.dial("udp", hostPort(hostWeb4, 7001))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("datagram"))
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "datagram" {
		t.Fatalf("allowed UDP echo = %q, %v", buf[:n], err)
	}
	c.Close()

	denied, err := s.dial("udp", hostPort(hostOther4, 7001))
	if err != nil {
		t.Fatal(err)
	}
	defer denied.Close()
	for range 20 {
		denied.Write([]byte("let me out"))
	}
	denied.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if n, err := denied.Read(buf); err == nil {
		t.Fatalf("unlisted UDP echoed %q", buf[:n])
	}
	s.dec.wait(t, "deny udp", func(d Decision) bool {
		return !d.Allow && d.Protocol == ProtoUDP && d.Addr == hostOther4 && d.Port == 7001
	})
	s.dec.mu.Lock()
	count := 0
	for _, d := range s.dec.all {
		if !d.Allow && d.Protocol == ProtoUDP {
			count++
		}
	}
	s.dec.mu.Unlock()
	if count != 1 {
		t.Errorf("%d UDP deny decisions for 20 datagrams, want them grouped into 1", count)
	}
	if st := s.eng.Stats(); st.UDPDenied != 20 || st.UDPAllowed != 1 {
		t.Errorf("stats = %+v, want 20 denied datagrams and 1 allowed flow", st)
	}
	s.eng.Close()
	d := s.dec.wait(t, "allowed udp flow closed", func(d Decision) bool {
		return d.Allow && d.Protocol == ProtoUDP
	})
	if d.BytesOut != 8 || d.BytesIn != 8 {
		t.Errorf("UDP flow decision = %+v, want 8 bytes each way", d)
	}
	s.dec.wait(t, "the rest of the group when the engine closes", func(d Decision) bool {
		return !d.Allow && d.Protocol == ProtoUDP && d.Count == 19
	})
}

func TestIPv6(t *testing.T) {
	s := newSession(t, webPolicy(), nil)
	out, code := s.curl(t, "-6", "https://allowed.test/")
	if code != 0 || out != "hello from allowed" {
		t.Fatalf("curl -6 https://allowed.test/ = %d %q", code, out)
	}
	s.dec.wait(t, "allow tcp allowed.test over IPv6", func(d Decision) bool {
		return d.Allow && d.Host == "allowed.test" && d.Addr == hostAllowed6
	})
	c, err := s.dial("tcp", hostPort(hostWeb6, 7000))
	if err != nil {
		t.Fatalf("dial allowed IPv6 prefix: %v", err)
	}
	c.Close()
	if out, code := s.curl(t, "-6", "--resolve", "allowed.test:443:[fd99::12]", "https://allowed.test/"); code == 0 {
		t.Fatalf("IPv6 fronting reached %q", out)
	}
	c, err = s.dial("tcp", hostPort(hostOther6, 7000))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "x")
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !isReset(err) {
		t.Fatalf("unlisted IPv6 address: %v, want a reset", err)
	}
}

func TestSetPolicyClosesForbiddenAndAllowsNew(t *testing.T) {
	s := newSession(t, webPolicy(), nil)
	c, err := s.dial("tcp", hostPort(hostWeb4, 7000))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	io.WriteString(c, "one\n")
	if l, err := r.ReadString('\n'); err != nil || l != "one\n" {
		t.Fatalf("echo before: %q %v", l, err)
	}
	start := time.Now()
	s.eng.SetPolicy(&testPolicy{prefixes: []netip.Prefix{netip.MustParsePrefix("10.99.0.12/32")}})
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	io.WriteString(c, "two\n")
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("the connection the new policy forbids still echoes")
	}
	n, err := s.dial("tcp", hostPort(hostOther4, 7000))
	if err != nil {
		t.Fatalf("dial newly allowed address: %v", err)
	}
	defer n.Close()
	io.WriteString(n, "three\n")
	n.SetReadDeadline(time.Now().Add(2 * time.Second))
	if l, err := bufio.NewReader(n).ReadString('\n'); err != nil || l != "three\n" {
		t.Fatalf("echo on the newly allowed address: %q %v", l, err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("the policy change took %v", el)
	}
	if st := s.eng.Stats(); st.Closed < 1 {
		t.Errorf("stats = %+v, want a closed connection", st)
	}
}

func TestAlwaysReachableWhateverThePolicy(t *testing.T) {
	s := newSession(t, &testPolicy{}, func(c *Config) {
		c.Always = []netip.AddrPort{netip.MustParseAddrPort("10.99.0.12:7000")}
	})
	c, err := s.dial("tcp", hostPort(hostOther4, 7000))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "gateway\n")
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if l, err := bufio.NewReader(c).ReadString('\n'); err != nil || l != "gateway\n" {
		t.Fatalf("always-reachable echo: %q %v", l, err)
	}
	s.eng.SetPolicy(&testPolicy{})
	io.WriteString(c, "still\n")
	if l, err := bufio.NewReader(c).ReadString('\n'); err != nil || l != "still\n" {
		t.Fatalf("always-reachable after SetPolicy: %q %v", l, err)
	}
}

func TestUnrestrictedPolicyLetsEverythingThrough(t *testing.T) {
	s := newSession(t, nil, nil)
	if out, code := s.curl(t, "https://other.test/"); code != 0 || out != "hello from other" {
		t.Fatalf("unrestricted curl = %d %q", code, out)
	}
	s.eng.SetPolicy(&testPolicy{open: true})
	if out, code := s.curl(t, "http://10.99.0.12/"); code != 0 {
		t.Fatalf("unrestricted curl = %d %q", code, out)
	}
}

func TestFlowCapRefusesExcessAndRecovers(t *testing.T) {
	s := newSession(t, webPolicy(), func(c *Config) { c.MaxFlows = 4 })
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for range 4 {
		c, err := s.dial("tcp", hostPort(hostWeb4, 7000))
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "x")
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	if c, err := s.dial("tcp", hostPort(hostWeb4, 7000)); err == nil {
		c.Close()
		t.Fatal("a fifth connection past MaxFlows 4 was accepted")
	}
	for _, c := range open {
		c.Close()
	}
	open = nil
	deadline := time.Now().Add(3 * time.Second)
	for s.eng.Stats().ActiveFlows > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	c, err := s.dial("tcp", hostPort(hostWeb4, 7000))
	if err != nil {
		t.Fatalf("after the flows closed: %v", err)
	}
	c.Close()
}

func TestCloseEndsOpenConnections(t *testing.T) {
	s := newSession(t, webPolicy(), nil)
	c, err := s.dial("tcp", hostPort(hostWeb4, 7000))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := s.eng.Close(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read after Close succeeded")
	}
	if st := s.eng.Stats(); st.ActiveFlows != 0 {
		t.Errorf("active flows after Close = %d", st.ActiveFlows)
	}
}

func TestServeRefusesASecondEngineAndClosedNamespace(t *testing.T) {
	s := newSession(t, nil, nil)
	if _, err := Serve(context.Background(), s.ns, Config{}); err == nil {
		t.Fatal("a second engine on one namespace was accepted")
	}
	ns, err := NewNamespace(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ns.Close()
	if _, err := Serve(context.Background(), ns, Config{}); err == nil {
		t.Fatal("Serve on a closed namespace succeeded")
	}
}
