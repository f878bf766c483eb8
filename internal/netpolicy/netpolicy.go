// Package netpolicy is the model of a session's network policy: it checks
// a policy a person or token wrote (Validate, Normalize), decides single
// connections against it (Matcher), compares two policies (Within: does a
// session's policy only narrow its outpost's?) and picks the one that
// applies to a session (Effective). It knows no enforcement: the egress
// engine asks a Matcher, and the server stores and shows the policies.
package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// maxHostnameLen is the longest DNS name in its text form.
const maxHostnameLen = 253

// Rule kinds, the words a rule's description starts with.
const (
	kindHostname = "hostname"
	kindIPv4     = "ipv4"
	kindIPv6     = "ipv6"
)

// Validate reports whether p is a policy the server accepts, with an error
// naming the first wrong rule by its index and saying what is wrong. The
// rules of a disabled policy are checked too, so a policy stored disabled
// can be enabled later as it is.
func Validate(p api.NetworkPolicy) error {
	_, err := Normalize(p)
	return err
}

// Normalize validates p and returns it in its canonical form: host names
// lower-case without a trailing dot, CIDR ranges with their host bits
// cleared, ports sorted without duplicates. The server stores policies in
// this form, so two spellings of one rule compare equal. Allow is never
// nil in the result, so it encodes as a JSON list.
func Normalize(p api.NetworkPolicy) (api.NetworkPolicy, error) {
	if len(p.Allow) > api.MaxNetworkPolicyRules {
		return api.NetworkPolicy{}, fmt.Errorf("network policy has %d allow rules; at most %d are allowed", len(p.Allow), api.MaxNetworkPolicyRules)
	}
	out := api.NetworkPolicy{Enabled: p.Enabled, Allow: make([]api.NetworkPolicyRule, 0, len(p.Allow))}
	for i, r := range p.Allow {
		n, err := normalizeRule(r)
		if err != nil {
			return api.NetworkPolicy{}, fmt.Errorf("network policy allow[%d]: %w", i, err)
		}
		out.Allow = append(out.Allow, n)
	}
	return out, nil
}

func normalizeRule(r api.NetworkPolicyRule) (api.NetworkPolicyRule, error) {
	set := 0
	for _, v := range []string{r.Hostname, r.IPv4, r.IPv6} {
		if v != "" {
			set++
		}
	}
	if set != 1 {
		return api.NetworkPolicyRule{}, errors.New(`set exactly one of "hostname", "ipv4" and "ipv6"`)
	}
	ports, err := normalizePorts(r.Ports)
	if err != nil {
		return api.NetworkPolicyRule{}, err
	}
	out := api.NetworkPolicyRule{Ports: ports}
	switch {
	case r.Hostname != "":
		h, err := normalizeHostname(r.Hostname)
		if err != nil {
			return api.NetworkPolicyRule{}, err
		}
		out.Hostname = h
	case r.IPv4 != "":
		pfx, err := parseRange(r.IPv4, false)
		if err != nil {
			return api.NetworkPolicyRule{}, fmt.Errorf("ipv4 %q: %w", r.IPv4, err)
		}
		out.IPv4 = formatRange(pfx)
	default:
		pfx, err := parseRange(r.IPv6, true)
		if err != nil {
			return api.NetworkPolicyRule{}, fmt.Errorf("ipv6 %q: %w", r.IPv6, err)
		}
		out.IPv6 = formatRange(pfx)
	}
	return out, nil
}

func normalizePorts(ports []int) ([]int, error) {
	if len(ports) == 0 {
		return nil, nil
	}
	if len(ports) > api.MaxNetworkPolicyPorts {
		return nil, fmt.Errorf("%d ports; at most %d are allowed per rule", len(ports), api.MaxNetworkPolicyPorts)
	}
	out := make([]int, 0, len(ports))
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("port %d is not between 1 and 65535", p)
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// normalizeHostname checks a hostname rule: a DNS name, or "*." and a DNS
// name. Letters, digits, '-' and '_' (service names such as
// _dmarc.example.test exist) in labels of 1 to 63 characters.
func normalizeHostname(h string) (string, error) {
	orig := h
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return "", fmt.Errorf("hostname %q is an IP address; use an ipv4 or ipv6 rule", orig)
	}
	name := h
	if rest, ok := strings.CutPrefix(h, "*."); ok {
		name = rest
	}
	if name == "" || name == "*" {
		return "", fmt.Errorf("hostname %q names no domain; a wildcard is \"*.\" followed by a domain, and an unrestricted policy sets enabled false", orig)
	}
	if len(h) > maxHostnameLen {
		return "", fmt.Errorf("hostname %q is longer than %d characters", orig, maxHostnameLen)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if err := checkLabel(l); err != nil {
			return "", fmt.Errorf("hostname %q: %w", orig, err)
		}
	}
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		return "", fmt.Errorf("hostname %q ends in a numeric label, which no DNS name does; use an ipv4 rule for an address", orig)
	}
	return h, nil
}

func checkLabel(l string) error {
	switch {
	case l == "":
		return errors.New("has an empty label")
	case l == "*":
		return errors.New(`may hold "*" only as its whole first label`)
	case len(l) > 63:
		return fmt.Errorf("label %q is longer than 63 characters", l)
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("label %q starts or ends with '-'", l)
	}
	for _, c := range l {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("label %q holds %q; only letters, digits, '-' and '_' are allowed", l, c)
		}
	}
	return nil
}

// parseRange parses an address or CIDR range of one family; an address is
// a range of one.
func parseRange(s string, v6 bool) (netip.Prefix, error) {
	var pfx netip.Prefix
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, errors.New("is not an address or CIDR range")
		}
		pfx = p.Masked()
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, errors.New("is not an address or CIDR range")
		}
		if a.Zone() != "" {
			return netip.Prefix{}, errors.New("has a zone, which a policy cannot name")
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	a := pfx.Addr()
	switch {
	case !v6 && !a.Is4():
		return netip.Prefix{}, errors.New("is not IPv4; use an ipv6 rule")
	case v6 && a.Is4():
		return netip.Prefix{}, errors.New("is not IPv6; use an ipv4 rule")
	case v6 && a.Is4In6():
		return netip.Prefix{}, errors.New("is an IPv4-mapped address; use an ipv4 rule")
	}
	return pfx, nil
}

// formatRange writes a single address without its prefix length.
func formatRange(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// Describe is the short human description of a rule, as a Matcher reports
// the rule that decided: "hostname *.example.test",
// "ipv4 10.1.0.0/16 ports 443".
func Describe(r api.NetworkPolicyRule) string {
	var b strings.Builder
	switch {
	case r.Hostname != "":
		b.WriteString(kindHostname + " " + r.Hostname)
	case r.IPv4 != "":
		b.WriteString(kindIPv4 + " " + r.IPv4)
	default:
		b.WriteString(kindIPv6 + " " + r.IPv6)
	}
	if len(r.Ports) > 0 {
		b.WriteString(" ports ")
		for i, p := range r.Ports {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(p))
		}
	}
	return b.String()
}

// Effective is the policy that applies to a session: its own when set,
// else its outpost's; nil when neither is set or the applying one is
// disabled, both meaning unrestricted. A session's own disabled policy
// does not fall back to the outpost's: it says "unrestricted".
func Effective(outpost, session *api.NetworkPolicy) *api.NetworkPolicy {
	p := session
	if p == nil {
		p = outpost
	}
	if p == nil || !p.Enabled {
		return nil
	}
	return p
}
