//go:build !windows

package operator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// restrictedSession creates a pending session with its own network policy.
func (e *kenv) restrictedSession(rules ...api.NetworkPolicyRule) string {
	e.t.Helper()
	s, err := e.admin.Sessions.Create(e.ctx, api.CreateSessionRequest{Outpost: "dev", Prompt: "test",
		NetworkPolicy: &api.NetworkPolicy{Enabled: true, Allow: rules},
		Agent:         api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}})
	if err != nil {
		e.t.Fatalf("create session: %v", err)
	}
	return s.Metadata.SessionID
}

// TestRunnerNetworkPolicy: on a real API server, a restricted session's
// pod gets a NetworkPolicy written before it, owned by the pool, selecting
// that pod and allowing DNS, the control plane and the policy's address
// rules; an unrestricted session's gets none; a session with a hostname
// rule is never claimed and stays pending. Once the session ends and its
// pod is gone, the policy is collected.
func TestRunnerNetworkPolicy(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{Network: enforcing()})
	r := e.runner()
	r.policyGrace = 0
	restricted := e.restrictedSession(api.NetworkPolicyRule{IPv4: "10.1.0.0/16", Ports: []int{443}}, api.NetworkPolicyRule{IPv6: "fd00::/8"})
	open := e.session()
	named := e.restrictedSession(api.NetworkPolicyRule{Hostname: "example.test"})
	c := e.consumer(r, 3)
	c.NetworkEnforcement = func() error { return nil }
	c.NetworkRefusal = func(q *api.QueueEntry) error { return SessionNetworkRefusal(e.getPool(), q, false) }
	e.startConsumer(c)

	e.waitFor("two pods", func() bool { return len(e.pods()) == 2 })
	p := e.waitPod(restricted, "the restricted session's pod", nil)
	var np networkingv1.NetworkPolicy
	if !e.get(NetworkPolicyName(restricted), &np) {
		t.Fatal("no NetworkPolicy for the restricted session")
	}
	npRV, _ := strconv.ParseInt(np.ResourceVersion, 10, 64)
	podRV, _ := strconv.ParseInt(p.ResourceVersion, 10, 64)
	if npRV == 0 || npRV >= podRV {
		t.Errorf("NetworkPolicy written at resourceVersion %d, the pod at %d: the policy must come first", npRV, podRV)
	}
	ref := metav1.GetControllerOf(&np)
	if ref == nil || ref.UID != e.getPool().UID || ref.Kind != "OutpostPool" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("owner references %+v, want the pool as controller", np.OwnerReferences)
	}
	for k, v := range np.Spec.PodSelector.MatchLabels {
		if p.Labels[k] != v {
			t.Errorf("the policy selects %s=%s, the pod has %q", k, v, p.Labels[k])
		}
	}
	if len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeEgress {
		t.Errorf("policy types %v", np.Spec.PolicyTypes)
	}
	eg := np.Spec.Egress
	if len(eg) != 4 {
		t.Fatalf("egress %+v", eg)
	}
	if portsOf(eg[0].Ports) != "UDP/53 TCP/53" || eg[0].To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
		t.Errorf("DNS rule %+v", eg[0])
	}
	if eg[1].To[0].IPBlock.CIDR != "10.96.0.0/24" || portsOf(eg[1].Ports) != "TCP/443" {
		t.Errorf("control plane rule %+v", eg[1])
	}
	if eg[2].To[0].IPBlock.CIDR != "10.1.0.0/16" || portsOf(eg[2].Ports) != "TCP/443 UDP/443" {
		t.Errorf("ipv4 rule %+v", eg[2])
	}
	if eg[3].To[0].IPBlock.CIDR != "fd00::/8" || portsOf(eg[3].Ports) != "TCP/* UDP/*" {
		t.Errorf("ipv6 rule %+v", eg[3])
	}
	e.waitEvent(restricted, api.EventMachine, api.MachineStepCreate, "Created NetworkPolicy "+np.Name)

	e.waitPod(open, "the unrestricted session's pod", nil)
	if e.get(NetworkPolicyName(open), &networkingv1.NetworkPolicy{}) {
		t.Error("an unrestricted session got a NetworkPolicy")
	}
	if got := e.entry(named); got.Status.Phase != api.PhasePending {
		t.Errorf("the session with a hostname rule is %s, want pending", got.Status.Phase)
	}
	if e.get(PodName(named), &corev1.Pod{}) || e.get(NetworkPolicyName(named), &networkingv1.NetworkPolicy{}) {
		t.Error("the session with a hostname rule has a pod or a NetworkPolicy")
	}

	// Collected only once its pod is gone.
	if err := r.CollectNetworkPolicies(e.ctx); err != nil {
		t.Fatal(err)
	}
	if !e.get(np.Name, &networkingv1.NetworkPolicy{}) {
		t.Fatal("the policy of a serving session was collected")
	}
	e.terminate(restricted)
	e.waitGone(PodName(restricted), &corev1.Pod{})
	e.waitFor("the run over", func() bool { return !r.running(restricted) })
	if err := r.CollectNetworkPolicies(e.ctx); err != nil {
		t.Fatal(err)
	}
	if e.get(np.Name, &networkingv1.NetworkPolicy{}) {
		t.Error("the policy outlived its session's pod")
	}
}

// TestPoolRefusesRestrictedSessions: through the operator, a pool that
// does not enforce, one whose settings lack the control plane, and one
// that enforces but meets a hostname rule each leave the restricted
// session pending and say why: the NetworkPolicy condition, and an Event
// on the pool naming the session.
func TestPoolRefusesRestrictedSessions(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t, ctx)
	env := newOutpostEnv(t)
	startOperator(t, Options{Namespaces: []string{ns}, OperatorNamespace: ns, AllowedAPIURLs: []string{env.url}, AcceptorID: "k8s-test"})
	pool := newPool(t, ctx, ns, "gpu", env.url, env.token, 2)
	key := client.ObjectKeyFromObject(pool)
	cond := func(reason, text string) func(*v1alpha1.OutpostPool) bool {
		return func(p *v1alpha1.OutpostPool) bool {
			c := apimeta.FindStatusCondition(p.Status.Conditions, ConditionNetworkPolicy)
			return ready(p) && c != nil && c.Reason == reason && strings.Contains(c.Message, text)
		}
	}
	s, err := env.admin.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: "dev", Prompt: "test",
		NetworkPolicy: &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "example.test"}}},
		Agent:         api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := s.Metadata.SessionID
	waitPool(t, ctx, key, "NotEnforced naming the session", cond(ReasonNetworkNotEnforced, id))

	edit := func(n v1alpha1.NetworkSpec) {
		p := getPool(t, ctx, key)
		p.Spec.Network = n
		if err := kube.Update(ctx, p); err != nil {
			t.Fatalf("update pool: %v", err)
		}
	}
	// The CRD admits no other enforcement.
	bad := getPool(t, ctx, key)
	bad.Spec.Network.Enforcement = "Cilium"
	if err := kube.Update(ctx, bad); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.network.enforcement") {
		t.Fatalf("enforcement Cilium: %v, want the CRD's refusal", err)
	}
	edit(v1alpha1.NetworkSpec{Enforcement: v1alpha1.NetworkEnforcementNetworkPolicy})
	waitPool(t, ctx, key, "NetworkSettingsInvalid for the missing control plane", cond(ReasonNetworkSettingsInvalid, "spec.network.controlPlane is required"))

	edit(enforcing())
	waitPool(t, ctx, key, "Enforced, the hostname rule refused", cond(ReasonNetworkEnforced, "cannot express"))
	waitFor(t, ctx, "an Event on the pool naming the session", func() bool {
		var l eventsv1.EventList
		if err := kube.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return false
		}
		for _, ev := range l.Items {
			if ev.Regarding.UID == pool.UID && ev.Reason == ReasonSessionRefused && ev.Type == corev1.EventTypeWarning &&
				strings.Contains(ev.Note, id) && strings.Contains(ev.Note, "hostname rule") {
				return true
			}
		}
		return false
	}, nil)
	e, err := env.admin.Queue.Get(ctx, id)
	if err != nil || e.Status.Phase != api.PhasePending {
		t.Fatalf("the session is %+v (%v), want pending", e, err)
	}
	var pods corev1.PodList
	if err := kube.List(ctx, &pods, client.InNamespace(ns)); err != nil || len(pods.Items) != 0 {
		t.Fatalf("pods %d (%v), want none", len(pods.Items), err)
	}
}

// TestRunnerNetworkPolicyFollowsChanges: a running session's policy
// changed through the API rewrites its NetworkPolicy in place (same pod);
// an unrestricted session turned restricted gets one; a new control plane
// in the pool's spec reaches the policies of serving pods; a change to a
// hostname rule, which the pool cannot enforce, ends its pod and gives
// the session back with the sentence why, never serving it open.
func TestRunnerNetworkPolicyFollowsChanges(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{Network: enforcing()})
	r := e.runner()
	id := e.restrictedSession(api.NetworkPolicyRule{IPv4: "10.1.0.0/16"})
	open := e.session()
	c := e.consumer(r, 2)
	c.NetworkEnforcement = func() error { return nil }
	c.NetworkRefusal = func(q *api.QueueEntry) error { return SessionNetworkRefusal(e.getPool(), q, false) }
	e.startConsumer(c)
	p := e.waitPod(id, "the restricted session's pod", nil)
	e.kubelet(r, p, corev1.PodRunning, running())
	po := e.waitPod(open, "the unrestricted session's pod", nil)
	e.kubelet(r, po, corev1.PodRunning, running())

	setPolicy := func(sid string, rules ...api.NetworkPolicyRule) {
		t.Helper()
		if _, err := e.admin.Sessions.Update(e.ctx, sid, api.UpdateSessionRequest{NetworkPolicy: &api.NetworkPolicy{Enabled: true, Allow: rules}}); err != nil {
			t.Fatalf("update the session's policy: %v", err)
		}
	}
	policy := func(sid string) *networkingv1.NetworkPolicy {
		var np networkingv1.NetworkPolicy
		if !e.get(NetworkPolicyName(sid), &np) {
			return nil
		}
		return &np
	}
	setPolicy(id, api.NetworkPolicyRule{IPv4: "10.2.0.0/24", Ports: []int{22}})
	e.waitFor("the NetworkPolicy rewritten", func() bool {
		np := policy(id)
		return np != nil && len(np.Spec.Egress) == 3 && np.Spec.Egress[2].To[0].IPBlock.CIDR == "10.2.0.0/24" &&
			portsOf(np.Spec.Egress[2].Ports) == "TCP/22 UDP/22"
	})
	if cur := e.waitPod(id, "the same pod", nil); cur.UID != p.UID {
		t.Errorf("the pod was replaced (%s, was %s)", cur.UID, p.UID)
	}

	setPolicy(open, api.NetworkPolicyRule{IPv4: "192.0.2.0/24"})
	e.waitFor("a NetworkPolicy for the session turned restricted", func() bool {
		np := policy(open)
		return np != nil && len(np.Spec.Egress) == 3 && np.Spec.Egress[2].To[0].IPBlock.CIDR == "192.0.2.0/24"
	})

	// A new control plane in the pool's spec reaches the serving pods.
	e.editPool(func(spec *v1alpha1.OutpostPoolSpec) {
		spec.Network.ControlPlane.To[0].IPBlock.CIDR = "10.97.0.0/24"
	})
	e.mu.Lock()
	e.pool.Generation++ // as the API server counts a spec change
	e.mu.Unlock()
	r.NotifyAll()
	e.waitFor("the control plane rewritten in both policies", func() bool {
		a, b := policy(id), policy(open)
		return a != nil && b != nil && a.Spec.Egress[1].To[0].IPBlock.CIDR == "10.97.0.0/24" && b.Spec.Egress[1].To[0].IPBlock.CIDR == "10.97.0.0/24"
	})

	setPolicy(id, api.NetworkPolicyRule{Hostname: "example.test"})
	e.waitGone(PodName(id), &corev1.Pod{})
	e.waitEvent(id, api.EventMachine, api.MachineStepFailed, "hostname rule")
	e.waitFor("the session pending again", func() bool { return e.entry(id).Status.Phase == api.PhasePending })
	if policy(id) == nil {
		t.Error("the NetworkPolicy went before its pod was collected as gone")
	}
}

// TestRunnerNetworkPolicyWrittenBack: a serving session's NetworkPolicy
// deleted, or widened, by hand is written back at the runner's next poll.
func TestRunnerNetworkPolicyWrittenBack(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{Network: enforcing()})
	r := e.runner()
	r.cfg.PollInterval = 100 * time.Millisecond
	id := e.restrictedSession(api.NetworkPolicyRule{IPv4: "10.1.0.0/16"})
	c := e.consumer(r, 1)
	c.NetworkEnforcement = func() error { return nil }
	c.NetworkRefusal = func(q *api.QueueEntry) error { return SessionNetworkRefusal(e.getPool(), q, false) }
	e.startConsumer(c)
	p := e.waitPod(id, "the pod", nil)
	e.kubelet(r, p, corev1.PodRunning, running())
	name := NetworkPolicyName(id)
	var np networkingv1.NetworkPolicy
	if !e.get(name, &np) {
		t.Fatal("no NetworkPolicy")
	}
	want := np.Spec

	np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{}) // an empty rule allows everything
	if err := kube.Update(e.ctx, &np); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the widened policy written back", func() bool {
		var cur networkingv1.NetworkPolicy
		return e.get(name, &cur) && equality.Semantic.DeepEqual(cur.Spec, want)
	})
	if err := kube.Delete(e.ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the deleted policy made again", func() bool {
		var cur networkingv1.NetworkPolicy
		return e.get(name, &cur) && cur.UID != np.UID && equality.Semantic.DeepEqual(cur.Spec, want)
	})
	if cur := e.waitPod(id, "the same pod", nil); cur.UID != p.UID {
		t.Errorf("the pod was replaced")
	}
}

// signalWriter logs to the test and closes seen once a line holds text.
type signalWriter struct {
	t    *testing.T
	text string
	once sync.Once
	seen chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	if strings.Contains(string(p), w.text) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// TestDeletedPoolHeldForRestrictedPods: a deleted pool whose restricted
// session's pod is still terminating is held, with its NetworkPolicy,
// until that pod is gone, so the pod never runs open; then it goes.
func TestDeletedPoolHeldForRestrictedPods(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t, ctx)
	env := newOutpostEnv(t)
	w := &signalWriter{t: t, text: "holding the deleted pool", seen: make(chan struct{})}
	startOperator(t, Options{Namespaces: []string{ns}, OperatorNamespace: ns, AllowedAPIURLs: []string{env.url}, AcceptorID: "k8s-test",
		Logger: slog.New(slog.NewTextHandler(w, nil))})
	pool := newPool(t, ctx, ns, "gpu", env.url, env.token, 2)
	pool = getPool(t, ctx, client.ObjectKeyFromObject(pool))
	pool.Spec.Network = enforcing()
	if err := kube.Update(ctx, pool); err != nil {
		t.Fatal(err)
	}
	s, err := env.admin.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: "dev", Prompt: "test",
		NetworkPolicy: &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{IPv4: "10.0.0.0/8"}}},
		Agent:         api.Agent{Kind: api.AgentExternal}})
	if err != nil {
		t.Fatal(err)
	}
	id := s.Metadata.SessionID
	podKey := client.ObjectKey{Namespace: ns, Name: PodName(id)}
	var pod corev1.Pod
	waitFor(t, ctx, "the session's pod", func() bool { return kube.Get(ctx, podKey, &pod) == nil }, nil)
	// A pod that lingers as a terminating one does on a node.
	pod.Finalizers = append(pod.Finalizers, "outpost.dev/test-hold")
	if err := kube.Update(ctx, &pod); err != nil {
		t.Fatal(err)
	}
	deleting := getPool(t, ctx, client.ObjectKeyFromObject(pool))
	if err := kube.Delete(ctx, deleting); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.seen:
	case <-ctx.Done():
		t.Fatal("the deleted pool was not held for its restricted pod")
	}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(pool), &v1alpha1.OutpostPool{}); err != nil {
		t.Fatalf("the pool went while its restricted pod terminates: %v", err)
	}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: NetworkPolicyName(id)}, &networkingv1.NetworkPolicy{}); err != nil {
		t.Fatalf("the NetworkPolicy of the terminating pod: %v", err)
	}
	if err := kube.Get(ctx, podKey, &pod); err != nil || pod.DeletionTimestamp == nil {
		t.Fatalf("the pod %v, deleting %v: want it terminating", err, pod.DeletionTimestamp)
	}
	pod.Finalizers = nil
	if err := kube.Update(ctx, &pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the pool gone once its pod is", func() bool {
		return apierrors.IsNotFound(kube.Get(ctx, client.ObjectKeyFromObject(pool), &v1alpha1.OutpostPool{}))
	}, nil)
}

// noNetworkPolicies is the client of an operator whose RBAC predates
// network enforcement: every NetworkPolicy request is forbidden, and
// counted.
type noNetworkPolicies struct {
	client.Client
	asked *atomic.Int32
}

func (c noNetworkPolicies) forbid(obj any) error {
	switch obj.(type) {
	case *networkingv1.NetworkPolicy, *networkingv1.NetworkPolicyList:
		c.asked.Add(1)
		return apierrors.NewForbidden(networkingv1.Resource("networkpolicies"), "", errors.New("no RBAC for it"))
	}
	return nil
}

func (c noNetworkPolicies) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.forbid(obj); err != nil {
		return err
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c noNetworkPolicies) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.forbid(list); err != nil {
		return err
	}
	return c.Client.List(ctx, list, opts...)
}

func (c noNetworkPolicies) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := c.forbid(obj); err != nil {
		return err
	}
	return c.Client.Create(ctx, obj, opts...)
}

// TestUnrestrictedNeedsNoNetworkPolicyRBAC: a pool without network
// settings serves its sessions to the end, and collects, without asking
// anything about NetworkPolicies, so an operator whose RBAC predates them
// keeps working; the same client refuses a restricted session in an
// enforcing pool rather than serve it open.
func TestUnrestrictedNeedsNoNetworkPolicyRBAC(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{})
	var asked atomic.Int32
	r := e.runner()
	r.cfg.Kube = noNetworkPolicies{Client: kube, asked: &asked}
	id := e.session()
	e.startConsumer(e.consumer(r, 1))
	p := e.waitPod(id, "the pod", nil)
	e.kubelet(r, p, corev1.PodRunning, running())
	r.NotifyAll()
	if err := r.CollectNetworkPolicies(e.ctx); err != nil {
		t.Errorf("collect: %v", err)
	}
	e.terminate(id)
	e.waitGone(PodName(id), &corev1.Pod{})
	if n := asked.Load(); n != 1 { // the collector's list, forbidden and let go
		t.Errorf("%d NetworkPolicy requests, want only the collector's list", n)
	}

	e2 := newKenv(t, v1alpha1.OutpostPoolSpec{Network: enforcing()})
	r2 := e2.runner()
	r2.cfg.Kube = noNetworkPolicies{Client: kube, asked: &asked}
	rid := e2.restrictedSession(api.NetworkPolicyRule{IPv4: "10.0.0.0/8"})
	c := e2.consumer(r2, 1)
	c.NetworkEnforcement = func() error { return nil }
	c.NetworkRefusal = func(q *api.QueueEntry) error { return SessionNetworkRefusal(e2.getPool(), q, false) }
	e2.startConsumer(c)
	e2.waitEvent(rid, api.EventMachine, api.MachineStepFailed, "read network policy")
	if e2.get(PodName(rid), &corev1.Pod{}) {
		t.Error("a restricted session got a pod without its NetworkPolicy")
	}
}
