//go:build linux

package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gvlog "gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

const (
	nicID = 1
	// maxHandshakes caps TCP connections between SYN and the policy's
	// answer; SYNs past it are dropped, so a SYN flood costs little.
	maxHandshakes = 256
	// nameTTL is how long the engine remembers the addresses it answered
	// for a name, for the check that a connection naming it goes there.
	nameTTL = 10 * time.Minute
	// maxNames bounds that memory.
	maxNames = 4096
)

var quietGVisor sync.Once

// Engine enforces a policy on a [Namespace]'s traffic. Its methods are safe
// for concurrent use.
type Engine struct {
	ns        *Namespace
	log       *slog.Logger
	resolver  *net.Resolver
	dial      func(ctx context.Context, network, address string) (net.Conn, error)
	decide    func(Decision)
	always    map[netip.AddrPort]bool
	peekWait  time.Duration
	udpIdle   time.Duration
	st        *stack.Stack
	link      *tunLink
	slots     chan struct{} // one per open flow, up to MaxFlows
	policy    atomic.Pointer[policyBox]
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup // the flows' goroutines
	once      sync.Once
	watchDone chan struct{}

	mu        sync.Mutex // guards the following
	closed    bool
	flows     map[*flow]struct{}
	names     map[string]nameEntry
	udpDenied map[netip.AddrPort]*denyGroup

	n counters
}

type policyBox struct{ p Policy }

type counters struct {
	tcpAllowed, tcpDenied, udpAllowed, udpDenied, dnsAllowed, dnsDenied atomic.Int64
	bytesOut, bytesIn, active, closed                                   atomic.Int64
}

type nameEntry struct {
	addrs   []netip.Addr
	expires time.Time
}

// flow is one open TCP connection or UDP flow.
type flow struct {
	proto   string
	host    string // set under Engine.mu once the flow is decided by name
	peeking bool   // its name is being read; guarded by Engine.mu
	addr    netip.Addr
	port    uint16
	start   time.Time
	rule    string
	out, in atomic.Int64
	denied  bool // decided against after all: reported by deny, not finish

	mu     sync.Mutex // guards killFn
	killFn func()
}

// setKill sets what kill does.
func (f *flow) setKill(fn func()) {
	f.mu.Lock()
	f.killFn = fn
	f.mu.Unlock()
}

// kill closes both sides of the flow; safe to call more than once and
// before the flow is connected.
func (f *flow) kill() {
	f.mu.Lock()
	fn := f.killFn
	f.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// Serve starts enforcing cfg on n's traffic. It runs until ctx ends or
// Close is called. A namespace is served by one engine.
func Serve(ctx context.Context, n *Namespace, cfg Config) (*Engine, error) {
	if n == nil {
		return nil, errors.New("serve egress: no namespace")
	}
	n.mu.Lock()
	switch {
	case n.closed:
		n.mu.Unlock()
		return nil, errors.New("serve egress: the namespace is closed")
	case n.served:
		n.mu.Unlock()
		return nil, errors.New("serve egress: the namespace already has an engine")
	}
	n.served = true
	n.mu.Unlock()

	e := &Engine{
		ns:        n,
		log:       cfg.Log,
		resolver:  cfg.Resolver,
		dial:      cfg.Dial,
		decide:    cfg.OnDecision,
		always:    make(map[netip.AddrPort]bool, len(cfg.Always)),
		peekWait:  cfg.PeekTimeout,
		udpIdle:   cfg.UDPIdle,
		flows:     make(map[*flow]struct{}),
		names:     make(map[string]nameEntry),
		udpDenied: make(map[netip.AddrPort]*denyGroup),
		watchDone: make(chan struct{}),
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.resolver == nil {
		e.resolver = net.DefaultResolver
	}
	if e.dial == nil {
		d := &net.Dialer{Timeout: 10 * time.Second}
		e.dial = d.DialContext
	}
	if e.decide == nil {
		e.decide = func(Decision) {}
	}
	for _, ap := range cfg.Always {
		e.always[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = true
	}
	if e.peekWait <= 0 {
		e.peekWait = 2 * time.Second
	}
	if e.udpIdle <= 0 {
		e.udpIdle = 60 * time.Second
	}
	maxFlows := cfg.MaxFlows
	if maxFlows <= 0 {
		maxFlows = 1024
	}
	e.slots = make(chan struct{}, maxFlows)
	e.policy.Store(&policyBox{cfg.Policy})

	e.ctx, e.cancel = context.WithCancel(context.WithoutCancel(ctx))
	st, link, err := newStack(n.tunFD, n.vnetHdr, func(st *stack.Stack) {
		tcpFwd := tcp.NewForwarder(st, 0, maxHandshakes, e.handleTCP)
		st.SetTransportProtocolHandler(tcp.ProtocolNumber, tcpFwd.HandlePacket)
		udpFwd := udp.NewForwarder(st, e.handleUDP)
		st.SetTransportProtocolHandler(udp.ProtocolNumber, udpFwd.HandlePacket)
	})
	if err != nil {
		e.cancel()
		n.unserve()
		return nil, fmt.Errorf("serve egress: %w", err)
	}
	e.st, e.link = st, link

	go func() {
		defer close(e.watchDone)
		select {
		case <-ctx.Done():
		case <-e.ctx.Done():
		}
		e.once.Do(e.shutdown)
	}()
	return e, nil
}

// newStack builds the userspace stack on the TUN device: one NIC that
// accepts every destination (promiscuous) and answers from it (spoofing), so
// each connection the namespace opens lands in a forwarder. install sets the
// forwarders up before the first packet can arrive.
//
// The caller stops the link (tunLink.shutdown) before it closes the stack.
func newStack(tunFD int, vnetHdr bool, install func(*stack.Stack)) (*stack.Stack, *tunLink, error) {
	// gVisor logs to stderr on its own, at Info for packets a session can
	// craft at will (martians); the engine reports what matters through
	// decisions and its slog logger instead.
	quietGVisor.Do(func() { gvlog.SetLevel(gvlog.Warning) })
	st := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	sack := tcpip.TCPSACKEnabled(true)
	// gVisor's RACK recovery and cubic misbehave at high rates (tailscale
	// turns both off for the same reason).
	recovery := tcpip.TCPRecovery(0)
	reno := tcpip.CongestionControlOption("reno")
	// Buffers bound what a flow can pin when one side stops reading: with
	// the default MaxFlows, at most 1024 × 2 MiB of the worker's memory.
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4 << 10, Default: 256 << 10, Max: 1 << 20}
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: 4 << 10, Default: 256 << 10, Max: 1 << 20}
	// A SYN that meets an endpoint in TIME-WAIT is dropped (the forwarder
	// is no listener to hand it to), so a session that opens connections
	// fast, reusing its ports, would see timeouts. Between the namespace and
	// the stack there is no network to hold old duplicates: a short
	// TIME-WAIT is safe.
	timeWait := tcpip.TCPTimeWaitTimeoutOption(time.Second)
	for _, opt := range []tcpip.SettableTransportProtocolOption{&sack, &recovery, &reno, &rcv, &snd, &timeWait} {
		if err := st.SetTransportProtocolOption(tcp.ProtocolNumber, opt); err != nil {
			st.Close()
			return nil, nil, fmt.Errorf("set TCP option %T: %s", opt, err)
		}
	}
	install(st)
	link, err := newTUNLink(tunFD, tunMTU, vnetHdr)
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("attach TUN device: %w", err)
	}
	fail := func(format string, err tcpip.Error) (*stack.Stack, *tunLink, error) {
		link.shutdown()
		st.Close()
		st.Wait()
		return nil, nil, fmt.Errorf(format, err)
	}
	if err := st.CreateNIC(nicID, link); err != nil {
		return fail("create NIC: %s", err)
	}
	if err := st.SetPromiscuousMode(nicID, true); err != nil {
		return fail("promiscuous mode: %s", err)
	}
	if err := st.SetSpoofing(nicID, true); err != nil {
		return fail("spoofing: %s", err)
	}
	any4, _ := tcpip.NewSubnet(tcpip.AddrFromSlice(make([]byte, 4)), tcpip.MaskFromBytes(make([]byte, 4)))
	any6, _ := tcpip.NewSubnet(tcpip.AddrFromSlice(make([]byte, 16)), tcpip.MaskFromBytes(make([]byte, 16)))
	st.SetRouteTable([]tcpip.Route{{Destination: any4, NIC: nicID}, {Destination: any6, NIC: nicID}})
	return st, link, nil
}

// SetPolicy replaces the policy (nil: unrestricted). New connections see
// it at once; open connections and UDP flows it no longer allows are closed.
func (e *Engine) SetPolicy(p Policy) {
	e.policy.Store(&policyBox{p})
	e.mu.Lock()
	var doomed []*flow
	for f := range e.flows {
		if f.peeking {
			continue // decided again by splice once its name is known
		}
		if _, ok := e.permits(p, f.host, f.addr, f.port); !ok {
			doomed = append(doomed, f)
		}
	}
	e.mu.Unlock()
	for _, f := range doomed {
		e.n.closed.Add(1)
		e.log.Info("egress: closing a connection the new policy forbids", "protocol", f.proto, "host", f.host, "address", f.addr, "port", f.port)
		f.kill()
	}
}

// ruleHostOnly is the reason for refusing a destination only the worker
// itself could mean.
const ruleHostOnly = "the worker's own loopback, unspecified, broadcast and multicast addresses are not reachable"

// hostOnly reports whether a is an address that names the worker itself or
// no host at all. The session's own loopback never reaches the TUN device,
// so such a destination arrives only in a packet crafted to get the engine
// to dial the worker's loopback for it (a datagram to 0.0.0.0 passes the
// stack and, dialed from the host, lands on the host's loopback).
func hostOnly(a netip.Addr) bool {
	return a.IsLoopback() || a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// permits decides a destination: always-reachable ones first, then the
// worker's own addresses (never), then the policy, by the flow's name when
// it has one (its address was checked against the name when it opened) or
// by its address.
func (e *Engine) permits(p Policy, host string, addr netip.Addr, port uint16) (string, bool) {
	if e.always[netip.AddrPortFrom(addr, port)] {
		return "always reachable", true
	}
	if hostOnly(addr) {
		return ruleHostOnly, false
	}
	if p == nil || !p.Restricted() {
		return "", true
	}
	if host != "" {
		if rule, ok := p.AllowName(host, port); ok {
			return rule, true
		}
	}
	return p.AllowAddr(addr, port)
}

func (e *Engine) currentPolicy() Policy { return e.policy.Load().p }

func restricted(p Policy) bool { return p != nil && p.Restricted() }

// Stats returns the engine's counters; the bytes include those of flows
// still open.
func (e *Engine) Stats() Stats {
	var liveOut, liveIn int64
	e.mu.Lock()
	for f := range e.flows {
		liveOut += f.out.Load()
		liveIn += f.in.Load()
	}
	e.mu.Unlock()
	return Stats{
		TCPAllowed:  e.n.tcpAllowed.Load(),
		TCPDenied:   e.n.tcpDenied.Load(),
		UDPAllowed:  e.n.udpAllowed.Load(),
		UDPDenied:   e.n.udpDenied.Load(),
		DNSAllowed:  e.n.dnsAllowed.Load(),
		DNSDenied:   e.n.dnsDenied.Load(),
		BytesOut:    e.n.bytesOut.Load() + liveOut,
		BytesIn:     e.n.bytesIn.Load() + liveIn,
		ActiveFlows: e.n.active.Load(),
		Closed:      e.n.closed.Load(),
	}
}

// Close stops the engine: open connections are closed and the namespace
// loses its way out. It does not close the namespace.
func (e *Engine) Close() error {
	e.cancel()
	e.once.Do(e.shutdown)
	<-e.watchDone
	return nil
}

func (e *Engine) shutdown() {
	e.cancel()
	e.mu.Lock()
	e.closed = true
	flows := make([]*flow, 0, len(e.flows))
	for f := range e.flows {
		flows = append(flows, f)
	}
	e.mu.Unlock()
	for _, f := range flows {
		f.kill()
	}
	e.wg.Wait()
	e.flushUDPDenied(true)
	e.link.shutdown()
	e.st.Close()
	e.st.Wait()
	e.ns.unserve()
}

// takeSlot takes one of the MaxFlows slots; false when none is free.
func (e *Engine) takeSlot() bool {
	select {
	case e.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// giveSlot returns a slot takeSlot took.
func (e *Engine) giveSlot() { <-e.slots }

// begin registers a flow and takes a slot for it; false when the engine is
// closed or full. The caller runs finish when the flow ends.
func (e *Engine) begin(f *flow) bool {
	if !e.takeSlot() {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		e.giveSlot()
		return false
	}
	e.flows[f] = struct{}{}
	e.wg.Add(1)
	e.n.active.Add(1)
	return true
}

// finish unregisters f and reports it.
func (e *Engine) finish(f *flow) {
	e.mu.Lock()
	delete(e.flows, f)
	// Moved under the lock, so Stats counts the flow's bytes once.
	e.n.bytesOut.Add(f.out.Load())
	e.n.bytesIn.Add(f.in.Load())
	e.mu.Unlock()
	e.giveSlot()
	e.n.active.Add(-1)
	if f.denied {
		e.wg.Done()
		return
	}
	e.decide(Decision{
		Time: f.start, Allow: true, Host: f.host, Addr: f.addr, Port: f.port,
		Protocol: f.proto, Rule: f.rule, BytesOut: f.out.Load(), BytesIn: f.in.Load(), Count: 1,
	})
	e.wg.Done()
}

// enter counts the calling goroutine among those Close waits for (the
// caller runs e.wg.Done when it ends); false when the engine is closed.
func (e *Engine) enter() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.wg.Add(1)
	return true
}

// goTracked runs fn as a goroutine the engine waits for, unless it is closed.
func (e *Engine) goTracked(fn func()) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		fn()
	}()
	return true
}

func (e *Engine) deny(proto, host string, addr netip.Addr, port uint16, why string) {
	switch proto {
	case ProtoTCP:
		e.n.tcpDenied.Add(1)
	case ProtoDNS:
		e.n.dnsDenied.Add(1)
	}
	e.log.Debug("egress: denied", "protocol", proto, "host", host, "address", addr, "port", port, "reason", why)
	e.decide(Decision{Time: time.Now(), Host: host, Addr: addr, Port: port, Protocol: proto, Rule: why, Count: 1})
}

// resolvesTo reports whether host resolves, on the host, to addr: from the
// addresses the engine answered for it, else by asking the resolver now.
func (e *Engine) resolvesTo(ctx context.Context, host string, addr netip.Addr) bool {
	now := time.Now()
	e.mu.Lock()
	ent, ok := e.names[host]
	e.mu.Unlock()
	if ok && now.Before(ent.expires) && containsAddr(ent.addrs, addr) {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := e.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return false
	}
	e.remember(host, addrs)
	return containsAddr(addrs, addr)
}

func (e *Engine) remember(host string, addrs []netip.Addr) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.names) >= maxNames {
		for k, v := range e.names {
			if now.After(v.expires) {
				delete(e.names, k)
			}
		}
		if len(e.names) >= maxNames {
			clear(e.names)
		}
	}
	ent := e.names[host]
	if now.After(ent.expires) {
		ent.addrs = nil
	}
	for _, a := range addrs {
		if !containsAddr(ent.addrs, a) && len(ent.addrs) < 64 {
			ent.addrs = append(ent.addrs, a.Unmap())
		}
	}
	ent.expires = now.Add(nameTTL)
	e.names[host] = ent
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	a = a.Unmap()
	for _, b := range list {
		if b.Unmap() == a {
			return true
		}
	}
	return false
}

func addrOf(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip.Unmap()
}

func normalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// copyCounting copies src to dst, adding to n as it goes, with pooled
// buffers: a small one first, a large one once a read fills the small one.
// A bulk transfer then moves in fewer, larger writes (a fourth of the
// system calls on the host side), while the many flows that sit idle or
// move little hold only the small one.
func copyCounting(dst io.Writer, src io.Reader, n *atomic.Int64) error {
	pool := &smallBufs
	bp := pool.Get().(*[]byte)
	defer func() { pool.Put(bp) }()
	buf := *bp
	for {
		r, err := src.Read(buf)
		if r > 0 {
			w, werr := dst.Write(buf[:r])
			n.Add(int64(w))
			if werr != nil {
				return werr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if r == len(buf) && pool == &smallBufs {
			pool.Put(bp)
			pool = &largeBufs
			bp = pool.Get().(*[]byte)
			buf = *bp
		}
	}
}

var (
	smallBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}
	largeBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}
)
