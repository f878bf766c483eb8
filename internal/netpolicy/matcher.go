package netpolicy

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// Matcher decides single connections against one compiled policy. It is
// immutable and safe for concurrent use; a policy change compiles a new
// one.
type Matcher struct {
	restricted bool
	names      []nameRule
	addrs      []addrRule
}

type nameRule struct {
	// name is the exact name, or for a glob the suffix ".example.test"
	// that a matching name ends with.
	name  string
	glob  bool
	ports []int
	desc  string
}

type addrRule struct {
	prefix netip.Prefix
	ports  []int
	desc   string
}

// Compile validates p and builds its Matcher. A disabled policy compiles
// to a Matcher that allows everything.
func Compile(p api.NetworkPolicy) (*Matcher, error) {
	n, err := Normalize(p)
	if err != nil {
		return nil, err
	}
	m := &Matcher{restricted: n.Enabled}
	if !n.Enabled {
		return m, nil
	}
	for _, r := range n.Allow {
		desc := Describe(r)
		switch {
		case r.Hostname != "":
			if rest, ok := strings.CutPrefix(r.Hostname, "*"); ok {
				m.names = append(m.names, nameRule{name: rest, glob: true, ports: r.Ports, desc: desc})
			} else {
				m.names = append(m.names, nameRule{name: r.Hostname, ports: r.Ports, desc: desc})
			}
		default:
			s := r.IPv4 + r.IPv6
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				a := netip.MustParseAddr(s) // Normalize wrote it.
				pfx = netip.PrefixFrom(a, a.BitLen())
			}
			m.addrs = append(m.addrs, addrRule{prefix: pfx, ports: r.Ports, desc: desc})
		}
	}
	return m, nil
}

// Restricted reports whether the policy restricts anything. A nil Matcher
// is unrestricted.
func (m *Matcher) Restricted() bool { return m != nil && m.restricted }

// AllowName decides a connection to host (a TLS SNI or HTTP Host, matched
// case-insensitively, a trailing dot ignored) on port against the
// policy's hostname rules. It returns the description of the first rule
// that allows it, or "" and false; an unrestricted Matcher allows
// everything with rule "". An IP literal matches no hostname rule, and
// neither does a host that is not a DNS name (an empty label, a byte
// other than a letter, digit, '-' or '_'), so no trick of spelling
// reaches a glob's suffix.
func (m *Matcher) AllowName(host string, port uint16) (rule string, ok bool) {
	if !m.Restricted() {
		return "", true
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if !dnsName(host) {
		return "", false
	}
	for _, r := range m.names {
		if !portAllowed(r.ports, port) {
			continue
		}
		if r.glob {
			if len(host) > len(r.name) && strings.HasSuffix(host, r.name) {
				return r.desc, true
			}
		} else if host == r.name {
			return r.desc, true
		}
	}
	return "", false
}

// AllowAddr decides a connection to addr on port against the policy's
// ipv4 and ipv6 rules; an IPv4-mapped IPv6 address is decided as its IPv4
// address. It returns the description of the first rule that allows it,
// or "" and false; an unrestricted Matcher allows everything with rule "".
func (m *Matcher) AllowAddr(addr netip.Addr, port uint16) (rule string, ok bool) {
	if !m.Restricted() {
		return "", true
	}
	addr = addr.Unmap().WithZone("")
	for _, r := range m.addrs {
		if portAllowed(r.ports, port) && r.prefix.Contains(addr) {
			return r.desc, true
		}
	}
	return "", false
}

// dnsName reports whether h (lower-case) is a DNS name: labels of 1 to 63
// letters, digits, '-' and '_', at most 253 bytes in all.
func dnsName(h string) bool {
	if h == "" || len(h) > maxHostnameLen {
		return false
	}
	n := 0
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case c == '.':
			if n == 0 {
				return false
			}
			n = 0
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			if n++; n > 63 {
				return false
			}
		default:
			return false
		}
	}
	return n > 0
}

func portAllowed(ports []int, port uint16) bool {
	if len(ports) == 0 {
		return true
	}
	_, found := slices.BinarySearch(ports, int(port))
	return found
}
