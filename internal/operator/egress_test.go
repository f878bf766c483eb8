//go:build !windows

package operator

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// operatorPods selects the operator's pods in its namespace.
var operatorPods = networkingv1.NetworkPolicyPeer{
	NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "outpost-system"}},
	PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "outpost-operator"}},
}

// proxying is enforcing() with the operator's egress proxy.
func proxying() v1alpha1.NetworkSpec {
	n := enforcing()
	n.EgressProxy = &v1alpha1.EgressProxy{URL: "http://outpost-operator.outpost-system.svc:3128", To: []networkingv1.NetworkPolicyPeer{operatorPods}}
	return n
}

// TestValidateEgressProxy: each bad egress proxy setting is refused with a
// sentence naming the field; good ones pass.
func TestValidateEgressProxy(t *testing.T) {
	t.Parallel()
	with := func(f func(*v1alpha1.EgressProxy)) v1alpha1.NetworkSpec {
		n := proxying()
		f(n.EgressProxy)
		return n
	}
	bad := map[string]struct {
		n    v1alpha1.NetworkSpec
		want string
	}{
		"empty url":   {with(func(e *v1alpha1.EgressProxy) { e.URL = "" }), "scheme must be http"},
		"https":       {with(func(e *v1alpha1.EgressProxy) { e.URL = "https://op:3128" }), "scheme must be http"},
		"no port":     {with(func(e *v1alpha1.EgressProxy) { e.URL = "http://op" }), "must name a host and a port"},
		"bad port":    {with(func(e *v1alpha1.EgressProxy) { e.URL = "http://op:0" }), "not between 1 and 65535"},
		"credentials": {with(func(e *v1alpha1.EgressProxy) { e.URL = "http://u:hunter2@op:3128" }), "carries credentials"},
		"path":        {with(func(e *v1alpha1.EgressProxy) { e.URL = "http://op:3128/x" }), "path, query or fragment"},
		"no peers":    {with(func(e *v1alpha1.EgressProxy) { e.To = nil }), "spec.network.egressProxy: to is empty"},
		"every pod": {with(func(e *v1alpha1.EgressProxy) {
			e.To = []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}
		}), "egressProxy: to[0]: selects every pod"},
		"every addr": {with(func(e *v1alpha1.EgressProxy) {
			e.To = []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}
		}), "allows every address"},
		"bad port entry": {with(func(e *v1alpha1.EgressProxy) {
			e.Ports = []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(70000))}}
		}), "egressProxy: ports[0]: port 70000"},
	}
	for name, c := range bad {
		err := ValidateNetwork(c.n)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the password: %v", name, err)
		}
	}
	if err := ValidateNetwork(proxying()); err != nil {
		t.Errorf("good settings: %v", err)
	}
	if err := ValidateNetwork(with(func(e *v1alpha1.EgressProxy) {
		e.URL = "http://10.0.0.5:3128/"
		e.To = []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.5/32"}}}
	})); err != nil {
		t.Errorf("an address and a trailing slash: %v", err)
	}
}

// TestHostnameRulesNeedTheProxy: a hostname rule is refused without the
// pool's proxy (naming the setting) or without an operator serving it,
// and served with both.
func TestHostnameRulesNeedTheProxy(t *testing.T) {
	t.Parallel()
	pool := testPool()
	pool.Spec.Network = enforcing()
	names := restrictedClaim(api.NetworkPolicyRule{Hostname: "*.example.test"})
	if err := SessionNetworkRefusal(pool, names, true); err == nil || !strings.Contains(err.Error(), "set spec.network.egressProxy") {
		t.Errorf("no proxy in the pool: %v", err)
	}
	pool.Spec.Network = proxying()
	if err := SessionNetworkRefusal(pool, names, false); err == nil || !strings.Contains(err.Error(), "--egress-proxy-listen") {
		t.Errorf("no proxy served: %v", err)
	}
	if err := SessionNetworkRefusal(pool, names, true); err != nil {
		t.Errorf("proxy configured and served: %v", err)
	}
	pool.Spec.Network.EgressProxy.URL = "ftp://x"
	if err := SessionNetworkRefusal(pool, names, true); err == nil || !strings.Contains(err.Error(), "egressProxy") {
		t.Errorf("bad proxy settings: %v", err)
	}
}

// TestRenderProxiedSession: a proxied session's NetworkPolicy gains one
// rule, to the proxy's peers on its port, and nothing else; its pod reads
// the proxy URL from the Secret under every proxy variable, with NO_PROXY
// for the control plane; the Secret holds the URL with the session's
// credential. Unproxied sessions get none of it.
func TestRenderProxiedSession(t *testing.T) {
	t.Parallel()
	pool := testPool()
	pool.Spec.Network = proxying()
	claim := restrictedClaim(api.NetworkPolicyRule{Hostname: "*.example.test"}, api.NetworkPolicyRule{IPv4: "10.1.0.0/16"})
	claim.Status.GatewayURL = "wss://outpost.example.com/v1/gateway"
	rd := Render{EgressProxy: true}
	np, err := RenderNetworkPolicy(pool, claim, rd)
	if err != nil {
		t.Fatal(err)
	}
	eg := np.Spec.Egress
	if len(eg) != 4 {
		t.Fatalf("%d egress rules, want DNS, control plane, proxy, 1 address rule: %+v", len(eg), eg)
	}
	if len(eg[2].To) != 1 || eg[2].To[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != "outpost-operator" ||
		portsOf(eg[2].Ports) != "TCP/3128" {
		t.Errorf("proxy rule %+v (ports %s)", eg[2], portsOf(eg[2].Ports))
	}
	if eg[3].To[0].IPBlock.CIDR != "10.1.0.0/16" {
		t.Errorf("address rule %+v", eg[3])
	}
	// Ports set in the pool are used as they are.
	pool.Spec.Network.EgressProxy.Ports = []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromString("proxy"))}}
	np, _ = RenderNetworkPolicy(pool, claim, rd)
	if portsOf(np.Spec.Egress[2].Ports) != "TCP/proxy" {
		t.Errorf("pool ports: %s", portsOf(np.Spec.Egress[2].Ports))
	}

	c := worker(t, RenderPod(pool, claim, rd), DefaultContainerName)
	id := claim.Metadata.SessionID
	for _, n := range []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy", fleet.EnvEgressProxy} {
		v := envVar(c.Env, n)
		if v == nil || v.Value != "" || v.ValueFrom == nil || v.ValueFrom.SecretKeyRef == nil ||
			v.ValueFrom.SecretKeyRef.Name != SecretName(id) || v.ValueFrom.SecretKeyRef.Key != ProxyURLKey {
			t.Errorf("%s = %+v, want the Secret's %s", n, v, ProxyURLKey)
		}
	}
	for _, n := range NoProxyVars {
		if v := envVar(c.Env, n); v == nil || v.Value != "localhost,127.0.0.1,::1,outpost.example.com" {
			t.Errorf("%s = %+v", n, v)
		}
	}

	u, err := ProxyURL(pool.Spec.Network.EgressProxy.URL, id, "pw-1")
	if err != nil {
		t.Fatal(err)
	}
	s := RenderSecret(pool, id, "ct", u, rd)
	pu, err := url.Parse(string(s.Data[ProxyURLKey]))
	if err != nil || pu.User.Username() != id || proxySecretOf(pu.String()) != "pw-1" || pu.Host != "outpost-operator.outpost-system.svc:3128" {
		t.Errorf("secret's proxy URL %q (%v)", s.Data[ProxyURLKey], err)
	}
	if len(s.Data) != 2 || string(s.Data[TokenKey]) != "ct" {
		t.Errorf("secret data keys %v", slices.Collect(func(yield func(string) bool) {
			for k := range s.Data {
				if !yield(k) {
					return
				}
			}
		}))
	}

	// Not proxied: the operator serves no proxy, or the session is
	// unrestricted; a template's own proxy variables are removed.
	pool.Spec.Worker.Template.Spec.Containers = []corev1.Container{{Name: DefaultContainerName,
		Env: []corev1.EnvVar{{Name: "HTTPS_PROXY", Value: "http://corp:3128"}, {Name: "no_proxy", Value: "*"}}}}
	for name, pod := range map[string]*corev1.Pod{
		"no proxy served": RenderPod(pool, claim, Render{}),
		"unrestricted":    RenderPod(pool, testClaim(), rd),
	} {
		for _, e := range worker(t, pod, DefaultContainerName).Env {
			if strings.Contains(strings.ToUpper(e.Name), "PROXY") {
				t.Errorf("%s: the pod has %s", name, e.Name)
			}
		}
	}
	if np, err := RenderNetworkPolicy(pool, restrictedClaim(api.NetworkPolicyRule{IPv4: "10.0.0.1"}), Render{}); err != nil || len(np.Spec.Egress) != 3 {
		t.Errorf("no proxy served: %v %+v", err, np)
	}
	if s := RenderSecret(pool, id, "ct", "", rd); len(s.Data) != 1 {
		t.Errorf("unproxied secret %v", s.Data)
	}
}

func envVar(env []corev1.EnvVar, name string) *corev1.EnvVar {
	for i := range env {
		if env[i].Name == name {
			return &env[i]
		}
	}
	return nil
}

// TestEgressSessionsGroupAndPost: the registry answers the proxy with the
// session's current policy, groups equal decisions and posts them, and
// forgets a removed session.
func TestEgressSessionsGroupAndPost(t *testing.T) {
	t.Parallel()
	es := NewEgressSessions(nil)
	entry := api.QueueEntry{}
	entry.Spec.NetworkPolicy = &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "a.test"}}}
	cur := entry
	var posted [][]api.NetworkDecision
	remove := es.add("ses_1", "pw", func() api.QueueEntry { return cur },
		func(_ context.Context, b []api.NetworkDecision) error { posted = append(posted, b); return nil }, nil)
	s, ok := es.Lookup("ses_1")
	if !ok || s.Secret != "pw" || s.Policy.Allow[0].Hostname != "a.test" {
		t.Fatalf("lookup %+v %v", s, ok)
	}
	cur.Spec.NetworkPolicy = &api.NetworkPolicy{Enabled: true}
	if s, _ := es.Lookup("ses_1"); len(s.Policy.Allow) != 0 {
		t.Fatalf("lookup does not follow the entry: %+v", s.Policy)
	}
	d := api.NetworkDecision{Decision: api.DecisionAllow, Host: "a.test", Address: "10.0.0.1", Port: 443, Protocol: api.ProtocolTCP, BytesIn: 5}
	es.Report("ses_1", d)
	es.Report("ses_1", d)
	es.Report("ses_1", api.NetworkDecision{Decision: api.DecisionDeny, Host: "b.test", Port: 443, Protocol: api.ProtocolTCP})
	es.flush(context.Background())
	if len(posted) != 1 || len(posted[0]) != 2 || posted[0][0].Count != 2 || posted[0][0].BytesIn != 10 || posted[0][1].Decision != api.DecisionDeny {
		t.Fatalf("posted %+v", posted)
	}
	remove()
	if _, ok := es.Lookup("ses_1"); ok {
		t.Fatal("a removed session is still served")
	}
	// The last tunnels' reports, which come as they close, still count.
	es.Report("ses_1", d)
	es.flush(context.Background())
	if len(posted) != 2 || len(posted[1]) != 1 {
		t.Fatalf("the report of a tunnel closed at the end: %+v", posted)
	}
	es.mu.Lock()
	es.sessions["ses_1"].goneAt = time.Now().Add(-time.Minute)
	es.mu.Unlock()
	es.flush(context.Background())
	es.Report("ses_1", d)
	es.flush(context.Background())
	if len(posted) != 2 {
		t.Fatalf("posted for a session long gone: %+v", posted)
	}
}

// TestProxiedPodKeepsTemplateNoProxy: hosts the template lists in
// NO_PROXY stay direct; its proxy variables are replaced.
func TestProxiedPodKeepsTemplateNoProxy(t *testing.T) {
	t.Parallel()
	pool := testPool()
	pool.Spec.Network = proxying()
	pool.Spec.Worker.Template.Spec.Containers = []corev1.Container{{Name: DefaultContainerName,
		Env: []corev1.EnvVar{{Name: "NO_PROXY", Value: "builds.example.com, localhost"}, {Name: "HTTPS_PROXY", Value: "http://corp:3128"}}}}
	claim := restrictedClaim(api.NetworkPolicyRule{Hostname: "a.test"})
	claim.Status.GatewayURL = "wss://gw.example.com/v1/gateway"
	c := worker(t, RenderPod(pool, claim, Render{EgressProxy: true}), DefaultContainerName)
	if v := envVar(c.Env, "NO_PROXY"); v == nil || v.Value != "localhost,127.0.0.1,::1,gw.example.com,builds.example.com" {
		t.Errorf("NO_PROXY %+v", v)
	}
	n := 0
	for _, e := range c.Env {
		if e.Name == "HTTPS_PROXY" {
			n++
			if e.Value != "" || e.ValueFrom == nil {
				t.Errorf("the template's HTTPS_PROXY survived: %+v", e)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d HTTPS_PROXY variables", n)
	}
}
