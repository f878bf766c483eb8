package netguard

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/atomicfile"
	"github.com/outpost-sh/outpost/internal/egress"
)

// Guard is a restricted session's enforcement point: its namespace and
// the engine serving it. Start the session's machine with Start; Close
// when the machine is gone.
type Guard struct {
	opts  Options
	log   *slog.Logger
	ns    *egress.Namespace
	eng   *egress.Engine
	batch *batcher

	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the bridges and the follower
	lns    []io.Closer    // the bridges' listeners in the namespace

	mu     sync.Mutex // guards policy
	policy *api.NetworkPolicy
}

// Check reports whether this machine can enforce a network policy: a
// namespace and its TUN device can be made here. The error says why not in
// a sentence.
func Check(ctx context.Context) error {
	ns, err := egress.NewNamespace(ctx)
	if err != nil {
		return err
	}
	return ns.Close()
}

// Start creates the session's namespace and serves it with opts.Policy.
func Start(ctx context.Context, opts Options) (*Guard, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	m, err := compile(opts.Policy)
	if err != nil {
		return nil, err
	}
	gw, err := gatewayAddrs(ctx, opts.Resolver, opts.GatewayURL)
	if err != nil {
		return nil, err
	}
	var ns *egress.Namespace
	if opts.Namespace != "" {
		ns, err = egress.JoinNamespace(ctx, opts.Namespace)
	} else {
		ns, err = egress.NewNamespace(ctx)
	}
	if err != nil {
		return nil, err
	}
	g := &Guard{opts: opts, log: opts.Log, ns: ns, policy: opts.Policy}
	g.ctx, g.cancel = context.WithCancel(context.WithoutCancel(ctx))
	g.batch = newBatcher(opts.Report, opts.Log)
	var always []netip.AddrPort
	var bridged int
	var bridgeErr error
	for _, ap := range gw {
		if ap.Addr().IsLoopback() {
			// The namespace has a loopback of its own: the gateway on the
			// host's is bridged into it at the same address and port. One
			// address that cannot be (::1 where IPv6 is off) is left out
			// while another reaches the gateway.
			if err := g.bridgeTCP(ap); err != nil {
				bridgeErr = err
				continue
			}
			bridged++
			continue
		}
		always = append(always, ap)
	}
	if bridgeErr != nil {
		if bridged == 0 && len(always) == 0 {
			g.Close()
			return nil, bridgeErr
		}
		g.log.Warn("one of the gateway's loopback addresses is not bridged into the session's namespace", "err", bridgeErr)
	}
	if opts.RelayNameservers {
		if err := g.relayNameservers(); err != nil {
			g.Close()
			return nil, err
		}
	}
	if opts.ResolvConf != "" {
		// Traversable, not listable: a sandbox's user reads its file by name.
		if err := os.MkdirAll(filepath.Dir(opts.ResolvConf), 0o711); err != nil {
			g.Close()
			return nil, fmt.Errorf("write the session's resolv.conf: %w", err)
		}
		if err := atomicfile.Write(opts.ResolvConf, ns.ResolvConf(), 0o644); err != nil {
			g.Close()
			return nil, fmt.Errorf("write the session's resolv.conf: %w", err)
		}
	}
	g.eng, err = egress.Serve(g.ctx, ns, egress.Config{Policy: m, Always: always, Resolver: opts.Resolver, Dial: opts.Dial,
		OnDecision: func(d egress.Decision) { g.batch.add(Decision(d)) }, Log: opts.Log})
	if err != nil {
		g.Close()
		return nil, err
	}
	g.batch.run(g.ctx)
	return g, nil
}

// Start starts cmd inside the session's namespace. The thread that forks
// it goes back to the caller's namespace (egress.Namespace.Start), so a
// child's parent-death signal (Pdeathsig, bwrap's --die-with-parent) does
// not fire as it returns.
func (g *Guard) Start(cmd *exec.Cmd) error { return g.ns.Start(cmd) }

// NamespacePath is a path to the namespace (setns, nsenter --net=, podman
// --network ns:PATH), valid while g is open.
func (g *Guard) NamespacePath() string { return g.ns.Path() }

// SetPolicy makes p the session's policy: new connections see it at once,
// open ones it forbids are closed. An invalid p changes nothing.
func (g *Guard) SetPolicy(p *api.NetworkPolicy) error {
	m, err := compile(p)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if policyEqual(g.policy, p) {
		return nil
	}
	g.policy = p
	g.eng.SetPolicy(m)
	g.log.Info("network policy changed", "session", g.opts.Session, "restricted", m.Restricted())
	return nil
}

// Stats are the engine's counters.
func (g *Guard) Stats() egress.Stats { return g.eng.Stats() }

// Close stops the engine, posts the decisions left and releases the
// namespace. Processes still inside lose their way out.
func (g *Guard) Close() {
	g.cancel()
	for _, l := range g.lns {
		l.Close()
	}
	g.wg.Wait()
	if g.eng != nil {
		g.eng.Close()
		if lost := g.batch.close(); lost > 0 {
			g.log.Warn("network decisions did not reach the transcript", "session", g.opts.Session, "decisions", lost)
		}
	}
	g.ns.Close()
	if g.opts.ResolvConf != "" {
		os.Remove(g.opts.ResolvConf)
	}
}

// bridgeTCP listens inside the namespace on ap, a loopback address of the
// host, and forwards each connection to ap on the host.
func (g *Guard) bridgeTCP(ap netip.AddrPort) error {
	var ln net.Listener
	err := g.ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", ap.String())
		return err
	})
	if err != nil {
		return fmt.Errorf("bridge the gateway at %s into the session's network namespace: %w", ap, err)
	}
	g.lns = append(g.lns, ln)
	d := net.Dialer{Timeout: 10 * time.Second}
	g.serveTCP(ln, "the gateway", func(ctx context.Context) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", ap.String())
	})
	return nil
}

// serveTCP relays each connection ln accepts to a new one from dial, until
// the guard closes. It runs on the guard's WaitGroup.
func (g *Guard) serveTCP(ln net.Listener, what string, dial func(context.Context) (net.Conn, error)) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		var conns sync.WaitGroup
		defer conns.Wait()
		// A bridge is open whatever the policy: past maxBridged it
		// accepts nothing until a relayed connection ends, so session
		// code that opens connections as fast as it can waits in the
		// listener's backlog instead of costing the worker two sockets
		// (and the control plane a connection) each.
		slots := make(chan struct{}, maxBridged)
		for {
			select {
			case slots <- struct{}{}:
			case <-g.ctx.Done():
				return
			}
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer func() { <-slots }()
				g.pipe(c, what, dial)
			}()
		}
	}()
}

// pipe copies between c and a new connection from dial until either side
// ends or the guard closes.
func (g *Guard) pipe(c net.Conn, what string, dial func(context.Context) (net.Conn, error)) {
	defer c.Close()
	up, err := dial(g.ctx)
	if err != nil {
		g.log.Warn("cannot reach "+what+" for the session's namespace", "err", err)
		return
	}
	defer up.Close()
	stop := context.AfterFunc(g.ctx, func() { c.Close(); up.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(c, up)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	<-done
}

// relayNameservers answers DNS over UDP and TCP inside the namespace on
// each loopback nameserver of the host's /etc/resolv.conf, by relaying
// the queries to the engine's DNS address. TCP too: a resolver handed a
// truncated answer (a name with many addresses) asks again over TCP.
func (g *Guard) relayNameservers() error {
	path := g.opts.hostResolvConf
	if path == "" {
		path = "/etc/resolv.conf"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil // no resolv.conf: the resolver's default (loopback) is not relayed
	}
	for _, a := range loopbackNameservers(b) {
		ap := netip.AddrPortFrom(a, 53)
		var pc net.PacketConn
		err := g.ns.Do(func() error {
			var err error
			pc, err = net.ListenPacket("udp", ap.String())
			return err
		})
		if err != nil {
			return fmt.Errorf("answer DNS at %s in the session's network namespace: %w", ap, err)
		}
		g.lns = append(g.lns, pc)
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.relayDNS(pc)
		}()
		var ln net.Listener
		err = g.ns.Do(func() error {
			var err error
			ln, err = net.Listen("tcp", ap.String())
			return err
		})
		if err != nil {
			return fmt.Errorf("answer DNS over TCP at %s in the session's network namespace: %w", ap, err)
		}
		g.lns = append(g.lns, ln)
		upstream := netip.AddrPortFrom(g.ns.DNS(), 53).String()
		g.serveTCP(ln, "the namespace's DNS", func(ctx context.Context) (net.Conn, error) {
			var up net.Conn
			err := g.ns.Do(func() error {
				d := net.Dialer{Timeout: 5 * time.Second}
				var err error
				up, err = d.DialContext(ctx, "tcp", upstream)
				return err
			})
			return up, err
		})
	}
	return nil
}

// relayDNS forwards each query pc receives to the engine and its answer
// back, at most maxRelays at once: session code can send queries far
// faster than the engine answers them once its DNS slots are taken, and
// each relayed query holds a socket and a goroutine for up to 5 seconds.
// Past the bound the relay stops reading, and the kernel drops what no
// longer fits pc's buffer, as a busy nameserver would.
func (g *Guard) relayDNS(pc net.PacketConn) {
	upstream := netip.AddrPortFrom(g.ns.DNS(), 53).String()
	buf := make([]byte, 65535)
	var relays sync.WaitGroup
	defer relays.Wait()
	slots := make(chan struct{}, maxRelays)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		q := bytes.Clone(buf[:n])
		select {
		case slots <- struct{}{}:
		case <-g.ctx.Done():
			return
		}
		relays.Add(1)
		go func() {
			defer relays.Done()
			defer func() { <-slots }()
			var up net.Conn
			err := g.ns.Do(func() error {
				var err error
				up, err = net.Dial("udp", upstream)
				return err
			})
			if err != nil {
				return
			}
			defer up.Close()
			_ = up.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := up.Write(q); err != nil {
				return
			}
			ans := make([]byte, 65535)
			m, err := up.Read(ans)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(ans[:m], from)
		}()
	}
}

// loopbackNameservers lists the loopback addresses of a resolv.conf's
// nameserver lines.
func loopbackNameservers(resolvConf []byte) []netip.Addr {
	var out []netip.Addr
	sc := bufio.NewScanner(bytes.NewReader(resolvConf))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		if a, err := netip.ParseAddr(f[1]); err == nil && a.Unmap().IsLoopback() {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// Follow applies the policy of the session's newer queue entries (entry,
// read after each value on updated) until the guard closes: a change a
// person makes to a running session's policy reaches the engine as soon
// as the queue watch shows it.
func (g *Guard) Follow(updated <-chan struct{}, entry func() api.QueueEntry) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		follow(g.ctx, g, updated, entry, g.log.Warn)
	}()
}

// maxRelays bounds the queries the loopback nameserver relay has in
// flight, each with a socket to the engine.
const maxRelays = 64

// maxBridged bounds the connections a gateway bridge relays at once.
const maxBridged = 256
