package netguard

import (
	"context"
	"net"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

func TestGatewayAddrs(t *testing.T) {
	for _, tc := range []struct {
		url, want string
	}{
		{"ws://127.0.0.1:8080/v1/gateway", "127.0.0.1:8080"},
		{"wss://[::1]/v1/gateway", "[::1]:443"},
		{"http://10.0.0.1", "10.0.0.1:80"},
		{"https://10.0.0.1", "10.0.0.1:443"},
		{"ws://[::ffff:10.0.0.2]:7", "10.0.0.2:7"},
		{"not a url", ""},
		{"ws://10.0.0.1:0/", ""},
		{"ws://10.0.0.1:70000/", ""},
		{"/v1/gateway", ""},
	} {
		got, err := gatewayAddrs(context.Background(), net.DefaultResolver, tc.url)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%q: %v, want an error", tc.url, got)
		case tc.want != "" && (err != nil || len(got) != 1 || got[0].String() != tc.want):
			t.Errorf("%q: %v, %v; want %s", tc.url, got, err, tc.want)
		}
	}
}

func TestPolicyEqual(t *testing.T) {
	on := func(rules ...api.NetworkPolicyRule) *api.NetworkPolicy {
		return &api.NetworkPolicy{Enabled: true, Allow: rules}
	}
	a := api.NetworkPolicyRule{Hostname: "a.test", Ports: []int{443}}
	for _, tc := range []struct {
		x, y *api.NetworkPolicy
		want bool
	}{
		{nil, nil, true},
		{nil, &api.NetworkPolicy{Allow: []api.NetworkPolicyRule{a}}, true}, // both unrestricted
		{nil, on(), false},
		{on(a), on(a), true},
		{on(a), on(api.NetworkPolicyRule{Hostname: "a.test"}), false},
		{on(a), on(api.NetworkPolicyRule{Hostname: "a.test", Ports: []int{80}}), false},
	} {
		if got := policyEqual(tc.x, tc.y); got != tc.want {
			t.Errorf("policyEqual(%+v, %+v) = %v", tc.x, tc.y, got)
		}
	}
}
