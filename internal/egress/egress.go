// Package egress enforces a session's network policy outside its sandbox.
//
// A [Namespace] is a network namespace whose only way out is a TUN device.
// [Serve] terminates everything the namespace sends through that device in
// gVisor's userspace TCP/IP stack, running in the worker's own namespace, and
// forwards what the [Policy] allows: TCP connections are matched by the name
// in a TLS ClientHello (SNI) or an HTTP/1 Host header, bound to the addresses
// that name resolves to on the host, or else by address; DNS on port 53, to
// whatever server the session names, is answered by the engine itself; other
// UDP is relayed per flow by address. Session code inside the namespace has
// no route that bypasses the engine, whatever it does with proxies, raw
// addresses, IPv6, other DNS servers or raw sockets.
package egress

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"time"
)

// Policy decides which destinations a session may reach. *netpolicy.Matcher
// implements it; the engine calls it concurrently, so implementations must be
// safe for concurrent use and must not block.
type Policy interface {
	// AllowName reports whether host (lower case, no trailing dot) may be
	// reached on port, and the rule that allowed it.
	//
	// Port 0 means "on any port": implementations must allow (host, 0) when
	// any rule allows host on some port, a rule limited to ports [443]
	// included. The engine asks that when it answers a DNS query, before it
	// knows which port the session will use; a policy that refused port 0
	// would answer NXDOMAIN for names it allows on some ports only.
	AllowName(host string, port uint16) (rule string, ok bool)
	// AllowAddr reports whether addr may be reached on port, and the rule
	// that allowed it.
	AllowAddr(addr netip.Addr, port uint16) (rule string, ok bool)
	// Restricted reports whether the policy restricts anything. An
	// unrestricted policy lets every destination through (decisions are
	// still reported, with an empty rule).
	Restricted() bool
}

// NameRules is implemented by a [Policy] that can tell whether any of its
// hostname rules covers a port. When none does, a connection to an address
// no rule allows is reset at once instead of being accepted so its first
// bytes can be read for a name (which a client that waits for the server
// to speak first would only see fail after Config.PeekTimeout).
// *netpolicy.Matcher may implement it; the engine works without.
type NameRules interface {
	// HasNameRules reports whether some hostname rule allows some name on
	// port.
	HasNameRules(port uint16) bool
}

// Protocols of a [Decision].
const (
	ProtoTCP = "tcp"
	ProtoUDP = "udp"
	ProtoDNS = "dns"
)

// Decision is one allowed or denied attempt by the session to reach
// something. Allowed TCP connections and UDP flows are reported when they
// close, with the bytes moved each way; denied attempts when they are denied
// (UDP denials grouped per destination, with Count).
type Decision struct {
	// Time is when the attempt began.
	Time time.Time
	// Allow is whether the attempt was let through.
	Allow bool
	// Host is the name involved: the DNS question, the TLS SNI or the HTTP
	// Host; empty when none was seen.
	Host string
	// Addr is the destination address; invalid for DNS decisions.
	Addr netip.Addr
	// Port is the destination port (0 for DNS decisions).
	Port uint16
	// Protocol is ProtoTCP, ProtoUDP or ProtoDNS.
	Protocol string
	// Rule is the rule that allowed the attempt, or a short reason it was
	// denied ("no rule allows it", "name does not resolve to the address").
	Rule string
	// BytesOut and BytesIn count payload sent by the session and received
	// by it (allowed TCP and UDP only).
	BytesOut, BytesIn int64
	// Count is how many equal attempts this decision stands for (at least 1;
	// denied UDP datagrams and repeated DNS denials are grouped).
	Count int
}

// Config configures an [Engine]. The zero value of each field has the
// meaning its comment gives.
type Config struct {
	// Policy is the initial policy. Nil means unrestricted.
	Policy Policy
	// Always lists destinations that are reachable whatever the policy
	// (the control plane's gateway); they are forwarded without peeking.
	Always []netip.AddrPort
	// Resolver resolves names on the host, for DNS answers and for the
	// check that a name's connection goes to one of its addresses. Nil:
	// net.DefaultResolver (which honours /etc/hosts).
	Resolver *net.Resolver
	// Dial opens the host side of allowed connections and UDP flows. Nil:
	// a net.Dialer with a 10-second timeout.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// OnDecision is called for every allowed (when it closes, with bytes)
	// and denied attempt. It must not block: it runs on the engine's
	// goroutines.
	OnDecision func(Decision)
	// Log receives the engine's own diagnostics. Nil: discarded.
	Log *slog.Logger
	// MaxFlows caps the TCP connections and UDP flows open at once; a new
	// one past the cap is refused (and reported as denied). Zero: 1024.
	MaxFlows int
	// PeekTimeout bounds how long the engine waits for the first bytes of
	// a connection whose address no rule allows, to find a name in them.
	// Zero: 2 seconds.
	PeekTimeout time.Duration
	// UDPIdle is how long a UDP flow lives without traffic. Zero: 60 seconds.
	UDPIdle time.Duration
}

// Stats are the engine's counters since it started.
type Stats struct {
	// TCPAllowed and TCPDenied count TCP connections.
	TCPAllowed, TCPDenied int64
	// UDPAllowed and UDPDenied count UDP flows (denied: datagrams).
	UDPAllowed, UDPDenied int64
	// DNSAllowed and DNSDenied count DNS questions answered and refused.
	DNSAllowed, DNSDenied int64
	// BytesOut and BytesIn count payload relayed from and to the session.
	BytesOut, BytesIn int64
	// ActiveFlows is the number of TCP connections and UDP flows open now.
	ActiveFlows int64
	// Closed counts open connections closed because a new policy forbids them.
	Closed int64
}
