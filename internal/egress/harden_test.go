//go:build linux

package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// tlsGet fetches / over TLS from inside the namespace, with the given SNI.
func (s *session) tlsGet(addr, sni string, write func(net.Conn, []byte) error) (string, error) {
	raw, err := s.dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(5 * time.Second))
	c := tls.Client(writerConn{raw, write}, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", sni)
	resp, err := io.ReadAll(c)
	return string(resp), err
}

// writerConn lets a test shape how the client's bytes are written.
type writerConn struct {
	net.Conn
	write func(net.Conn, []byte) error
}

func (w writerConn) Write(b []byte) (int, error) {
	if w.write == nil {
		return w.Conn.Write(b)
	}
	if err := w.write(w.Conn, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func TestClientHelloInSmallPieces(t *testing.T) {
	s := newSession(t, webPolicy(), func(c *Config) { c.PeekTimeout = 3 * time.Second })
	byteByByte := func(c net.Conn, b []byte) error {
		for i := range b {
			if _, err := c.Write(b[i : i+1]); err != nil {
				return err
			}
		}
		return nil
	}
	resp, err := s.tlsGet(hostPort(hostAllowed4, 443), "allowed.test", byteByByte)
	if err != nil || len(resp) == 0 {
		t.Fatalf("ClientHello written a byte at a time: %q, %v", resp, err)
	}
}

func TestSetPolicyReevaluatesByName(t *testing.T) {
	s := newSession(t, webPolicy(), nil)
	open := func() net.Conn {
		t.Helper()
		c, err := s.dial("tcp", hostPort(hostWeb4, 80))
		if err != nil {
			t.Fatal(err)
		}
		// Keep-alive: the connection stays open after the answer.
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: web.test\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Read(make([]byte, 4096)); err != nil {
			t.Fatalf("first request: %v", err)
		}
		return c
	}
	// web.test's address is allowed by prefix, so drop the prefix: the
	// name must now carry the connection.
	s.eng.SetPolicy(&testPolicy{names: []string{"web.test"}})
	c := open()
	defer c.Close()
	s.eng.SetPolicy(&testPolicy{names: []string{"web.test", "other.test"}})
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: web.test\r\n\r\n")
	if _, err := c.Read(make([]byte, 4096)); err != nil {
		t.Fatalf("a connection whose name is still allowed was closed: %v", err)
	}
	s.eng.SetPolicy(&testPolicy{names: []string{"other.test"}})
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: web.test\r\n\r\n")
	if _, err := c.Read(make([]byte, 4096)); err == nil {
		t.Fatal("a connection whose name is no longer allowed still answers")
	}
}

func TestServeEndsWithItsContext(t *testing.T) {
	w := needWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	ns, err := NewNamespace(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	eng, err := Serve(ctx, ns, Config{Policy: webPolicy(), Resolver: w.resolver})
	if err != nil {
		t.Fatal(err)
	}
	s := &session{ns: ns, eng: eng}
	c, err := s.dial("tcp", hostPort(hostWeb4, 7000))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cancel()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection outlived the engine's context")
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFloodLeavesTheEngineServing opens many connections that never speak
// and sprays datagrams at many ports; the engine refuses what it must,
// keeps its memory bounded and serves a well-behaved connection after.
func TestFloodLeavesTheEngineServing(t *testing.T) {
	s := newSession(t, webPolicy(), func(c *Config) {
		c.MaxFlows = 64
		c.PeekTimeout = 300 * time.Millisecond
	})
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Go(func() {
			c, err := s.dial("tcp", hostPort(hostOther4, 7000+i%50))
			if err != nil {
				return
			}
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			c.Read(make([]byte, 1))
			c.Close()
		})
	}
	u, err := s.dial("udp", hostPort(hostOther4, 9))
	if err != nil {
		t.Fatal(err)
	}
	var pcs []net.Conn
	for port := range 2000 {
		c, err := s.dial("udp", hostPort(hostOther4, 10000+port))
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("x"))
		pcs = append(pcs, c)
	}
	u.Close()
	wg.Wait()
	for _, c := range pcs {
		c.Close()
	}
	s.eng.mu.Lock()
	groups := len(s.eng.udpDenied)
	s.eng.mu.Unlock()
	if groups > maxDenyGroups {
		t.Errorf("%d UDP deny groups kept, want at most %d", groups, maxDenyGroups)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.eng.Stats().ActiveFlows > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := s.eng.Stats().ActiveFlows; n != 0 {
		t.Fatalf("%d flows still open after the flood", n)
	}
	c, err := s.dial("tcp", hostPort(hostWeb4, 7000))
	if err != nil {
		t.Fatalf("after the flood: %v", err)
	}
	defer c.Close()
	io.WriteString(c, "alive\n")
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if l, err := bufio.NewReader(c).ReadString('\n'); err != nil || l != "alive\n" {
		t.Fatalf("echo after the flood: %q, %v", l, err)
	}
	// Every TCP attempt is counted (the kernel retries a SYN); datagrams
	// are not retried, and on a busy machine the TUN device's queue drops
	// some of a 2,000-datagram burst before the engine reads them.
	if st := s.eng.Stats(); st.TCPDenied < 300 || st.UDPDenied < 200 {
		t.Errorf("stats after the flood = %+v", st)
	}
}

// TestICMPGoesNowhere sends an echo request from a raw ICMP socket in the
// namespace: the engine neither answers nor forwards it.
func TestICMPGoesNowhere(t *testing.T) {
	s := newSession(t, nil, nil)
	var pc net.PacketConn
	err := s.ns.Do(func() error {
		var err error
		pc, err = net.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	m := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 7, Seq: 1, Data: []byte("anyone?")}}
	b, err := m.Marshal(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{hostWeb4.String(), "192.0.2.1"} {
		if _, err := pc.WriteTo(b, &net.IPAddr{IP: net.ParseIP(dst)}); err != nil {
			t.Fatal(err)
		}
	}
	pc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 1500)
	if n, from, err := pc.ReadFrom(buf); err == nil {
		t.Fatalf("an ICMP answer came back from %v (%d bytes)", from, n)
	}
}

// TestDNSConnectionsCountAgainstTheCap holds TCP connections to the DNS
// address open: past MaxFlows they are refused, and DNS works again once
// they close.
func TestDNSConnectionsCountAgainstTheCap(t *testing.T) {
	s := newSession(t, webPolicy(), func(c *Config) { c.MaxFlows = 8 })
	var held []net.Conn
	refused := 0
	for range 20 {
		c, err := s.dial("tcp", hostPort(s.ns.DNS(), 53))
		if err != nil {
			refused++
			continue
		}
		held = append(held, c)
	}
	// A connection the engine refuses after the handshake reads as reset.
	for _, c := range held {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); isReset(err) {
			refused++
		}
	}
	if refused < 12 {
		t.Errorf("%d of 20 held DNS connections refused, want at least 12 past a cap of 8", refused)
	}
	for _, c := range held {
		c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		addrs, err := s.lookup(t, netip.Addr{}, "ip4", "allowed.test")
		if err == nil && len(addrs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DNS after the held connections closed: %v, %v", addrs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStartKeepsAParentDeathSignalChildAlive starts a child that asks to
// die with its parent thread: it must outlive Start, and run inside the
// namespace.
func TestStartKeepsAParentDeathSignalChildAlive(t *testing.T) {
	s := newSession(t, nil, nil)
	cmd := exec.Command("sh", "-c", "sleep 0.5; cat /proc/self/net/dev")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := s.ns.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the child died: %v", err)
	}
	if !strings.Contains(out.String(), tunName) {
		t.Fatalf("the child's interfaces have no %s:\n%s", tunName, out.String())
	}
}

// TestPolicyChangeWhileDialing changes the policy while the engine is still
// dialing an allowed destination: the connection must not outlive the
// change it raced.
func TestPolicyChangeWhileDialing(t *testing.T) {
	dialing := make(chan struct{}, 1)
	release := make(chan struct{})
	s := newSession(t, webPolicy(), func(c *Config) {
		c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == hostPort(hostWeb4, 7000) {
				dialing <- struct{}{}
				<-release
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	})
	type result struct {
		c   net.Conn
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := s.dial("tcp", hostPort(hostWeb4, 7000))
		got <- result{c, err}
	}()
	<-dialing
	s.eng.SetPolicy(&testPolicy{names: []string{"allowed.test"}})
	close(release)
	r := <-got
	if r.err != nil {
		return // refused outright: fine
	}
	defer r.c.Close()
	io.WriteString(r.c, "still there?\n")
	r.c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if l, err := bufio.NewReader(r.c).ReadString('\n'); err == nil {
		t.Fatalf("the connection the new policy forbids echoed %q", l)
	}
}

// TestNewNamespaceWithoutPrivilegeSaysSo runs without root only (as root
// there is nothing to refuse): the error names what is missing.
func TestNewNamespaceWithoutPrivilegeSaysSo(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs as a user without root, where NewNamespace must refuse")
	}
	_, err := NewNamespace(context.Background())
	if err == nil {
		t.Fatal("NewNamespace succeeded without root")
	}
	t.Log(err)
	if !strings.Contains(err.Error(), "root") && !strings.Contains(err.Error(), "iproute2") {
		t.Fatalf("NewNamespace without root: %v, want a sentence naming what is missing", err)
	}
}

// namelessPolicy is a testPolicy that says when it has no hostname rules.
type namelessPolicy struct{ testPolicy }

func (p *namelessPolicy) HasNameRules(port uint16) bool {
	return len(p.names) > 0 && p.portOK(port)
}

// TestNoNameRulesResetsAtOnce: with a policy that says it has no hostname
// rules, a connection to an unlisted address is refused at the handshake,
// with nothing to wait for.
func TestNoNameRulesResetsAtOnce(t *testing.T) {
	s := newSession(t, &namelessPolicy{testPolicy{prefixes: []netip.Prefix{netip.MustParsePrefix("10.99.0.11/32")}}}, func(c *Config) {
		c.PeekTimeout = 10 * time.Second
	})
	start := time.Now()
	_, err := s.dial("tcp", hostPort(hostOther4, 7000))
	if !isReset(err) {
		t.Fatalf("dial an unlisted address: %v, want connection refused", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("refusal took %v", el)
	}
	s.dec.wait(t, "deny at the handshake", func(d Decision) bool {
		return !d.Allow && d.Addr == hostOther4 && d.Port == 7000
	})
	c, err := s.dial("tcp", hostPort(hostWeb4, 7000))
	if err != nil {
		t.Fatalf("the allowed address: %v", err)
	}
	c.Close()
}

// TestClosingTheNamespaceFirst closes the namespace under a serving engine
// (the wrong order): neither hangs nor panics, and Close still returns.
func TestClosingTheNamespaceFirst(t *testing.T) {
	w := needWorld(t)
	ns, err := NewNamespace(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	eng, err := Serve(context.Background(), ns, Config{Policy: webPolicy(), Resolver: w.resolver})
	if err != nil {
		t.Fatal(err)
	}
	s := &session{ns: ns, eng: eng}
	c, err := s.dial("tcp", hostPort(hostWeb4, 7000))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ns.Start(exec.Command("true")); err == nil {
		t.Error("Start on a closed namespace succeeded")
	}
	done := make(chan struct{})
	go func() {
		eng.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Engine.Close hung after the namespace closed")
	}
}

// TestNamespaceWorkKeepsOtherChildrenAlive: making namespaces and working
// inside them must not end the threads they ran on. A child started by
// any goroutine with a parent-death signal (the worker's remotes, bwrap)
// dies when the thread that forked it ends, and the runtime puts a
// namespace's work on whatever thread it has, so a thread that ended after
// entering a namespace would kill other sessions' processes.
func TestNamespaceWorkKeepsOtherChildrenAlive(t *testing.T) {
	needWorld(t)
	var children []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range children {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	// Children forked from as many threads as the runtime uses.
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command("sleep", "60")
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			children = append(children, cmd)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for range 3 {
		ns, err := NewNamespace(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			if err := ns.Do(func() error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		ns.Close()
	}
	time.Sleep(100 * time.Millisecond)
	for _, c := range children {
		// A killed child stays a zombie until waited for: read its state.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if _, rest, _ := strings.Cut(string(b), ") "); strings.HasPrefix(rest, "Z") {
			t.Fatalf("child %d, forked before the namespace work, was killed", c.Process.Pid)
		}
	}
}
