package netpolicy

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// benchPolicy is a policy of n rules, half names (globs and exact) and
// half IPv4 ranges, with the rule a connection matches at the end.
func benchPolicy(n int) api.NetworkPolicy {
	p := api.NetworkPolicy{Enabled: true}
	for i := range n / 2 {
		p.Allow = append(p.Allow, api.NetworkPolicyRule{Hostname: fmt.Sprintf("*.h%d.example.test", i)},
			api.NetworkPolicyRule{IPv4: fmt.Sprintf("10.%d.%d.0/24", i/256, i%256), Ports: []int{443}})
	}
	return p
}

func BenchmarkMatcher(b *testing.B) {
	for _, n := range []int{10, 1000} {
		m, err := Compile(benchPolicy(n))
		if err != nil {
			b.Fatal(err)
		}
		last := fmt.Sprintf("api.h%d.example.test", n/2-1)
		addr := netip.MustParseAddr(fmt.Sprintf("10.%d.%d.7", (n/2-1)/256, (n/2-1)%256))
		b.Run(fmt.Sprintf("name/%d-rules", n), func(b *testing.B) {
			for b.Loop() {
				if _, ok := m.AllowName(last, 443); !ok {
					b.Fatal("denied")
				}
			}
		})
		b.Run(fmt.Sprintf("addr/%d-rules", n), func(b *testing.B) {
			for b.Loop() {
				if _, ok := m.AllowAddr(addr, 443); !ok {
					b.Fatal("denied")
				}
			}
		})
	}
	b.Run("compile/1000-rules", func(b *testing.B) {
		p := benchPolicy(1000)
		for b.Loop() {
			if _, err := Compile(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
