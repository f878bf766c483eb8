package netpolicy_test

import (
	"fmt"
	"net/netip"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/netpolicy"
)

func Example() {
	outpost := api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{
		{Hostname: "*.example.test"},
		{IPv4: "10.1.0.0/16", Ports: []int{443}},
	}}
	m, err := netpolicy.Compile(outpost)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.AllowName("api.example.test", 443))
	fmt.Println(m.AllowName("example.test", 443))
	fmt.Println(m.AllowAddr(netip.MustParseAddr("10.1.2.3"), 443))
	fmt.Println(m.AllowAddr(netip.MustParseAddr("10.1.2.3"), 22))

	session := api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{IPv4: "10.0.0.0/8"}}}
	fmt.Println(netpolicy.Within(outpost, session))
	// Output:
	// hostname *.example.test true
	//  false
	// ipv4 10.1.0.0/16 ports 443 true
	//  false
	// network policy allow[0] (ipv4 10.0.0.0/8) is not within the outpost's policy, which it would widen
}
