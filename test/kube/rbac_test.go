//go:build !windows

package kube

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/deploy/helm"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// rbacKinds are the rendered kinds the chart's RBAC consists of; the
// Deployment, Service and CRD are not applied (the test runs the operator
// itself, and the CRD is installed already).
var rbacKinds = []string{"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}

// chartRelease is the outpost-operator chart rendered and its RBAC applied:
// what `helm install` would give the operator, minus its Deployment.
type chartRelease struct {
	ns         string   // the release's namespace
	sa         string   // the ServiceAccount's name
	args       []string // the Deployment's container args
	kubeconfig string   // a kubeconfig of the ServiceAccount's user
	applied    []string // kind/namespace/name of what was applied
}

// installChartRBAC renders the operator chart for a release in a namespace
// of its own, watching only the fixture's namespace, applies its
// ServiceAccount and RBAC as an admin, and writes a kubeconfig for the
// user the API server would see the ServiceAccount's token as.
func (f *fixture) installChartRBAC(release string) *chartRelease {
	f.t.Helper()
	ctx := f.t.Context()
	r := &chartRelease{ns: "rel-" + f.ns}
	if len(r.ns) > 63 {
		r.ns = r.ns[:63]
	}
	if _, err := f.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	manifests, err := helm.Render(ctx, helm.Operator, helm.Options{ReleaseName: release, Namespace: r.ns, Values: map[string]any{
		"operator": map[string]any{
			"watchNamespaces": []any{f.ns},
			"defaultApiUrl":   f.url,
			"allowedApiUrls":  []any{f.url},
		},
	}})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, m := range manifests {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(m.YAML), &u.Object); err != nil {
			f.t.Fatalf("%s: %v", m.Source, err)
		}
		switch kind := u.GetKind(); {
		case kind == "Deployment":
			var d struct {
				Spec struct {
					Template corev1.PodTemplateSpec `json:"template"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal([]byte(m.YAML), &d); err != nil {
				f.t.Fatal(err)
			}
			r.args = d.Spec.Template.Spec.Containers[0].Args
			r.sa = d.Spec.Template.Spec.ServiceAccountName
		case slices.Contains(rbacKinds, kind):
			if err := f.kc.Create(ctx, &u); err != nil {
				f.t.Fatalf("apply %s %s: %v", kind, u.GetName(), err)
			}
			r.applied = append(r.applied, kind+"/"+u.GetNamespace()+"/"+u.GetName())
			if u.GetNamespace() == "" { // cluster-scoped: remove it with the test
				f.t.Cleanup(func() { _ = f.kc.Delete(ctx, &u) })
			}
		}
	}
	if r.sa == "" || len(r.args) == 0 {
		f.t.Fatalf("the chart rendered no Deployment with a service account and args: %v", r.applied)
	}
	f.t.Logf("applied %s", strings.Join(r.applied, ", "))

	addUserMu.Lock()
	user, err := apiEnv.AddUser(envtest.User{
		Name:   "system:serviceaccount:" + r.ns + ":" + r.sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + r.ns, "system:authenticated"},
	}, nil)
	addUserMu.Unlock()
	if err != nil {
		f.t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		f.t.Fatal(err)
	}
	r.kubeconfig = filepath.Join(f.t.TempDir(), "kubeconfig-"+r.sa)
	if err := os.WriteFile(r.kubeconfig, kc, 0o600); err != nil {
		f.t.Fatal(err)
	}
	return r
}

// clientset is a clientset authenticated as the release's ServiceAccount.
func (r *chartRelease) clientset(t testing.TB) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", r.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// operator starts `outpost operator` with the chart's Deployment's args
// (its listen addresses moved to free ports), as the ServiceAccount, with
// the release's namespace as its own, and waits until it is ready.
func (r *chartRelease) operator(f *fixture) *operator {
	f.t.Helper()
	o := &operator{health: freeAddr(f.t), metrics: freeAddr(f.t)}
	var args []string
	for _, a := range r.args {
		switch {
		case strings.HasPrefix(a, "--metrics-listen="):
			a = "--metrics-listen=" + o.metrics
		case strings.HasPrefix(a, "--health-listen="):
			a = "--health-listen=" + o.health
		}
		args = append(args, a)
	}
	args = append(args, "--kubeconfig", r.kubeconfig, "--operator-namespace", r.ns)
	// Registered before start's: it runs after the process stopped, and
	// even when the test stopped early.
	f.t.Cleanup(func() {
		if o.proc != nil {
			for _, line := range refused(o.out.String()) {
				f.t.Errorf("the operator was refused under the chart's RBAC: %s", line)
			}
		}
	})
	o.proc = start(f.t, "operator", []string{"KUBECONFIG=/nonexistent"}, args...)
	f.waitFor(30*time.Second, "the operator to be ready", func() bool {
		select {
		case <-o.done:
			f.t.Fatalf("the operator exited: %v\n%s", o.err, o.out.String())
		default:
		}
		resp, err := http.Get("http://" + o.health + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return o
}

// TestChartRBAC runs the operator under the RBAC the outpost-operator
// chart grants with operator.watchNamespaces set (a Role in the watched
// namespace, a Role in the release's for its Lease and ConfigMap), as its
// ServiceAccount's user rather than an admin, with the chart's args
// (--leader-elect, --namespace): a pool serves sessions to the end, a
// FilesystemSnapshot session keeps its claim over a suspend, an operator
// restart adopts running pods, deleting the pool releases its
// claims, and nothing the operator asks of the API server is forbidden —
// while a pool in a namespace it does not watch is left alone.
func TestChartRBAC(t *testing.T) {
	requireOperator(t)
	t.Parallel()
	f := newFixture(t)
	rel := f.installChartRBAC("outpost")
	if !slices.Contains(rel.args, "--leader-elect") || !slices.Contains(rel.args, "--namespace="+f.ns) {
		t.Fatalf("the chart's args %v lack --leader-elect or --namespace=%s", rel.args, f.ns)
	}

	// The API server authorizes the ServiceAccount by the chart's RBAC
	// (envtest runs with --authorization-mode=RBAC): it may read a Secret
	// by name, not list them, and has nothing outside the watched namespace.
	sa := rel.clientset(t)
	if _, err := sa.CoreV1().Secrets(f.ns).List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing Secrets as the operator: %v, want forbidden", err)
	}
	if _, err := sa.CoreV1().Secrets(f.ns).Get(t.Context(), "absent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("getting a Secret by name as the operator: %v, want not found", err)
	}

	// A pool in a namespace the release does not watch, with a session
	// waiting for it.
	stray := &fixture{t: t, ns: "stray-" + f.ns, cs: f.cs, kc: f.kc, url: f.url, admin: f.admin}
	if len(stray.ns) > 63 {
		stray.ns = stray.ns[:63]
	}
	if _, err := f.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: stray.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.CoreV1().Pods(stray.ns).List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing pods outside the watched namespace as the operator: %v, want forbidden", err)
	}
	strayPool := stray.pool("stray", "stray", f.outpost("stray"), nil)
	strayID := f.scriptSession("stray", "never claimed", "echo never")

	token := f.outpost("scoped")
	w := f.watch()
	pool := f.pool("scoped", "scoped", token, func(p *v1alpha1.OutpostPool) { p.Spec.MaxConcurrentSessions = ptr(int32(2)) })
	first := rel.operator(f)

	// Sessions run to the end and leave nothing behind.
	var ids []string
	for i := range 4 {
		ids = append(ids, f.scriptSession("scoped", fmt.Sprintf("s%d", i), fmt.Sprintf("echo hello-%d", i), "pwd"))
	}
	for _, id := range ids {
		f.waitFinished(id, 120*time.Second)
	}
	f.waitNothingLeft(60 * time.Second)
	f.waitFor(30*time.Second, "the pool Ready with no claims", func() bool {
		p := f.getPool("scoped")
		return p.Status.Phase == v1alpha1.PoolReady && p.Status.ClaimedSessions == 0
	})
	// The acceptor id's ConfigMap and the Lease are in the release's namespace.
	if _, err := f.cs.CoreV1().ConfigMaps(rel.ns).Get(t.Context(), "outpost-operator-acceptor-id", metav1.GetOptions{}); err != nil {
		t.Errorf("the acceptor id's ConfigMap in %s: %v", rel.ns, err)
	}
	if _, err := f.cs.CoordinationV1().Leases(rel.ns).Get(t.Context(), "outpost-operator", metav1.GetOptions{}); err != nil {
		t.Errorf("the leader-election Lease in %s: %v", rel.ns, err)
	}

	// A restricted session runs behind a NetworkPolicy made with the
	// chart's rights, collected once its pod is gone; one with a hostname
	// rule stays pending, and the pool says why in an Event.
	netPool := f.pool("net", "net", f.outpost("net"), func(p *v1alpha1.OutpostPool) {
		p.Spec.Network = v1alpha1.NetworkSpec{Enforcement: v1alpha1.NetworkEnforcementNetworkPolicy,
			ControlPlane: &v1alpha1.NetworkDestination{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "127.0.0.0/8"}}}}}
	})
	restrict := func(title string, rule api.NetworkPolicyRule) string {
		return f.createSession(api.CreateSessionRequest{Outpost: "net", Title: title, Agent: api.Agent{Kind: api.AgentExternal},
			NetworkPolicy: &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{rule}}})
	}
	restricted := restrict("restricted", api.NetworkPolicyRule{IPv4: "192.0.2.0/24", Ports: []int{443}})
	named := restrict("named", api.NetworkPolicyRule{Hostname: "example.test"})
	policies := func(id string) []networkingv1.NetworkPolicy {
		l, err := f.cs.NetworkingV1().NetworkPolicies(f.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "outpost.dev/session-id=" + id})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	f.waitStatus(restricted, api.StatusRunning, 90*time.Second)
	if nps := policies(restricted); len(nps) != 1 || len(nps[0].Spec.Egress) != 3 || nps[0].Spec.Egress[2].To[0].IPBlock.CIDR != "192.0.2.0/24" ||
		len(nps[0].OwnerReferences) != 1 || nps[0].OwnerReferences[0].UID != netPool.UID {
		t.Errorf("the restricted session's NetworkPolicies: %+v", nps)
	}
	f.waitFor(60*time.Second, "an Event on the pool refusing the session with a hostname rule", func() bool {
		l, err := f.cs.EventsV1().Events(f.ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range l.Items {
			if ev.Reason == "RestrictedSessionRefused" && ev.Regarding.Name == "net" && strings.Contains(ev.Note, named) {
				return true
			}
		}
		return false
	})
	f.tool(restricted, "end_session", map[string]any{})
	f.waitFor(60*time.Second, "the restricted session to end", func() bool { return api.IsFinal(f.session(restricted).Status.Status) })
	f.waitNothingLeft(60 * time.Second)
	f.waitFor(150*time.Second, "its NetworkPolicy collected", func() bool { return len(policies(restricted)) == 0 })
	if e := f.queueEntry(named); e.Status.Phase != api.PhasePending || len(policies(named)) != 0 {
		t.Errorf("the session with a hostname rule: %+v, policies %d", e.Status, len(policies(named)))
	}

	// FilesystemSnapshot: the session's claim is made, marked on suspend,
	// kept, mounted again on resume and deleted at the end.
	f.pool("snap", "snap", f.outpost("snap"), func(p *v1alpha1.OutpostPool) {
		p.Spec.Resume.Policy = v1alpha1.ResumeFilesystemSnapshot
	})
	snap := f.externalSession("snap", "suspend me")
	f.waitStatus(snap, api.StatusRunning, 90*time.Second)
	f.exec(snap, "echo before-the-suspend > kept.txt")
	if _, err := f.admin.Sessions.Suspend(t.Context(), snap); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(snap, api.StatusSuspended, 60*time.Second)
	f.waitFor(60*time.Second, "the suspended session's pod to go", func() bool {
		pods, _, _ := f.managed()
		return len(pods) == 0
	})
	if _, err := f.admin.Sessions.Resume(t.Context(), snap); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(snap, api.StatusRunning, 90*time.Second)
	if got := f.exec(snap, "cat kept.txt"); !strings.Contains(got, "before-the-suspend") {
		t.Errorf("the resumed workspace has:\n%s", got)
	}
	f.tool(snap, "end_session", map[string]any{})
	f.waitFor(60*time.Second, "the snapshot session to end", func() bool { return api.IsFinal(f.session(snap).Status.Status) })
	f.waitNothingLeft(60 * time.Second)

	// An operator restart adopts the pods of running sessions.
	gate := t.TempDir()
	var held []string
	for i := range 2 {
		marks := filepath.Join(gate, fmt.Sprintf("marks-%d", i))
		held = append(held, f.scriptSession("scoped", fmt.Sprintf("r%d", i),
			fmt.Sprintf("echo first >> %s; while [ ! -e %s/release ]; do sleep 0.05; done", marks, gate),
			fmt.Sprintf("echo second >> %s", marks)))
	}
	f.waitFor(90*time.Second, "every held session's first call to run", func() bool {
		for i := range held {
			if _, err := os.Stat(filepath.Join(gate, fmt.Sprintf("marks-%d", i))); err != nil {
				return false
			}
		}
		return true
	})
	if err := first.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Logf("the first operator's exit: %v", err)
	}
	rel.operator(f) // adopts
	if err := os.WriteFile(filepath.Join(gate, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for i, id := range held {
		f.waitFinished(id, 120*time.Second)
		b, _ := os.ReadFile(filepath.Join(gate, fmt.Sprintf("marks-%d", i)))
		if string(b) != "first\nsecond\n" {
			t.Errorf("session %s ran its steps as %q, want each once", id, b)
		}
	}
	for _, id := range append(ids, held...) {
		if n := w.podsOf(id); n != 1 {
			t.Errorf("session %s had %d pods, want 1 (adopted across the restart)", id, n)
		}
	}
	f.waitNothingLeft(60 * time.Second)

	// Deleting the pool releases its claims and removes what it made.
	running := f.externalSession("scoped", "running at deletion")
	f.waitStatus(running, api.StatusRunning, 90*time.Second)
	if err := f.kc.Delete(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	f.waitFor(60*time.Second, "the pool to go", func() bool {
		err := f.kc.Get(t.Context(), ctrlclient.ObjectKeyFromObject(pool), &v1alpha1.OutpostPool{})
		return apierrors.IsNotFound(err)
	})
	f.waitNothingLeft(60 * time.Second)
	f.waitFor(30*time.Second, "the session back in the queue", func() bool {
		e := f.queueEntry(running)
		return e.Status.Phase == api.PhasePending && e.Status.AcceptorID == nil
	})

	// The pool outside the watched namespaces: never claimed, no pods, no
	// Secrets of the operator's, no status, no finalizer.
	if e := f.queueEntry(strayID); e.Status.Phase != api.PhasePending || e.Status.AcceptorID != nil {
		t.Errorf("the unwatched pool's session was claimed: %+v", e.Status)
	}
	pods, secrets, claims := stray.managed()
	if len(pods)+len(secrets)+len(claims) != 0 {
		t.Errorf("the operator made %d pods, %d Secrets, %d claims in the unwatched namespace", len(pods), len(secrets), len(claims))
	}
	if p := stray.getPool(strayPool.Name); p.Status.Phase != "" || len(p.Status.Conditions) != 0 || p.Status.ObservedGeneration != 0 || len(p.Finalizers) != 0 {
		t.Errorf("the unwatched pool was touched: finalizers %v, status %+v", p.Finalizers, p.Status)
	}

	// Whatever the operator asked, the API server allowed: checked as
	// each operator stops, in rel.operator's cleanup.
}

// refusal matches the API server's answer to a request RBAC does not allow.
var refusal = regexp.MustCompile(`(?i)forbidden|cannot \S+ resource`)

// refused is the lines of an operator's log that say the API server
// refused it a request: "… is forbidden: User "system:serviceaccount:…"
// cannot VERB resource …".
func refused(log string) []string {
	var out []string
	for line := range strings.SplitSeq(log, "\n") {
		if refusal.MatchString(line) {
			out = append(out, line)
		}
	}
	return out
}
