package netpolicy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// Within reports whether inner only narrows outer: everything inner allows,
// outer allows too. An unrestricted outer admits any inner; a restricted
// outer refuses an unrestricted inner. Each inner rule must be covered by
// outer rules of its kind: a name equal to an outer name or below an outer
// glob, a glob below an outer glob (or equal to it), a range inside an
// outer range, and ports within the union of the ports of the covering
// outer rules (a rule without ports covers every port). The error names
// the first inner rule that widens outer. Both policies must be valid.
func Within(outer, inner api.NetworkPolicy) error {
	on, err := Normalize(outer)
	if err != nil {
		return fmt.Errorf("outer %w", err)
	}
	in, err := Normalize(inner)
	if err != nil {
		return err
	}
	if !on.Enabled {
		return nil
	}
	if !in.Enabled {
		return fmt.Errorf("network policy is unrestricted, which widens the outpost's restricted policy")
	}
	for i, r := range in.Allow {
		if !covered(on.Allow, r) {
			return fmt.Errorf("network policy allow[%d] (%s) is not within the outpost's policy, which it would widen", i, Describe(r))
		}
	}
	return nil
}

// covered reports whether the outer rules together allow everything r
// allows.
func covered(outer []api.NetworkPolicyRule, r api.NetworkPolicyRule) bool {
	var ports []int
	for _, o := range outer {
		if !destCovered(o, r) {
			continue
		}
		if len(o.Ports) == 0 {
			return true
		}
		ports = append(ports, o.Ports...)
	}
	if len(r.Ports) == 0 || len(ports) == 0 {
		return false
	}
	for _, p := range r.Ports {
		if !slices.Contains(ports, p) {
			return false
		}
	}
	return true
}

// destCovered compares the destinations of two normalized rules, ignoring
// ports.
func destCovered(o, r api.NetworkPolicyRule) bool {
	switch {
	case r.Hostname != "":
		return o.Hostname != "" && nameCovered(o.Hostname, r.Hostname)
	case r.IPv4 != "":
		return o.IPv4 != "" && rangeCovered(o.IPv4, r.IPv4)
	default:
		return o.IPv6 != "" && rangeCovered(o.IPv6, r.IPv6)
	}
}

func nameCovered(outer, inner string) bool {
	if outer == inner {
		return true
	}
	suffix, glob := strings.CutPrefix(outer, "*")
	if !glob {
		return false
	}
	// inner, a name or a glob, lies strictly below the outer glob's
	// domain: "a.example.test" and "*.a.example.test" under
	// "*.example.test", never "example.test".
	name := strings.TrimPrefix(inner, "*.")
	return len(name) > len(suffix) && strings.HasSuffix(name, suffix)
}

func rangeCovered(outer, inner string) bool {
	o, i := mustRange(outer), mustRange(inner)
	return o.Bits() <= i.Bits() && o.Contains(i.Addr())
}

// mustRange parses a range Normalize wrote.
func mustRange(s string) netip.Prefix {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p
	}
	a := netip.MustParseAddr(s)
	return netip.PrefixFrom(a, a.BitLen())
}
