// Package netguard runs the enforcement point of a restricted session for
// the claimer that starts its machine (the worker, the bwrap
// orchestrator): an egress namespace the session's sandbox starts in, the
// egress engine serving it with the session's compiled network policy and
// the control plane always reachable, bridges for a control plane or a
// nameserver on the host's loopback (which a namespace cannot see), the
// policy's live changes, and the engine's decisions batched onto the
// session's transcript.
//
// It is the glue between internal/egress (the mechanism) and the fleet's
// claims; what a policy means is internal/netpolicy's.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/netpolicy"
)

// Options configure a Guard. Session and GatewayURL are required.
type Options struct {
	// Session is the session's id, for logs.
	Session string
	// Policy is the session's network policy at start (the queue entry's
	// spec.network_policy). Nil or disabled is unrestricted.
	Policy *api.NetworkPolicy
	// GatewayURL is the gateway the session's remote dials: every address
	// its host resolves to here is reachable whatever the policy.
	GatewayURL string
	// Report posts a batch of decisions to the session's transcript; nil
	// drops them (logged at debug level). It is called from one goroutine
	// at a time.
	Report func(ctx context.Context, batch []api.NetworkDecision) error
	// ResolvConf is where the namespace's resolv.conf is written, on the
	// host, out of the session's reach (a sandbox binds it over
	// /etc/resolv.conf). Empty writes none.
	ResolvConf string
	// RelayNameservers makes the guard answer DNS inside the namespace on
	// the loopback nameservers the host's /etc/resolv.conf names (a
	// systemd-resolved stub at 127.0.0.53, say), which a process in the
	// namespace would otherwise ask in vain: for sessions that read the
	// host's resolv.conf (user isolation).
	RelayNameservers bool
	// Resolver resolves names on the host (the gateway's, and the names
	// the policy allows). Nil: net.DefaultResolver.
	Resolver *net.Resolver
	// Dial opens the host side of allowed connections. Nil: a dialer
	// with a 10-second timeout. Tests point it at their own servers.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Namespace, when set, is a path to an existing network namespace with
	// nothing but lo (a container's, /proc/PID/ns/net) that the guard
	// serves instead of making one: for machines whose runtime makes their
	// namespace. Empty: the guard makes the namespace.
	Namespace string
	// Log receives the guard's log, one debug line per denied attempt.
	// Nil discards it.
	Log *slog.Logger

	// hostResolvConf is the host's resolv.conf RelayNameservers reads;
	// empty: /etc/resolv.conf. Tests point it at their own.
	hostResolvConf string
}

// compile is the matcher of a session's policy; nil is unrestricted.
func compile(p *api.NetworkPolicy) (*netpolicy.Matcher, error) {
	if p == nil {
		return netpolicy.Compile(api.NetworkPolicy{})
	}
	m, err := netpolicy.Compile(*p)
	if err != nil {
		return nil, fmt.Errorf("the session's network policy is not valid: %w", err)
	}
	return m, nil
}

// gatewayAddrs resolves the gateway URL's host on the host, with its port.
func gatewayAddrs(ctx context.Context, r *net.Resolver, gateway string) ([]netip.AddrPort, error) {
	u, err := url.Parse(gateway)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("the gateway URL %q has no host", gateway)
	}
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "http", "ws":
			port = "80"
		default:
			port = "443"
		}
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return nil, fmt.Errorf("the gateway URL %q has no valid port", gateway)
	}
	host := u.Hostname()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = r.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, fmt.Errorf("resolve the gateway's host %s: %w", host, err)
	}
	var out []netip.AddrPort
	for _, a := range addrs {
		out = append(out, netip.AddrPortFrom(a.Unmap(), uint16(p)))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the gateway's host %s resolves to no address", host)
	}
	return out, nil
}

// ErrUnsupported is the cause of Check's answer on a system without
// network namespaces.
var ErrUnsupported = errors.New("network policies are enforced on Linux only (network namespaces and a TUN device)")
