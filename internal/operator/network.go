package operator

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
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
// nothing else. A NetworkPolicy cannot match a host name: where the pool
// names the operator's egress proxy (spec.network.egressProxy) and the
// operator serves it, the NetworkPolicy also allows the proxy's peers and
// port, the pod's proxy variables point there with the session's own
// credential, and the proxy decides names; elsewhere a policy with
// hostname rules is refused: the pool does not claim the session and says
// why (an Event on the pool, its NetworkPolicy condition, a log line).
// Nothing restricted is ever served open.

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
	if n.EgressProxy != nil {
		if err := checkEgressProxy(*n.EgressProxy); err != nil {
			return fmt.Errorf("spec.network.egressProxy: %w", err)
		}
	}
	return nil
}

// checkEgressProxy checks the pool's egress proxy settings.
func checkEgressProxy(e v1alpha1.EgressProxy) error {
	if _, _, err := proxyEndpoint(e.URL); err != nil {
		return err
	}
	if len(e.To) == 0 {
		return errors.New("to is empty: name the operator's pods (an empty list would allow every destination)")
	}
	for i, p := range e.To {
		if err := checkPeer(p); err != nil {
			return fmt.Errorf("to[%d]: %w", i, err)
		}
	}
	for i, p := range e.Ports {
		if err := checkPort(p); err != nil {
			return fmt.Errorf("ports[%d]: %w", i, err)
		}
	}
	return nil
}

// proxyEndpoint parses an egress proxy URL: http://host:port, nothing
// more.
func proxyEndpoint(raw string) (host string, port int, err error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", 0, fmt.Errorf("url %q is not a URL", raw)
	case u.Scheme != "http":
		return "", 0, fmt.Errorf("url %q: the scheme must be http (the proxy speaks plain HTTP; tunnels carry TLS end to end)", raw)
	case u.User != nil:
		return "", 0, fmt.Errorf("url %q carries credentials; each session gets its own, so leave them out", redactURL(u))
	case u.Hostname() == "" || u.Port() == "":
		return "", 0, fmt.Errorf("url %q must name a host and a port, as http://outpost-operator.outpost-system.svc:3128", raw)
	case strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "":
		return "", 0, fmt.Errorf("url %q has a path, query or fragment; give only http://host:port", raw)
	}
	port, err = strconv.Atoi(u.Port())
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("url %q: port %q is not between 1 and 65535", raw, u.Port())
	}
	return u.Hostname(), port, nil
}

func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
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
// nil when e is unrestricted or the pool enforces its policy. A hostname
// rule needs the pool's egress proxy (spec.network.egressProxy) and an
// operator that serves it (proxyServed, --egress-proxy-listen).
func SessionNetworkRefusal(pool *v1alpha1.OutpostPool, e *api.QueueEntry, proxyServed bool) error {
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
		if r.Hostname == "" {
			continue
		}
		switch {
		case pool.Spec.Network.EgressProxy == nil:
			return fmt.Errorf("its network policy has a hostname rule (allow[%d] %q), which a Kubernetes NetworkPolicy cannot express, "+
				"and this pool names no egress proxy: set spec.network.egressProxy (and run the operator with --egress-proxy-listen) "+
				"to enforce names through the operator's proxy, or use ipv4/ipv6 rules", i, r.Hostname)
		case !proxyServed:
			return fmt.Errorf("its network policy has a hostname rule (allow[%d] %q), and the pool names an egress proxy, "+
				"but this operator serves none: run it with --egress-proxy-listen", i, r.Hostname)
		}
	}
	return nil
}

// proxied reports whether the session of e reaches names through the
// operator's egress proxy: it is restricted, the pool names the proxy and
// the operator serves it. Every such session gets the proxy, not only
// those with hostname rules now, so a rule added while it runs works at
// once; the proxy allows no more than the policy does.
func proxied(pool *v1alpha1.OutpostPool, e *api.QueueEntry, rd Render) bool {
	return rd.EgressProxy && fleet.Restricted(e) && pool.Spec.Network.EgressProxy != nil &&
		pool.Spec.Network.Enforcement == v1alpha1.NetworkEnforcementNetworkPolicy
}

// RenderNetworkPolicy renders the NetworkPolicy of the session of e, nil
// when e is unrestricted: it selects the session's pod by the operator's
// labels (which a template cannot override) and allows egress only to the
// DNS peers on port 53 (UDP and TCP), to the control plane, and, per
// ipv4/ipv6 rule, to its range over TCP and UDP (on its ports, or every
// port), and, where the session is proxied, to the egress proxy. It fails
// as SessionNetworkRefusal does.
func RenderNetworkPolicy(pool *v1alpha1.OutpostPool, e *api.QueueEntry, rd Render) (*networkingv1.NetworkPolicy, error) {
	if !fleet.Restricted(e) {
		return nil, nil
	}
	if err := SessionNetworkRefusal(pool, e, rd.EgressProxy); err != nil {
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
	if proxied(pool, e, rd) {
		ports := deepPorts(n.EgressProxy.Ports)
		if len(ports) == 0 {
			_, pt, _ := proxyEndpoint(n.EgressProxy.URL) // checked by ValidateNetwork
			ports = []networkingv1.NetworkPolicyPort{port(corev1.ProtocolTCP, pt)}
		}
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{To: deepPeers(n.EgressProxy.To), Ports: ports})
	}
	for _, r := range p.Allow {
		if r.Hostname != "" {
			continue // the egress proxy's
		}
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
