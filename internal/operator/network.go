package operator

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/internal/netpolicy"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// A restricted session (its queue entry's spec.network_policy enabled) is
// served only by a pool whose spec.network.enforcement is NetworkPolicy:
// its pod is selected by a NetworkPolicy of its own, written before the
// pod, that allows egress to the cluster's DNS, to the control plane (the
// pool's spec.network.controlPlane) and to one ipBlock per ipv4/ipv6 rule,
// nothing else. A NetworkPolicy cannot match a host name, so a policy
// with hostname rules is refused: the pool does not claim the session and
// says why (an Event on the pool, its NetworkPolicy condition, a log
// line). Nothing restricted is ever served open.

// ConditionNetworkPolicy is the pool's condition that says whether it
// serves restricted sessions: True while it enforces their network
// policies by NetworkPolicy, False with the reason it does not.
const ConditionNetworkPolicy = "NetworkPolicy"

// Reasons of the NetworkPolicy condition and of the pool's Events about
// refused sessions.
const (
	ReasonNetworkEnforced        = "Enforced"
	ReasonNetworkNotEnforced     = "NotEnforced"
	ReasonNetworkSettingsInvalid = "NetworkSettingsInvalid"
	ReasonSessionRefused         = "RestrictedSessionRefused"
)

// dnsPort is the port the cluster's DNS is reached on, over UDP and TCP.
const dnsPort = 53

// DefaultDNS are the DNS peers when spec.network.dns is empty: kube-dns
// (CoreDNS keeps its label) in kube-system.
func DefaultDNS() []networkingv1.NetworkPolicyPeer {
	return []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "kube-system"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
	}}
}

// NetworkPolicyName is the name of the session's NetworkPolicy.
func NetworkPolicyName(sessionID string) string { return objectName("outpost-egress-", sessionID) }

// errNotEnforced is why a pool without network enforcement serves no
// restricted session.
var errNotEnforced = errors.New("the pool does not enforce network policies (spec.network.enforcement is None): " +
	"set it to NetworkPolicy, with spec.network.controlPlane, on a cluster whose network plugin enforces NetworkPolicy")

// PoolNetworkEnforcement reports whether the pool serves restricted
// sessions: nil when it enforces their policies, else the sentence why
// not (not asked for, or settings that are missing or wrong).
func PoolNetworkEnforcement(pool *v1alpha1.OutpostPool) error {
	switch pool.Spec.Network.Enforcement {
	case "", v1alpha1.NetworkEnforcementNone:
		return errNotEnforced
	case v1alpha1.NetworkEnforcementNetworkPolicy:
		if pool.Spec.Worker.Template.Spec.HostNetwork {
			return errors.New("the pod template sets hostNetwork, and a NetworkPolicy does not apply to a pod on the node's network: " +
				"remove hostNetwork to serve restricted sessions")
		}
		return ValidateNetwork(pool.Spec.Network)
	default:
		return fmt.Errorf("spec.network.enforcement %q is neither None nor NetworkPolicy", pool.Spec.Network.Enforcement)
	}
}

// ValidateNetwork checks a pool's network settings for NetworkPolicy
// enforcement, beyond what the API server checks of a NetworkPolicy:
// a control plane is required, and no peer may stand for every address
// or every pod (an egress rule that allows everything enforces nothing).
func ValidateNetwork(n v1alpha1.NetworkSpec) error {
	cp := n.ControlPlane
	if cp == nil {
		return errors.New("spec.network.controlPlane is required with NetworkPolicy enforcement: a NetworkPolicy cannot name the server, " +
			"so give the addresses (ipBlock) or the pod and namespace selectors its session pods reach it at")
	}
	if len(cp.To) == 0 {
		return errors.New("spec.network.controlPlane.to is empty: name at least one peer (an empty list would allow every destination)")
	}
	for i, p := range cp.To {
		if err := checkPeer(p); err != nil {
			return fmt.Errorf("spec.network.controlPlane.to[%d]: %w", i, err)
		}
	}
	for i, p := range cp.Ports {
		if err := checkPort(p); err != nil {
			return fmt.Errorf("spec.network.controlPlane.ports[%d]: %w", i, err)
		}
	}
	for i, p := range n.DNS {
		if err := checkPeer(p); err != nil {
			return fmt.Errorf("spec.network.dns[%d]: %w", i, err)
		}
	}
	return nil
}

// checkPeer checks one NetworkPolicy peer of the pool's settings.
func checkPeer(p networkingv1.NetworkPolicyPeer) error {
	if p.IPBlock != nil {
		if p.PodSelector != nil || p.NamespaceSelector != nil {
			return errors.New("sets ipBlock with a selector; a peer is either an ipBlock or selectors")
		}
		return checkIPBlock(*p.IPBlock)
	}
	if p.PodSelector == nil && p.NamespaceSelector == nil {
		return errors.New("names no peer: set ipBlock, podSelector or namespaceSelector")
	}
	for what, s := range map[string]*metav1.LabelSelector{"podSelector": p.PodSelector, "namespaceSelector": p.NamespaceSelector} {
		if s == nil {
			continue
		}
		if _, err := metav1.LabelSelectorAsSelector(s); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if everything(p.PodSelector) && everything(p.NamespaceSelector) {
		return errors.New("selects every pod (empty selectors), session pods included; select the pods meant")
	}
	return nil
}

// everything reports whether s selects everything in its scope: unset or
// without requirements.
func everything(s *metav1.LabelSelector) bool {
	return s == nil || len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0
}

func checkIPBlock(b networkingv1.IPBlock) error {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return fmt.Errorf("ipBlock.cidr %q is not a CIDR range (an address is written 10.0.0.1/32)", b.CIDR)
	}
	if cidr.Masked() != cidr {
		return fmt.Errorf("ipBlock.cidr %q has host bits set; write %s", b.CIDR, cidr.Masked())
	}
	if cidr.Bits() == 0 {
		return fmt.Errorf("ipBlock.cidr %q allows every address, which enforces nothing", b.CIDR)
	}
	for _, e := range b.Except {
		ex, err := netip.ParsePrefix(e)
		switch {
		case err != nil:
			return fmt.Errorf("ipBlock.except %q is not a CIDR range", e)
		case ex.Masked() != ex:
			return fmt.Errorf("ipBlock.except %q has host bits set; write %s", e, ex.Masked())
		case ex.Addr().Is4() != cidr.Addr().Is4() || ex.Bits() <= cidr.Bits() || !cidr.Contains(ex.Addr()):
			return fmt.Errorf("ipBlock.except %q is not a range inside %s", e, b.CIDR)
		}
	}
	return nil
}

func checkPort(p networkingv1.NetworkPolicyPort) error {
	if p.Protocol != nil {
		switch *p.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			return fmt.Errorf("protocol %q is not TCP, UDP or SCTP", *p.Protocol)
		}
	}
	if p.Port == nil {
		if p.EndPort != nil {
			return errors.New("endPort without port")
		}
		return nil
	}
	if p.Port.Type == intstr.String {
		if errs := validation.IsValidPortName(p.Port.StrVal); len(errs) > 0 {
			return fmt.Errorf("port %q: %s", p.Port.StrVal, strings.Join(errs, "; "))
		}
		if p.EndPort != nil {
			return errors.New("endPort with a named port")
		}
		return nil
	}
	if n := p.Port.IntVal; n < 1 || n > 65535 {
		return fmt.Errorf("port %d is not between 1 and 65535", n)
	}
	if p.EndPort != nil && (*p.EndPort < p.Port.IntVal || *p.EndPort > 65535) {
		return fmt.Errorf("endPort %d is not between port %d and 65535", *p.EndPort, p.Port.IntVal)
	}
	return nil
}

// SessionNetworkRefusal is why the pool will not serve the session of e:
// nil when e is unrestricted or the pool enforces its policy. It names a
// hostname rule, which a NetworkPolicy cannot express.
func SessionNetworkRefusal(pool *v1alpha1.OutpostPool, e *api.QueueEntry) error {
	if !fleet.Restricted(e) {
		return nil
	}
	if err := PoolNetworkEnforcement(pool); err != nil {
		return err
	}
	p, err := netpolicy.Normalize(*e.Spec.NetworkPolicy)
	if err != nil {
		return fmt.Errorf("the session's network policy is not valid: %w", err)
	}
	for i, r := range p.Allow {
		if r.Hostname != "" {
			return fmt.Errorf("its network policy has a hostname rule (allow[%d] %q), which a Kubernetes NetworkPolicy cannot express, "+
				"and this pool enforces address rules only: use ipv4/ipv6 rules, or serve the session from a worker or orchestrator that enforces names", i, r.Hostname)
		}
	}
	return nil
}

// RenderNetworkPolicy renders the NetworkPolicy of the session of e, nil
// when e is unrestricted: it selects the session's pod by the operator's
// labels (which a template cannot override) and allows egress only to the
// DNS peers on port 53 (UDP and TCP), to the control plane, and, per
// ipv4/ipv6 rule, to its range over TCP and UDP (on its ports, or every
// port). It fails as SessionNetworkRefusal does.
func RenderNetworkPolicy(pool *v1alpha1.OutpostPool, e *api.QueueEntry, rd Render) (*networkingv1.NetworkPolicy, error) {
	if !fleet.Restricted(e) {
		return nil, nil
	}
	if err := SessionNetworkRefusal(pool, e); err != nil {
		return nil, err
	}
	id := e.Metadata.SessionID
	p, _ := netpolicy.Normalize(*e.Spec.NetworkPolicy) // checked by SessionNetworkRefusal
	n := pool.Spec.Network
	dns := n.DNS
	if len(dns) == 0 {
		dns = DefaultDNS()
	}
	egress := []networkingv1.NetworkPolicyEgressRule{
		{To: deepPeers(dns), Ports: []networkingv1.NetworkPolicyPort{
			port(corev1.ProtocolUDP, dnsPort), port(corev1.ProtocolTCP, dnsPort)}},
		{To: deepPeers(n.ControlPlane.To), Ports: deepPorts(n.ControlPlane.Ports)},
	}
	for _, r := range p.Allow {
		cidr := r.IPv4 + r.IPv6
		if !strings.Contains(cidr, "/") {
			// Normalize writes a single address bare; an ipBlock takes a range.
			a := netip.MustParseAddr(cidr)
			cidr = netip.PrefixFrom(a, a.BitLen()).String()
		}
		rule := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}}}
		if len(r.Ports) == 0 {
			// TCP and UDP on every port, as the egress engine allows; no
			// other protocol (ICMP, SCTP).
			rule.Ports = []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP)}, {Protocol: ptr.To(corev1.ProtocolUDP)}}
		}
		for _, pt := range r.Ports {
			rule.Ports = append(rule.Ports, port(corev1.ProtocolTCP, pt), port(corev1.ProtocolUDP, pt))
		}
		egress = append(egress, rule)
	}
	m := meta(pool, NetworkPolicyName(id), id, rd)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: m,
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
				LabelManagedBy: ManagedBy, LabelPool: pool.Name, LabelSessionID: id,
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      egress,
		},
	}, nil
}

func port(proto corev1.Protocol, n int) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(proto), Port: ptr.To(intstr.FromInt32(int32(n)))}
}

func deepPeers(in []networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyPeer {
	out := make([]networkingv1.NetworkPolicyPeer, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

func deepPorts(in []networkingv1.NetworkPolicyPort) []networkingv1.NetworkPolicyPort {
	if len(in) == 0 {
		return nil
	}
	out := make([]networkingv1.NetworkPolicyPort, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}
