//go:build !windows

package operator

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/egressproxy"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// TestRunnerEgressProxy: on a real API server, a pool that names the
// operator's egress proxy claims a session with a hostname rule; its
// NetworkPolicy adds egress to the proxy's peers and port and nothing
// else; its pod reads the proxy URL from the session's Secret under the
// proxy variables; the credential in that Secret is the one the proxy
// accepts for the session, and the proxy's decisions reach the session's
// transcript through the server's API.
func TestRunnerEgressProxy(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{Network: proxying()})
	es := NewEgressSessions(testLogger(t))
	r := e.runner()
	r.cfg.Egress = es
	named := e.restrictedSession(api.NetworkPolicyRule{Hostname: "allowed.test"}, api.NetworkPolicyRule{IPv4: "10.1.0.0/16", Ports: []int{443}})
	c := e.consumer(r, 2)
	c.NetworkEnforcement = func() error { return nil }
	c.NetworkRefusal = func(q *api.QueueEntry) error { return SessionNetworkRefusal(e.getPool(), q, true) }
	e.startConsumer(c)

	p := e.waitPod(named, "the proxied session's pod", nil)
	var np networkingv1.NetworkPolicy
	if !e.get(NetworkPolicyName(named), &np) {
		t.Fatal("no NetworkPolicy")
	}
	eg := np.Spec.Egress
	if len(eg) != 4 {
		t.Fatalf("egress %+v, want DNS, control plane, proxy and one address rule", eg)
	}
	if len(eg[2].To) != 1 || eg[2].To[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "outpost-system" || portsOf(eg[2].Ports) != "TCP/3128" {
		t.Errorf("proxy rule %+v", eg[2])
	}
	if eg[3].To[0].IPBlock.CIDR != "10.1.0.0/16" {
		t.Errorf("address rule %+v", eg[3])
	}

	ct := worker(t, p, DefaultContainerName)
	for _, n := range []string{"HTTPS_PROXY", "http_proxy", "ALL_PROXY", fleet.EnvEgressProxy} {
		v := envVar(ct.Env, n)
		if v == nil || v.ValueFrom == nil || v.ValueFrom.SecretKeyRef == nil || v.ValueFrom.SecretKeyRef.Key != ProxyURLKey {
			t.Errorf("pod env %s = %+v", n, v)
		}
	}
	if v := envVar(ct.Env, "NO_PROXY"); v == nil || v.Value == "" {
		t.Errorf("NO_PROXY %+v", v)
	}
	var sec corev1.Secret
	if !e.get(SecretName(named), &sec) {
		t.Fatal("no Secret")
	}
	pu, err := url.Parse(string(sec.Data[ProxyURLKey]))
	if err != nil || pu.User == nil || pu.User.Username() != named || pu.Host != "outpost-operator.outpost-system.svc:3128" {
		t.Fatalf("the Secret's proxy URL %q: %v", sec.Data[ProxyURLKey], err)
	}
	pw, _ := pu.User.Password()
	if len(pw) < 32 {
		t.Errorf("proxy password of %d characters", len(pw))
	}

	// The proxy accepts that credential, and only for this session.
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	proxy := egressproxy.New(egressproxy.Options{Lookup: es.Lookup, Report: es.Report, AllowLocal: true,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}})
	es.SetProxy(proxy)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pctx, stop := context.WithCancel(e.ctx)
	served := make(chan error, 1)
	go func() { served <- proxy.Serve(pctx, ln) }()
	defer func() { stop(); <-served }()
	_, port, _ := net.SplitHostPort(echo.Addr().String())
	connect := func(host, user, pass string) int {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		authz := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
		fmt.Fprintf(c, "CONNECT %s:%s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", host, port, host, authz)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	if got := connect("allowed.test", named, pw); got != 200 {
		t.Errorf("allowed name with the Secret's credential: %d", got)
	}
	if got := connect("denied.test", named, pw); got != http.StatusForbidden {
		t.Errorf("denied name: %d", got)
	}
	if got := connect("allowed.test", named, pw+"x"); got != http.StatusProxyAuthRequired {
		t.Errorf("wrong password: %d", got)
	}
	var lastEvents []api.Event
	defer func() {
		if t.Failed() {
			for _, ev := range lastEvents {
				t.Logf("event %+v", ev)
			}
		}
	}()
	e.waitFor("the proxy's decisions on the transcript", func() bool {
		es.flush(e.ctx) // as Run does each second
		var allow, deny bool
		evs := e.events(named)
		lastEvents = evs
		for _, ev := range evs {
			allow = allow || ev.Type == api.EventNetwork && ev.Decision == api.DecisionAllow && ev.Host == "allowed.test"
			deny = deny || ev.Type == api.EventNetwork && ev.Decision == api.DecisionDeny && ev.Host == "denied.test"
		}
		return allow && deny
	})

	// A policy change reaches the proxy through the queue watch: an open
	// tunnel the new policy forbids is closed, and the next one refused.
	tc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	fmt.Fprintf(tc, "CONNECT allowed.test:%s HTTP/1.1\r\nHost: allowed.test\r\nProxy-Authorization: Basic %s\r\n\r\n",
		port, base64.StdEncoding.EncodeToString([]byte(named+":"+pw)))
	tbr := bufio.NewReader(tc)
	if resp, err := http.ReadResponse(tbr, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("open tunnel: %v %v", resp, err)
	}
	changed := time.Now()
	if _, err := e.admin.Sessions.Update(e.ctx, named, api.UpdateSessionRequest{NetworkPolicy: &api.NetworkPolicy{Enabled: true,
		Allow: []api.NetworkPolicyRule{{Hostname: "other.test"}}}}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { _, err := tbr.ReadByte(); closed <- err }()
	select {
	case err := <-closed:
		if err == nil {
			t.Error("read a byte nobody sent")
		}
		t.Logf("the forbidden tunnel closed %v after the PATCH", time.Since(changed).Round(time.Millisecond))
	case <-e.ctx.Done():
		t.Fatal("the forbidden tunnel stayed open after the policy change")
	}
	e.waitFor("the next connection refused", func() bool { return connect("allowed.test", named, pw) == http.StatusForbidden })

	// Once the session is over, the proxy no longer knows it.
	e.terminate(named)
	e.waitFor("the run over", func() bool { return !r.running(named) })
	if got := connect("allowed.test", named, pw); got != http.StatusProxyAuthRequired {
		t.Errorf("after the session: %d", got)
	}
}

// TestProxiedChangesWhileServing: a session with address rules only is
// proxied from the start, so a hostname rule added while it serves works
// in the same pod; a session claimed unrestricted has no proxy settings,
// so when its policy gains a hostname rule its pod is ended and the
// session given back with the reason, never left with names failing.
func TestProxiedChangesWhileServing(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{Network: proxying()})
	es := NewEgressSessions(testLogger(t))
	r := e.runner()
	r.cfg.Egress = es
	addrOnly := e.restrictedSession(api.NetworkPolicyRule{IPv4: "10.1.0.0/16"})
	open := e.session()
	c := e.consumer(r, 2)
	c.NetworkEnforcement = func() error { return nil }
	c.NetworkRefusal = func(q *api.QueueEntry) error { return SessionNetworkRefusal(e.getPool(), q, true) }
	e.startConsumer(c)
	p := e.waitPod(addrOnly, "the address-only session's pod", nil)
	e.kubelet(r, p, corev1.PodRunning, running())
	po := e.waitPod(open, "the unrestricted session's pod", nil)
	e.kubelet(r, po, corev1.PodRunning, running())
	if v := envVar(worker(t, p, DefaultContainerName).Env, "HTTPS_PROXY"); v == nil {
		t.Error("a restricted session of a proxied pool has no HTTPS_PROXY")
	}
	if v := envVar(worker(t, po, DefaultContainerName).Env, "HTTPS_PROXY"); v != nil {
		t.Errorf("an unrestricted session has HTTPS_PROXY: %+v", v)
	}

	set := func(sid string, rules ...api.NetworkPolicyRule) {
		t.Helper()
		if _, err := e.admin.Sessions.Update(e.ctx, sid, api.UpdateSessionRequest{NetworkPolicy: &api.NetworkPolicy{Enabled: true, Allow: rules}}); err != nil {
			t.Fatal(err)
		}
	}
	set(addrOnly, api.NetworkPolicyRule{Hostname: "a.test"})
	e.waitFor("the proxy sees the new rule", func() bool {
		s, ok := es.Lookup(addrOnly)
		return ok && s.Policy != nil && len(s.Policy.Allow) == 1 && s.Policy.Allow[0].Hostname == "a.test"
	})
	if cur := e.waitPod(addrOnly, "the same pod", nil); cur.UID != p.UID {
		t.Errorf("the proxied pod was replaced (%s, was %s)", cur.UID, p.UID)
	}

	set(open, api.NetworkPolicyRule{Hostname: "a.test"})
	e.waitGone(PodName(open), &corev1.Pod{})
	e.waitEvent(open, api.EventMachine, api.MachineStepFailed, "made without the egress proxy")
	e.waitFor("the session pending again", func() bool { return e.entry(open).Status.Phase == api.PhasePending })
}
