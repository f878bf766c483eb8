//go:build linux

package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// privateEnv marks a test binary re-executed in a network namespace of its
// own: everything the tests add (veth pairs, addresses) lives there and dies
// with the process, so the machine's own namespace is never touched.
const privateEnv = "OUTPOST_EGRESS_TEST_PRIVATE_NETNS"

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 && os.Getenv(privateEnv) == "" {
		if unshare, err := exec.LookPath("unshare"); err == nil {
			cmd := exec.Command(unshare, append([]string{"--net", "--", os.Args[0]}, os.Args[1:]...)...)
			cmd.Env = append(os.Environ(), privateEnv+"=1")
			cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
			err := cmd.Run()
			var ee *exec.ExitError
			switch {
			case err == nil:
				os.Exit(0)
			case errors.As(err, &ee) && ee.ExitCode() >= 0:
				os.Exit(ee.ExitCode())
			default:
				fmt.Fprintf(os.Stderr, "egress tests: re-exec under unshare --net: %v\n", err)
				os.Exit(1)
			}
		}
	}
	os.Exit(m.Run())
}

// The test hosts: addresses on a veth in a namespace of their own, joined
// to the test's private namespace (where the engine dials from).
var (
	worldAddr4   = netip.MustParseAddr("10.99.0.1")
	hostAllowed4 = netip.MustParseAddr("10.99.0.10") // HTTPS allowed.test
	hostWeb4     = netip.MustParseAddr("10.99.0.11") // HTTP web.test, TCP echo :7000, UDP echo :7001, sink :7100, source :7200
	hostOther4   = netip.MustParseAddr("10.99.0.12") // HTTPS other.test, HTTP, TCP echo, UDP echo
	hostDNS4     = netip.MustParseAddr("10.99.0.13") // DNS :53, DoH doh.test :443
	hostAllowed6 = netip.MustParseAddr("fd99::10")
	hostWeb6     = netip.MustParseAddr("fd99::11")
	hostOther6   = netip.MustParseAddr("fd99::12")
)

// testZone is what the test DNS server (and so the engine's resolver) knows.
var testZone = map[string][]netip.Addr{
	"allowed.test":  {hostAllowed4, hostAllowed6},
	"web.test":      {hostWeb4, hostWeb6},
	"other.test":    {hostOther4, hostOther6},
	"blocked.test":  {hostOther4},
	"doh.test":      {hostDNS4},
	"api.sub.test":  {hostAllowed4},
	"deep.sub.test": {hostOther4},
}

type world struct {
	hosts    *Namespace
	resolver *net.Resolver
	dir      string
	err      error
}

var (
	worldOnce sync.Once
	theWorld  world
)

// needWorld skips unless the test runs as root in its private namespace,
// and builds the test hosts once.
func needWorld(t testing.TB) *world {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("egress tests need root: they create network namespaces, veth pairs and TUN devices")
	}
	if os.Getenv(privateEnv) == "" {
		t.Skip("egress tests need unshare (util-linux) to run in a private network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("egress tests need the ip command (iproute2)")
	}
	worldOnce.Do(func() { theWorld.err = buildWorld(&theWorld) })
	if theWorld.err != nil {
		t.Fatalf("build test hosts: %v", theWorld.err)
	}
	return &theWorld
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

func buildWorld(w *world) error {
	dir, err := os.MkdirTemp("", "egress-test-")
	if err != nil {
		return err
	}
	w.dir = dir
	ctx := context.Background()
	hosts, err := NewNamespace(ctx)
	if err != nil {
		return err
	}
	w.hosts = hosts
	if err := run("ip", "link", "set", "lo", "up"); err != nil {
		return err
	}
	// Connection benchmarks open tens of thousands of connections from
	// this namespace (the test's own): reuse ports in TIME_WAIT.
	if err := os.WriteFile("/proc/sys/net/ipv4/tcp_tw_reuse", []byte("1"), 0o644); err != nil {
		return err
	}
	if err := run("ip", "link", "add", "veth0", "type", "veth", "peer", "name", "veth1", "netns", hosts.Path()); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"addr", "add", "10.99.0.1/24", "dev", "veth0"},
		{"addr", "add", "fd99::1/64", "dev", "veth0", "nodad"},
		{"link", "set", "veth0", "up"},
	} {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	err = hosts.Do(func() error {
		for _, a := range []netip.Addr{hostAllowed4, hostWeb4, hostOther4, hostDNS4} {
			if err := run("ip", "addr", "add", a.String()+"/24", "dev", "veth1"); err != nil {
				return err
			}
		}
		for _, a := range []netip.Addr{hostAllowed6, hostWeb6, hostOther6} {
			if err := run("ip", "addr", "add", a.String()+"/64", "dev", "veth1", "nodad"); err != nil {
				return err
			}
		}
		return run("ip", "link", "set", "veth1", "up")
	})
	if err != nil {
		return err
	}
	return w.startServers()
}

func (w *world) listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := w.hosts.Do(func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

func (w *world) listenUDP(addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := w.hosts.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp", addr)
		return err
	})
	return pc, err
}

func hostPort(a netip.Addr, port int) string {
	return netip.AddrPortFrom(a, uint16(port)).String()
}

// startServers runs the test hosts' services; they live as long as the
// test binary.
func (w *world) startServers() error {
	page := func(name string) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(rw, "hello from %s", name)
		})
	}
	for _, s := range []struct {
		addr netip.Addr
		name string
	}{{hostAllowed4, "allowed"}, {hostAllowed6, "allowed"}, {hostOther4, "other"}, {hostOther6, "other"}, {hostDNS4, "doh"}} {
		ln, err := w.listen("tcp", hostPort(s.addr, 443))
		if err != nil {
			return err
		}
		srv := httptest.NewUnstartedServer(page(s.name))
		srv.Listener = ln
		srv.StartTLS()
	}
	for _, a := range []netip.Addr{hostWeb4, hostWeb6, hostOther4, hostOther6} {
		ln, err := w.listen("tcp", hostPort(a, 80))
		if err != nil {
			return err
		}
		go http.Serve(ln, page("web "+a.String()))
		echo, err := w.listen("tcp", hostPort(a, 7000))
		if err != nil {
			return err
		}
		go serveEcho(echo)
		sink, err := w.listen("tcp", hostPort(a, 7100))
		if err != nil {
			return err
		}
		go serveSink(sink)
		source, err := w.listen("tcp", hostPort(a, 7200))
		if err != nil {
			return err
		}
		go serveSource(source)
		pc, err := w.listenUDP(hostPort(a, 7001))
		if err != nil {
			return err
		}
		go serveUDPEcho(pc)
	}
	dns, err := w.listenUDP(hostPort(hostDNS4, 53))
	if err != nil {
		return err
	}
	go serveTestDNS(dns)
	w.resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", hostPort(hostDNS4, 53))
	}}
	return nil
}

func serveEcho(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

// serveSink reads everything and answers with the count as 8 bytes when the
// client half-closes.
func serveSink(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			n, _ := io.Copy(io.Discard, c)
			fmt.Fprintf(c, "%d\n", n)
		}()
	}
}

// serveSource writes zeros to each connection until the client closes it.
func serveSource(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 1<<20)
			for {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
}

func serveUDPEcho(pc net.PacketConn) {
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		pc.WriteTo(buf[:n], from)
	}
}

// serveTestDNS is the test hosts' DNS server (the "second DNS server" the
// session may try to reach directly, and the engine's host resolver).
func serveTestDNS(pc net.PacketConn) {
	buf := make([]byte, 4096)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		resp := dnsmessage.Message{Header: dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}, Questions: []dnsmessage.Question{q}}
		addrs, ok := testZone[strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")]
		if !ok {
			resp.RCode = dnsmessage.RCodeNameError
		}
		for _, a := range addrs {
			rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 300, Type: q.Type}
			if q.Type == dnsmessage.TypeA && a.Is4() {
				resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AResource{A: a.As4()}})
			}
			if q.Type == dnsmessage.TypeAAAA && a.Is6() {
				resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
			}
		}
		b, err := resp.Pack()
		if err == nil {
			pc.WriteTo(b, from)
		}
	}
}

// testPolicy is a small policy: names (exact or "*." suffix), prefixes,
// optional ports.
type testPolicy struct {
	names    []string
	prefixes []netip.Prefix
	ports    []uint16 // empty: any
	open     bool
}

func (p *testPolicy) portOK(port uint16) bool {
	if port == 0 || len(p.ports) == 0 {
		return true
	}
	for _, q := range p.ports {
		if q == port {
			return true
		}
	}
	return false
}

func (p *testPolicy) AllowName(host string, port uint16) (string, bool) {
	for _, n := range p.names {
		if (n == host || strings.HasPrefix(n, "*.") && strings.HasSuffix(host, n[1:])) && p.portOK(port) {
			return "hostname " + n, true
		}
	}
	return "", false
}

func (p *testPolicy) AllowAddr(a netip.Addr, port uint16) (string, bool) {
	for _, pr := range p.prefixes {
		if pr.Contains(a) && p.portOK(port) {
			return "address " + pr.String(), true
		}
	}
	return "", false
}

func (p *testPolicy) Restricted() bool { return !p.open }

// decisions records what an engine reports.
type decisions struct {
	mu  sync.Mutex
	all []Decision
	ch  chan struct{}
}

func newDecisions() *decisions { return &decisions{ch: make(chan struct{}, 1)} }

func (d *decisions) add(x Decision) {
	d.mu.Lock()
	d.all = append(d.all, x)
	d.mu.Unlock()
	select {
	case d.ch <- struct{}{}:
	default:
	}
}

// wait returns the first decision matching ok, waiting up to 5 seconds.
func (d *decisions) wait(t testing.TB, what string, ok func(Decision) bool) Decision {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		d.mu.Lock()
		for _, x := range d.all {
			if ok(x) {
				d.mu.Unlock()
				return x
			}
		}
		all := fmt.Sprintf("%+v", d.all)
		d.mu.Unlock()
		select {
		case <-d.ch:
		case <-deadline:
			t.Fatalf("no decision %s; got %s", what, all)
		}
	}
}

// session is a namespace served by an engine, with its decisions.
type session struct {
	ns  *Namespace
	eng *Engine
	dec *decisions
	w   *world
}

func newSession(t testing.TB, p Policy, tweak func(*Config)) *session {
	t.Helper()
	w := needWorld(t)
	ctx := context.Background()
	ns, err := NewNamespace(ctx)
	if err != nil {
		t.Fatalf("NewNamespace: %v", err)
	}
	dec := newDecisions()
	cfg := Config{Policy: p, Resolver: w.resolver, OnDecision: dec.add, PeekTimeout: 500 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	eng, err := Serve(ctx, ns, cfg)
	if err != nil {
		ns.Close()
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() {
		eng.Close()
		ns.Close()
	})
	return &session{ns: ns, eng: eng, dec: dec, w: w}
}

// nsDialer dials from a goroutine that stays locked on a thread inside a
// namespace, so each dial costs a channel handoff rather than a thread's
// creation and namespace switch (what Namespace.Do costs): the connect
// benchmarks measure the engine, not the harness.
type nsDialer struct {
	reqs chan dialReq
}

type dialReq struct {
	network, addr string
	reply         chan dialResult
}

type dialResult struct {
	c   net.Conn
	err error
}

func newNSDialer(tb testing.TB, ns *Namespace) *nsDialer {
	d := &nsDialer{reqs: make(chan dialReq)}
	ready := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Setns(ns.nsFD, unix.CLONE_NEWNET); err != nil {
			ready <- err
			return
		}
		ready <- nil
		for r := range d.reqs {
			c, err := net.DialTimeout(r.network, r.addr, 3*time.Second)
			r.reply <- dialResult{c, err}
		}
	}()
	if err := <-ready; err != nil {
		tb.Fatalf("enter the namespace: %v", err)
	}
	tb.Cleanup(func() {
		close(d.reqs)
		<-done
	})
	return d
}

func (d *nsDialer) dial(network, addr string) (net.Conn, error) {
	reply := make(chan dialResult, 1)
	d.reqs <- dialReq{network, addr, reply}
	r := <-reply
	return r.c, r.err
}

// dial opens a connection from inside the session's namespace.
func (s *session) dial(network, addr string) (net.Conn, error) {
	var c net.Conn
	err := s.ns.Do(func() error {
		var err error
		c, err = net.DialTimeout(network, addr, 3*time.Second)
		return err
	})
	return c, err
}

// lookup resolves name from inside the namespace against server (the
// namespace's DNS address when invalid) and returns the addresses or the
// DNS error.
func (s *session) lookup(t testing.TB, server netip.Addr, network, name string) ([]netip.Addr, error) {
	t.Helper()
	if !server.IsValid() {
		server = s.ns.DNS()
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return s.dial("udp", hostPort(server, 53))
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.LookupNetIP(ctx, network, name)
}

// curl runs curl inside the namespace, with the namespace's resolv.conf
// mounted over /etc/resolv.conf in a mount namespace of its own, and returns
// its output and exit code.
func (s *session) curl(t testing.TB, args ...string) (string, int) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	rc := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(rc, s.ns.ResolvConf(), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `mount --bind "$0" /etc/resolv.conf && exec curl -sS -k --max-time 5 "$@"`
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, rc}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := s.ns.Start(cmd); err != nil {
		t.Fatalf("start curl: %v", err)
	}
	err := cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("curl: %v", err)
	}
	return out.String(), code
}
