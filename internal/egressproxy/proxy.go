// Package egressproxy is an HTTP proxy that enforces the hostname rules of
// sessions' network policies where a packet filter cannot see names: the
// Kubernetes operator serves it, and each restricted session pod's
// NetworkPolicy lets the pod reach the proxy and nothing else by name.
//
// A client authenticates as its session (Proxy-Authorization Basic, user
// the session id, password the session's proxy secret), then asks for a
// tunnel (CONNECT host:port) or sends a plain-HTTP request in absolute
// form. The proxy decides the name against the session's current policy,
// resolves it itself and dials only an address it resolved to, so an
// allowed name cannot carry a connection to another address (domain
// fronting); an IP literal is allowed only by an address rule; a TLS
// ClientHello in a tunnel must name the host the tunnel was opened for.
package egressproxy

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/netutil"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/netpolicy"
)

// Defaults of Options' zero values.
const (
	DefaultMaxTunnels       = 64
	DefaultMaxConns         = 4096
	DefaultDialTimeout      = 10 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultIdleTimeout      = 5 * time.Minute
	// DefaultFirstBytesWait is how long a tunnel waits for the client's
	// first bytes before it takes the protocol for one where the server
	// speaks first (SSH banners, SMTP) and stops looking for a ClientHello.
	DefaultFirstBytesWait = 2 * time.Second
)

// Session is what the proxy knows of a session at one moment.
type Session struct {
	// Secret is the session's proxy password; a session with an empty
	// Secret is refused.
	Secret string
	// Policy is the session's current effective network policy; nil or
	// disabled allows everything.
	Policy *api.NetworkPolicy
}

// Options configure a Proxy.
type Options struct {
	// Lookup returns the session's current state, false when the proxy
	// serves no such session. It is called for every request and tunnel,
	// so a policy change applies to the next connection. Required.
	Lookup func(sessionID string) (Session, bool)
	// Resolve resolves a host name to addresses; nil uses the operator's
	// resolver (net.DefaultResolver).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial dials a TCP address; nil uses a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Report receives every decision of a session; nil drops them. It must
	// not block.
	Report func(sessionID string, d api.NetworkDecision)
	// MaxTunnels bounds a session's open tunnels and requests; zero means
	// DefaultMaxTunnels.
	MaxTunnels int
	// MaxConns bounds the client connections open at once, authenticated
	// or not (each session's are bounded by MaxTunnels too); zero means
	// DefaultMaxConns. Beyond it new connections wait to be accepted.
	MaxConns int
	// DialTimeout bounds resolving and dialling; zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// HandshakeTimeout bounds reading a request head and a ClientHello;
	// zero means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a tunnel that moved no byte for that long; zero
	// means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// FirstBytesWait: see DefaultFirstBytesWait; zero means that.
	FirstBytesWait time.Duration
	// AllowLocal lets names resolve to loopback and link-local addresses
	// without an address rule. Only tests set it: in a pod those are the
	// operator itself and the cloud's metadata service.
	AllowLocal bool
	// Logger receives the proxy's log; nil discards it.
	Logger *slog.Logger
}

// Proxy is the egress proxy. Serve it on a listener; Recheck a session
// whose policy changed.
type Proxy struct {
	o   Options
	log *slog.Logger

	mu      sync.Mutex // guards tunnels
	tunnels map[string]map[*tunnel]struct{}
	wg      sync.WaitGroup // requests and tunnels being served
}

// New returns a proxy.
func New(o Options) *Proxy {
	if o.MaxTunnels <= 0 {
		o.MaxTunnels = DefaultMaxTunnels
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.FirstBytesWait <= 0 {
		o.FirstBytesWait = DefaultFirstBytesWait
	}
	if o.Resolve == nil {
		o.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if o.Dial == nil {
		var d net.Dialer
		o.Dial = d.DialContext
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Proxy{o: o, log: log, tunnels: map[string]map[*tunnel]struct{}{}}
}

// Serve serves the proxy on ln until ctx ends, then closes every tunnel
// and returns nil once they are gone.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: p.o.HandshakeTimeout,
		IdleTimeout:       p.o.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(netutil.LimitListener(ln, p.o.MaxConns)) }()
	var err error
	select {
	case <-ctx.Done():
		_ = srv.Close()
		<-errc
	case err = <-errc:
		_ = srv.Close()
	}
	p.closeAll()
	p.wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("serve egress proxy: %w", err)
	}
	return nil
}

// target is what a request asks to reach.
type target struct {
	host string     // the name asked for; "" for an IP literal
	ip   netip.Addr // the IP literal, when host is ""
	port uint16
}

func (t target) String() string {
	if t.host != "" {
		return net.JoinHostPort(t.host, strconv.Itoa(int(t.port)))
	}
	return netip.AddrPortFrom(t.ip, t.port).String()
}

// ServeHTTP answers one proxy request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A hijacked tunnel outlives the server's own tracking: Serve waits
	// for it here.
	p.wg.Add(1)
	defer p.wg.Done()
	id, ok := p.authenticate(r)
	if !ok {
		w.Header().Set("Proxy-Authenticate", `Basic realm="outpost egress"`)
		http.Error(w, "proxy authentication required: use the session's proxy URL", http.StatusProxyAuthRequired)
		return
	}
	t, err := parseTarget(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tn := &tunnel{id: id, t: t}
	if !p.acquire(tn) {
		p.deny(id, t, netip.Addr{}, "too many open connections")
		http.Error(w, fmt.Sprintf("refused: the session has %d connections open through the proxy, the most it may", p.o.MaxTunnels),
			http.StatusTooManyRequests)
		return
	}
	defer p.remove(tn)
	upstream, addr, rule, err := p.open(r.Context(), id, t)
	if err != nil {
		var d denial
		if errors.As(err, &d) {
			p.deny(id, t, addr, d.why)
			http.Error(w, "refused by the session's network policy: "+d.why, http.StatusForbidden)
			return
		}
		p.log.Debug("cannot reach an allowed destination", "session", id, "target", t, "err", err)
		http.Error(w, fmt.Sprintf("cannot reach %s: %v", t, err), http.StatusBadGateway)
		return
	}
	tn.rule = rule
	if !tn.setUp(upstream, addr) {
		http.Error(w, "refused by the session's network policy: "+tn.revokedWhy(), http.StatusForbidden)
		return
	}
	if r.Method == http.MethodConnect {
		p.connect(w, tn)
		return
	}
	p.forward(w, r, tn)
}

// authenticate returns the session the request's credential belongs to.
// An unknown session and a wrong secret look the same to the client.
func (p *Proxy) authenticate(r *http.Request) (string, bool) {
	h := r.Header.Get("Proxy-Authorization")
	if h == "" {
		return "", false
	}
	// net/http parses Basic credentials of the Authorization header only.
	fake := http.Request{Header: http.Header{"Authorization": {h}}}
	id, secret, ok := fake.BasicAuth()
	if !ok || id == "" {
		return "", false
	}
	s, found := p.o.Lookup(id)
	if !found || s.Secret == "" {
		return "", false
	}
	if subtle.ConstantTimeCompare([]byte(secret), []byte(s.Secret)) != 1 {
		return "", false
	}
	return id, true
}

// parseTarget reads the destination of a CONNECT (authority form, a port
// required) or of a plain-HTTP request (absolute form, port 80 unless
// given).
func parseTarget(r *http.Request) (target, error) {
	hostport := r.Host
	if r.Method != http.MethodConnect {
		if r.URL == nil || !r.URL.IsAbs() || r.URL.Host == "" {
			return target{}, errors.New("not a proxy request: send CONNECT host:port, or a plain-HTTP request with an absolute URL")
		}
		if r.URL.Scheme != "http" {
			return target{}, fmt.Errorf("scheme %q is not proxied as a plain request: use CONNECT for it", r.URL.Scheme)
		}
		hostport = r.URL.Host
		if r.URL.Port() == "" {
			hostport = net.JoinHostPort(r.URL.Hostname(), "80")
		}
	}
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return target{}, fmt.Errorf("destination %q is not host:port", hostport)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || port == 0 {
		return target{}, fmt.Errorf("destination port %q is not a port from 1 to 65535", ps)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return target{ip: ip.Unmap().WithZone(""), port: uint16(port)}, nil
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" {
		return target{}, errors.New("destination host is empty")
	}
	return target{host: host, port: uint16(port)}, nil
}

// denial is a decision against a connection, with its reason.
type denial struct{ why string }

func (d denial) Error() string { return d.why }

// decide decides t against the session's current policy: the rule that
// allows it, or a denial. byAddr says no hostname rule allows the name,
// so only its addresses an address rule allows may be dialled (what the
// pod could reach directly anyway).
func (p *Proxy) decide(id string, t target) (m *netpolicy.Matcher, rule string, byAddr bool, err error) {
	s, ok := p.o.Lookup(id)
	if !ok {
		return nil, "", false, denial{"the session is not served here any more"}
	}
	var pol api.NetworkPolicy
	if s.Policy != nil {
		pol = *s.Policy
	}
	m, err = netpolicy.Compile(pol)
	if err != nil {
		return nil, "", false, denial{"the session's network policy is not valid"}
	}
	if t.host == "" {
		rule, ok := m.AllowAddr(t.ip, t.port)
		if !ok {
			return nil, "", false, denial{fmt.Sprintf("no address rule allows %s (an IP literal is allowed only by an ipv4/ipv6 rule)", t)}
		}
		return m, rule, false, nil
	}
	if rule, ok := m.AllowName(t.host, t.port); ok {
		return m, rule, false, nil
	}
	return m, "", true, nil
}

// recheck decides an open tunnel again.
func (p *Proxy) recheck(tn *tunnel) error {
	m, _, byAddr, err := p.decide(tn.id, tn.t)
	if err != nil || !byAddr {
		return err
	}
	if a := tn.dialled(); a.IsValid() {
		if _, ok := m.AllowAddr(a, tn.t.port); !ok {
			return denial{fmt.Sprintf("no rule allows %s at %s", tn.t, a)}
		}
	}
	return nil
}

// open decides t and dials it: an IP literal as is, a name only at an
// address the proxy resolved it to.
func (p *Proxy) open(ctx context.Context, id string, t target) (net.Conn, netip.Addr, string, error) {
	m, rule, byAddr, err := p.decide(id, t)
	if err != nil {
		return nil, t.ip, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, p.o.DialTimeout)
	defer cancel()
	addrs := []netip.Addr{t.ip}
	if t.host != "" {
		addrs, err = p.o.Resolve(ctx, t.host)
		if err != nil && byAddr {
			return nil, netip.Addr{}, "", denial{fmt.Sprintf("no rule allows %s", t)}
		}
		if err != nil {
			return nil, netip.Addr{}, "", fmt.Errorf("resolve %s: %w", t.host, err)
		}
	}
	var errs []error
	var last netip.Addr
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		last = a
		rule := rule
		if byAddr {
			r, ok := m.AllowAddr(a, t.port)
			if !ok {
				errs = append(errs, denial{fmt.Sprintf("no rule allows %s", t)})
				continue
			}
			rule = r
		}
		if t.host != "" && !p.o.AllowLocal && local(a) {
			if _, ok := m.AllowAddr(a, t.port); !ok {
				errs = append(errs, denial{fmt.Sprintf("%s resolves to %s, a local address no address rule allows", t.host, a)})
				continue
			}
		}
		c, err := p.o.Dial(ctx, "tcp", netip.AddrPortFrom(a, t.port).String())
		if err == nil {
			return c, a, rule, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, netip.Addr{}, "", fmt.Errorf("%s has no address", t.host)
	}
	var d denial
	if len(errs) == len(addrs) && errors.As(errs[0], &d) {
		if byAddr {
			last = netip.Addr{} // the name's addresses are not the program's business
		}
		return nil, last, "", d
	}
	return nil, last, "", errors.Join(errs...)
}

// local reports whether a is an address of the proxy's own machine or
// link: loopback, link-local (the cloud metadata service), unspecified or
// multicast.
func local(a netip.Addr) bool {
	return a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsUnspecified() || a.IsMulticast()
}

// acquire adds tn to the session's open connections, unless it has
// MaxTunnels open already.
func (p *Proxy) acquire(tn *tunnel) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	set := p.tunnels[tn.id]
	if len(set) >= p.o.MaxTunnels {
		return false
	}
	if set == nil {
		set = map[*tunnel]struct{}{}
		p.tunnels[tn.id] = set
	}
	set[tn] = struct{}{}
	return true
}

func (p *Proxy) remove(tn *tunnel) {
	p.mu.Lock()
	defer p.mu.Unlock()
	set := p.tunnels[tn.id]
	delete(set, tn)
	if len(set) == 0 {
		delete(p.tunnels, tn.id)
	}
}

// Recheck decides the session's open tunnels again against its current
// policy and closes those it forbids now (all of them when the session is
// gone). Call it when the session's policy changed.
func (p *Proxy) Recheck(sessionID string) {
	p.mu.Lock()
	var open []*tunnel
	for tn := range p.tunnels[sessionID] {
		open = append(open, tn)
	}
	p.mu.Unlock()
	for _, tn := range open {
		if err := p.recheck(tn); err != nil {
			p.log.Info("closing a tunnel the session's policy forbids now", "session", sessionID, "target", tn.t, "why", err)
			tn.revoke("the session's policy no longer allows it: " + err.Error())
		}
	}
}

func (p *Proxy) closeAll() {
	p.mu.Lock()
	var all []*tunnel
	for _, set := range p.tunnels {
		for tn := range set {
			all = append(all, tn)
		}
	}
	p.mu.Unlock()
	for _, tn := range all {
		tn.close()
	}
}

// deny reports a denied connection.
func (p *Proxy) deny(id string, t target, addr netip.Addr, why string) {
	p.log.Debug("egress denied", "session", id, "target", t, "why", why)
	if p.o.Report == nil {
		return
	}
	d := api.NetworkDecision{Time: time.Now().UnixMilli(), Decision: api.DecisionDeny, Host: t.host, Port: int(t.port),
		Protocol: api.ProtocolTCP, Rule: truncate(why, 500)}
	if addr.IsValid() {
		d.Address = addr.String()
	}
	p.o.Report(id, d)
}

// allow reports an allowed connection once it is done, with its bytes.
func (p *Proxy) allow(tn *tunnel) {
	if p.o.Report == nil {
		return
	}
	p.o.Report(tn.id, api.NetworkDecision{Time: tn.start.UnixMilli(), Decision: api.DecisionAllow, Host: tn.t.host,
		Address: tn.addr.String(), Port: int(tn.t.port), Protocol: api.ProtocolTCP, Rule: truncate(tn.rule, 500),
		BytesOut: tn.out.Load(), BytesIn: tn.in.Load()})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
