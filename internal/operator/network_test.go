//go:build !windows

package operator

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// enforcing is a pool's network settings that enforce by NetworkPolicy,
// with the control plane at 10.96.0.0/24 port 443.
func enforcing() v1alpha1.NetworkSpec {
	return v1alpha1.NetworkSpec{Enforcement: v1alpha1.NetworkEnforcementNetworkPolicy,
		ControlPlane: &v1alpha1.NetworkDestination{
			To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.96.0.0/24"}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(443))}},
		}}
}

// TestValidateNetwork: each bad setting is refused with a sentence naming
// the field; good ones pass.
func TestValidateNetwork(t *testing.T) {
	t.Parallel()
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "outpost-server"}}
	peer := func(p networkingv1.NetworkPolicyPeer) v1alpha1.NetworkSpec {
		n := enforcing()
		n.ControlPlane.To = []networkingv1.NetworkPolicyPeer{p}
		return n
	}
	ports := func(p networkingv1.NetworkPolicyPort) v1alpha1.NetworkSpec {
		n := enforcing()
		n.ControlPlane.Ports = []networkingv1.NetworkPolicyPort{p}
		return n
	}
	bad := map[string]struct {
		n    v1alpha1.NetworkSpec
		want string
	}{
		"no control plane":     {v1alpha1.NetworkSpec{Enforcement: v1alpha1.NetworkEnforcementNetworkPolicy}, "spec.network.controlPlane is required"},
		"no peers":             {func() v1alpha1.NetworkSpec { n := enforcing(); n.ControlPlane.To = nil; return n }(), "controlPlane.to is empty"},
		"empty peer":           {peer(networkingv1.NetworkPolicyPeer{}), "to[0]: names no peer"},
		"not a CIDR":           {peer(networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.1"}}), `ipBlock.cidr "10.0.0.1" is not a CIDR`},
		"host bits":            {peer(networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.1/8"}}), "host bits set; write 10.0.0.0/8"},
		"except host bits":     {peer(networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.1/16"}}}), "host bits set; write 10.1.0.0/16"},
		"every IPv4 address":   {peer(networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}), "allows every address"},
		"every IPv6 address":   {peer(networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "::/0"}}), "allows every address"},
		"except outside":       {peer(networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"192.168.0.0/16"}}}), "not a range inside"},
		"except bad":           {peer(networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"x"}}}), `except "x" is not a CIDR`},
		"ipBlock and selector": {peer(networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}, PodSelector: sel}), "ipBlock with a selector"},
		"every pod":            {peer(networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{}}), "selects every pod"},
		"every namespace":      {peer(networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{}}), "selects every pod"},
		"bad selector": {peer(networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: "Near"}}}}), "podSelector"},
		"port 0":        {ports(networkingv1.NetworkPolicyPort{Port: ptr.To(intstr.FromInt32(0))}), "port 0 is not between"},
		"port 70000":    {ports(networkingv1.NetworkPolicyPort{Port: ptr.To(intstr.FromInt32(70000))}), "port 70000"},
		"bad protocol":  {ports(networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.Protocol("ICMP"))}), `protocol "ICMP"`},
		"endPort below": {ports(networkingv1.NetworkPolicyPort{Port: ptr.To(intstr.FromInt32(443)), EndPort: ptr.To[int32](80)}), "endPort 80"},
		"endPort alone": {ports(networkingv1.NetworkPolicyPort{EndPort: ptr.To[int32](80)}), "endPort without port"},
		"bad port name": {ports(networkingv1.NetworkPolicyPort{Port: ptr.To(intstr.FromString("not a name!"))}), `port "not a name!"`},
		"bad DNS peer":  {func() v1alpha1.NetworkSpec { n := enforcing(); n.DNS = []networkingv1.NetworkPolicyPeer{{}}; return n }(), "spec.network.dns[0]: names no peer"},
		"DNS every pod": {func() v1alpha1.NetworkSpec {
			n := enforcing()
			n.DNS = []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}
			return n
		}(), "spec.network.dns[0]: selects every pod"},
		"DNS every adress": {func() v1alpha1.NetworkSpec {
			n := enforcing()
			n.DNS = []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}
			return n
		}(), "allows every address"},
	}
	for name, c := range bad {
		err := ValidateNetwork(c.n)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one containing %q", name, err, c.want)
		}
	}
	good := []v1alpha1.NetworkSpec{
		enforcing(),
		peer(networkingv1.NetworkPolicyPeer{PodSelector: sel}),
		peer(networkingv1.NetworkPolicyPeer{NamespaceSelector: sel}),
		peer(networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "fd00::/64", Except: []string{"fd00::/96"}}}),
		ports(networkingv1.NetworkPolicyPort{Port: ptr.To(intstr.FromString("https"))}),
		ports(networkingv1.NetworkPolicyPort{Port: ptr.To(intstr.FromInt32(8000)), EndPort: ptr.To[int32](8100)}),
	}
	for i, n := range good {
		if err := ValidateNetwork(n); err != nil {
			t.Errorf("good[%d]: %v", i, err)
		}
	}

	pool := testPool()
	if err := PoolNetworkEnforcement(pool); err == nil || !strings.Contains(err.Error(), "spec.network.enforcement is None") {
		t.Errorf("a pool without network settings: %v", err)
	}
	pool.Spec.Network = enforcing()
	if err := PoolNetworkEnforcement(pool); err != nil {
		t.Errorf("an enforcing pool: %v", err)
	}
	pool.Spec.Worker.Template.Spec.HostNetwork = true
	if err := PoolNetworkEnforcement(pool); err == nil || !strings.Contains(err.Error(), "hostNetwork") {
		t.Errorf("a pool whose pods run on the node's network: %v", err)
	}
	if err := SessionNetworkRefusal(pool, restrictedClaim(api.NetworkPolicyRule{IPv4: "10.0.0.1"}), false); err == nil {
		t.Error("a restricted session accepted by a pool whose pods run on the node's network")
	}
	pool.Spec.Worker.Template.Spec.HostNetwork = false
	pool.Spec.Network.Enforcement = "Cilium"
	if err := PoolNetworkEnforcement(pool); err == nil || !strings.Contains(err.Error(), `"Cilium" is neither`) {
		t.Errorf("an unknown enforcement: %v", err)
	}
}

func restrictedClaim(rules ...api.NetworkPolicyRule) *api.QueueEntry {
	c := testClaim()
	c.Spec.NetworkPolicy = &api.NetworkPolicy{Enabled: true, Allow: rules}
	return c
}

// TestRenderNetworkPolicy: the rendered policy selects only the session's
// pod, allows egress to DNS (53 UDP and TCP), the control plane and one
// ipBlock per address rule (on TCP and UDP, on its ports or all), and
// nothing for an unrestricted session; hostname rules and pools that do
// not enforce are refused.
func TestRenderNetworkPolicy(t *testing.T) {
	t.Parallel()
	pool := testPool()
	pool.Spec.Network = enforcing()
	claim := restrictedClaim(api.NetworkPolicyRule{IPv4: "10.1.0.0/16", Ports: []int{443, 80}}, api.NetworkPolicyRule{IPv6: "fd00::1"})
	np, err := RenderNetworkPolicy(pool, claim, Render{OutpostID: "out_1"})
	if err != nil {
		t.Fatal(err)
	}
	id := claim.Metadata.SessionID
	if np.Name != NetworkPolicyName(id) || np.Namespace != pool.Namespace || !OwnedBy(np, pool) || np.Labels[LabelSessionID] != id {
		t.Errorf("metadata %+v", np.ObjectMeta)
	}
	if got := np.Spec.PodSelector.MatchLabels; len(got) != 3 || got[LabelSessionID] != id || got[LabelPool] != pool.Name || got[LabelManagedBy] != ManagedBy {
		t.Errorf("pod selector %v", got)
	}
	// The pod carries every label the policy selects on.
	pod := RenderPod(pool, claim, Render{})
	for k, v := range np.Spec.PodSelector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("pod label %s = %q, the policy selects %q", k, pod.Labels[k], v)
		}
	}
	if len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeEgress || len(np.Spec.Ingress) != 0 {
		t.Errorf("policy types %v", np.Spec.PolicyTypes)
	}
	eg := np.Spec.Egress
	if len(eg) != 4 {
		t.Fatalf("%d egress rules, want DNS, control plane and 2 address rules: %+v", len(eg), eg)
	}
	if got := portsOf(eg[0].Ports); got != "UDP/53 TCP/53" || eg[0].To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" ||
		eg[0].To[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "kube-system" {
		t.Errorf("DNS rule %+v (ports %s)", eg[0], got)
	}
	if eg[1].To[0].IPBlock.CIDR != "10.96.0.0/24" || portsOf(eg[1].Ports) != "TCP/443" {
		t.Errorf("control plane rule %+v", eg[1])
	}
	if eg[2].To[0].IPBlock.CIDR != "10.1.0.0/16" || portsOf(eg[2].Ports) != "TCP/80 UDP/80 TCP/443 UDP/443" {
		t.Errorf("ipv4 rule %+v (ports %s)", eg[2], portsOf(eg[2].Ports))
	}
	if eg[3].To[0].IPBlock.CIDR != "fd00::1/128" || portsOf(eg[3].Ports) != "TCP/* UDP/*" {
		t.Errorf("ipv6 rule %+v (ports %s)", eg[3], portsOf(eg[3].Ports))
	}

	// Custom DNS peers replace kube-dns.
	pool.Spec.Network.DNS = []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "169.254.20.10/32"}}}
	np, _ = RenderNetworkPolicy(pool, claim, Render{})
	if len(np.Spec.Egress[0].To) != 1 || np.Spec.Egress[0].To[0].IPBlock.CIDR != "169.254.20.10/32" {
		t.Errorf("DNS peers %+v", np.Spec.Egress[0].To)
	}
	// Rendering does not share the pool's objects.
	np.Spec.Egress[0].To[0].IPBlock.CIDR = "1.2.3.4/32"
	if pool.Spec.Network.DNS[0].IPBlock.CIDR != "169.254.20.10/32" {
		t.Error("the rendered policy aliases the pool's spec")
	}

	if np, err := RenderNetworkPolicy(pool, testClaim(), Render{}); np != nil || err != nil {
		t.Errorf("unrestricted session: %v, %v", np, err)
	}
	off := testClaim()
	off.Spec.NetworkPolicy = &api.NetworkPolicy{Enabled: false, Allow: []api.NetworkPolicyRule{{Hostname: "example.test"}}}
	if np, err := RenderNetworkPolicy(pool, off, Render{}); np != nil || err != nil {
		t.Errorf("disabled policy: %v, %v", np, err)
	}
	names := restrictedClaim(api.NetworkPolicyRule{IPv4: "10.0.0.1"}, api.NetworkPolicyRule{Hostname: "*.example.test"})
	if _, err := RenderNetworkPolicy(pool, names, Render{}); err == nil || !strings.Contains(err.Error(), `allow[1] "*.example.test"`) {
		t.Errorf("hostname rule: %v", err)
	}
	if err := SessionNetworkRefusal(pool, names, false); err == nil || !strings.Contains(err.Error(), "cannot express") {
		t.Errorf("hostname rule refusal: %v", err)
	}
	// An empty allow list is a policy too: DNS and the control plane only.
	np, err = RenderNetworkPolicy(pool, restrictedClaim(), Render{})
	if err != nil || len(np.Spec.Egress) != 2 {
		t.Errorf("no rules: %v, %+v", err, np)
	}
	pool.Spec.Network = v1alpha1.NetworkSpec{}
	if _, err := RenderNetworkPolicy(pool, claim, Render{}); err == nil || !strings.Contains(err.Error(), "does not enforce") {
		t.Errorf("pool without enforcement: %v", err)
	}
}

func portsOf(ps []networkingv1.NetworkPolicyPort) string {
	var out []string
	for _, p := range ps {
		n := "*"
		if p.Port != nil {
			n = p.Port.String()
		}
		out = append(out, string(*p.Protocol)+"/"+n)
	}
	return strings.Join(out, " ")
}
