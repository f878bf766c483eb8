//go:build !windows

package operator

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

func ready(p *v1alpha1.OutpostPool) bool {
	c := apimeta.FindStatusCondition(p.Status.Conditions, ConditionReady)
	return p.Status.Phase == v1alpha1.PoolReady && c != nil && c.Status == metav1.ConditionTrue &&
		p.Status.ObservedGeneration == p.Generation
}

func phase(ph v1alpha1.PoolPhase, reason string) func(*v1alpha1.OutpostPool) bool {
	return func(p *v1alpha1.OutpostPool) bool {
		c := apimeta.FindStatusCondition(p.Status.Conditions, ConditionReady)
		return p.Status.Phase == ph && c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason &&
			p.Status.ObservedGeneration == p.Generation
	}
}

// pokeReconciles makes the operator reconcile the pool n times without
// changing anything of it: a pod the pool owns (not a session's) changes
// n times, and each change maps to the pool. It waits until the reconciles
// counter shows them.
func pokeReconciles(t *testing.T, ctx context.Context, op *testOperator, pool *v1alpha1.OutpostPool, n int) {
	t.Helper()
	name := client.ObjectKeyFromObject(pool).String()
	before := count(op.m.Reconciles, name)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pool.Namespace, GenerateName: "poke-",
		Labels:          map[string]string{LabelManagedBy: ManagedBy},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "OutpostPool", Name: pool.Name, UID: pool.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if err := kube.Create(ctx, pod); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	for i := range n {
		want := before + i + 1
		waitFor(t, ctx, "a reconcile", func() bool { return count(op.m.Reconciles, name) >= want }, nil)
		if i < n-1 {
			patch := client.MergeFrom(pod.DeepCopy())
			pod.Labels["poke"] = strings.Repeat("x", i+1)
			if err := kube.Patch(ctx, pod, patch); err != nil {
				t.Fatalf("patch pod: %v", err)
			}
		}
	}
	if err := kube.Delete(ctx, pod); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
}

// TestPoolServes: a pool gets the finalizer and turns Ready with its
// outpost and acceptor ids, claims up to maxConcurrentSessions, and
// reconciles that change nothing write nothing (resourceVersion stays).
func TestPoolServes(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t, ctx)
	env := newOutpostEnv(t)
	op := startOperator(t, Options{Namespaces: []string{ns}, OperatorNamespace: ns, AllowedAPIURLs: []string{env.url}, AcceptorID: "k8s-test"})
	pool := newPool(t, ctx, ns, "gpu", env.url, env.token, 2)
	key := client.ObjectKeyFromObject(pool)
	p := waitPool(t, ctx, key, "the pool Ready with its watch cursor", func(p *v1alpha1.OutpostPool) bool {
		return ready(p) && p.Status.WatchCursor != ""
	})
	acceptor := "k8s-test:" + ns + ".gpu"
	if p.Status.AcceptorID != acceptor || p.Status.OutpostID == "" || !controllerutil.ContainsFinalizer(p, Finalizer) {
		t.Fatalf("status %+v, finalizers %v: want acceptor %s, an outpost id and the finalizer", p.Status, p.Finalizers, acceptor)
	}
	// Conditions and fields stay as they are: no status write.
	rv := p.ResourceVersion
	pokeReconciles(t, ctx, op, p, 3)
	if p := getPool(t, ctx, key); p.ResourceVersion != rv {
		t.Fatalf("reconciles that changed nothing wrote the pool: resourceVersion %s, was %s (status %+v)", p.ResourceVersion, rv, p.Status)
	}

	ids := []string{env.session(ctx), env.session(ctx), env.session(ctx)}
	waitPool(t, ctx, key, "two claimed sessions in the status", func(p *v1alpha1.OutpostPool) bool { return p.Status.ClaimedSessions == 2 })
	held := env.claims(ctx, acceptor)
	if len(held) != 2 || !slices.Contains(ids, held[0]) || !slices.Contains(ids, held[1]) {
		t.Fatalf("claims of %s: %v, want two of %v", acceptor, held, ids)
	}
	if n := count(op.m.SessionsClaimed, key.String()); n != 2 {
		t.Errorf("sessions_claimed_total = %d, want 2", n)
	}
	if n := count(op.m.ReconcileFailures, key.String()); n != 0 {
		t.Errorf("reconcile_failures_total = %d, want 0", n)
	}
}

// TestRefusedAPIURL: a pool naming a server outside the allow list is
// Degraded with the reason, and that server gets no request at all (not
// even the token), however often the pool is reconciled; nor is the
// status rewritten. Pointed at an allowed server it turns Ready.
func TestRefusedAPIURL(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t, ctx)
	env := newOutpostEnv(t)
	var evilHits atomic.Int32
	evil := countingProxy(t, env.url, func(*http.Request) { evilHits.Add(1) }, nil)
	op := startOperator(t, Options{Namespaces: []string{ns}, OperatorNamespace: ns, AllowedAPIURLs: []string{env.url}, AcceptorID: "k8s-test"})
	pool := newPool(t, ctx, ns, "evil", evil, env.token, 2)
	key := client.ObjectKeyFromObject(pool)
	p := waitPool(t, ctx, key, "the pool Degraded", phase(v1alpha1.PoolDegraded, ReasonAPIURLNotAllowed))
	c := apimeta.FindStatusCondition(p.Status.Conditions, ConditionReady)
	if !strings.Contains(c.Message, evil) || !strings.Contains(c.Message, env.url) {
		t.Errorf("message %q: want the refused URL and the allowed ones", c.Message)
	}
	rv := p.ResourceVersion
	pokeReconciles(t, ctx, op, p, 3)
	if p := getPool(t, ctx, key); p.ResourceVersion != rv {
		t.Errorf("a Degraded pool's status was rewritten with nothing changed: resourceVersion %s, was %s", p.ResourceVersion, rv)
	}
	if n := evilHits.Load(); n != 0 {
		t.Fatalf("the refused server got %d requests", n)
	}
	if n := count(op.m.ReconcileFailures, key.String()); n < 4 {
		t.Errorf("reconcile_failures_total = %d, want every reconcile (4+)", n)
	}

	// More than an origin is refused too, even on the allowed server.
	for _, bad := range []string{env.url + "/v1", strings.Replace(env.url, "http://", "http://user:pw@", 1), env.url + "?a=b"} {
		patch := client.MergeFrom(p.DeepCopy())
		p.Spec.APIURL = bad
		if err := kube.Patch(ctx, p, patch); err != nil {
			t.Fatal(err)
		}
		p = waitPool(t, ctx, key, "the pool Degraded for "+bad, phase(v1alpha1.PoolDegraded, ReasonAPIURLNotAllowed))
	}
	before := env.hitsOf("all")
	if before != 0 {
		t.Errorf("the allowed server got %d requests for refused URLs", before)
	}
	patch := client.MergeFrom(p.DeepCopy())
	p.Spec.APIURL = env.url
	if err := kube.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	p = waitPool(t, ctx, key, "the pool Ready", ready)
	if c := apimeta.FindStatusCondition(p.Status.Conditions, ConditionReady); c.Reason != ReasonServing {
		t.Errorf("Ready reason %q", c.Reason)
	}
}

// TestBadToken: a token the server refuses makes the pool Unauthorized; a
// good token in the Secret (not watched) is picked up by the retry.
func TestBadToken(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t, ctx)
	env := newOutpostEnv(t)
	startOperator(t, Options{Namespaces: []string{ns}, OperatorNamespace: ns, DefaultAPIURL: env.url, AcceptorID: "k8s-test"})
	pool := newPool(t, ctx, ns, "p", "", "opt_not-a-token", 1) // the default URL
	key := client.ObjectKeyFromObject(pool)
	p := waitPool(t, ctx, key, "the pool Unauthorized", phase(v1alpha1.PoolUnauthorized, ReasonUnauthorized))
	if c := apimeta.FindStatusCondition(p.Status.Conditions, ConditionReady); !strings.Contains(c.Message, api.ScopeMachine) {
		t.Errorf("message %q: want the scope the token needs", c.Message)
	}
	var s corev1.Secret
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p-token"}, &s); err != nil {
		t.Fatal(err)
	}
	s.Data = map[string][]byte{"token": []byte(env.token + "\n")}
	if err := kube.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	waitPool(t, ctx, key, "the pool Ready with the new token", ready)
}

// TestTokenSecretAndTemplateChecked: a missing Secret, a missing key and a
// template the API server refuses each make the pool Degraded with the
// reason, before anything goes to the server.
func TestTokenSecretAndTemplateChecked(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t, ctx)
	env := newOutpostEnv(t)
	startOperator(t, Options{Namespaces: []string{ns}, OperatorNamespace: ns, AllowedAPIURLs: []string{env.url}, AcceptorID: "k8s-test"})

	nosecret := &v1alpha1.OutpostPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nosecret"},
		Spec: v1alpha1.OutpostPoolSpec{Outpost: "dev", APIURL: env.url, TokenSecretRef: v1alpha1.SecretKeyRef{Name: "absent"}}}
	if err := kube.Create(ctx, nosecret); err != nil {
		t.Fatal(err)
	}
	p := waitPool(t, ctx, client.ObjectKeyFromObject(nosecret), "Degraded: no Secret", phase(v1alpha1.PoolDegraded, ReasonTokenSecret))
	if c := apimeta.FindStatusCondition(p.Status.Conditions, ConditionReady); !strings.Contains(c.Message, "absent") {
		t.Errorf("message %q: want the Secret's name", c.Message)
	}

	nokey := newPool(t, ctx, ns, "nokey", env.url, env.token, 1)
	patch := client.MergeFrom(nokey.DeepCopy())
	nokey.Spec.TokenSecretRef.Key = "other"
	if err := kube.Patch(ctx, nokey, patch); err != nil {
		t.Fatal(err)
	}
	waitPool(t, ctx, client.ObjectKeyFromObject(nokey), "Degraded: no key", phase(v1alpha1.PoolDegraded, ReasonTokenSecret))

	badtmpl := newPool(t, ctx, ns, "badtmpl", env.url, env.token, 1)
	patch = client.MergeFrom(badtmpl.DeepCopy())
	badtmpl.Spec.Worker.Template.Spec.Containers = []corev1.Container{{Name: "sidecar"}} // no image
	if err := kube.Patch(ctx, badtmpl, patch); err != nil {
		t.Fatal(err)
	}
	p = waitPool(t, ctx, client.ObjectKeyFromObject(badtmpl), "Degraded: bad template", phase(v1alpha1.PoolDegraded, ReasonTemplateInvalid))
	if c := apimeta.FindStatusCondition(p.Status.Conditions, ConditionReady); !strings.Contains(c.Message, "image") {
		t.Errorf("message %q: want the API server's complaint about the image", c.Message)
	}
	// A pool that was never usable is still deleted at once.
	for _, p := range []*v1alpha1.OutpostPool{nosecret, nokey, badtmpl} {
		deletePool(t, ctx, p)
	}
}

// deletePool deletes the pool and waits until it is gone.
func deletePool(t *testing.T, ctx context.Context, p *v1alpha1.OutpostPool) {
	t.Helper()
	if err := kube.Delete(ctx, p); err != nil {
		t.Fatalf("delete pool: %v", err)
	}
	waitFor(t, ctx, "pool "+p.Name+" gone", func() bool {
		err := kube.Get(ctx, client.ObjectKeyFromObject(p), &v1alpha1.OutpostPool{})
		return apierrors.IsNotFound(err)
	}, nil)
}

// TestDeletePoolReleasesClaims: deleting a pool releases every claim it
// holds (the sessions are pending again, not failed an attempt) and lets
// the pool go.
func TestDeletePoolReleasesClaims(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t, ctx)
	env := newOutpostEnv(t)
	startOperator(t, Options{Namespaces: []string{ns}, OperatorNamespace: ns, AllowedAPIURLs: []string{env.url}, AcceptorID: "k8s-test"})
	pool := newPool(t, ctx, ns, "p", env.url, env.token, 2)
	key := client.ObjectKeyFromObject(pool)
	waitPool(t, ctx, key, "the pool Ready", ready)
	ids := []string{env.session(ctx), env.session(ctx)}
	acceptor := "k8s-test:" + ns + ".p"
	waitFor(t, ctx, "two claims", func() bool { return len(env.claims(ctx, acceptor)) == 2 }, nil)

	deletePool(t, ctx, getPool(t, ctx, key))
	if held := env.claims(ctx, acceptor); len(held) != 0 {
		t.Fatalf("claims left after the pool's deletion: %v", held)
	}
	for _, id := range ids {
		e, err := env.admin.Queue.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if e.Status.Phase != api.PhasePending || e.Status.Attempts != 0 {
			t.Errorf("session %s: phase %s, attempts %d; want pending again with no failed attempt", id, e.Status.Phase, e.Status.Attempts)
		}
	}
	noPods(t, ctx, ns, "p")

	// With its server down a pool is deleted all the same: its pods go,
	// its claims lapse.
	pool = newPool(t, ctx, ns, "q", env.url, env.token, 1)
	waitPool(t, ctx, client.ObjectKeyFromObject(pool), "the pool Ready", ready)
	env.session(ctx)
	waitFor(t, ctx, "a claim", func() bool { return len(env.claims(ctx, "k8s-test:"+ns+".q")) == 1 }, nil)
	env.down.Store(true)
	deletePool(t, ctx, getPool(t, ctx, client.ObjectKeyFromObject(pool)))
	noPods(t, ctx, ns, "q")
}

// noPods fails t when pods of the pool are left in ns.
func noPods(t *testing.T, ctx context.Context, ns, pool string) {
	t.Helper()
	var pods corev1.PodList
	if err := kube.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{LabelPool: pool}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			t.Errorf("pod %s of the deleted pool %s is left", p.Name, pool)
		}
	}
}

// TestCapacityChangeKeepsClaims: changing maxConcurrentSessions restarts
// the pool's consumer without giving any claim back: the new consumer
// adopts what the old one held, even past a lowered capacity.
func TestCapacityChangeKeepsClaims(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t, ctx)
	env := newOutpostEnv(t)
	op := startOperator(t, Options{Namespaces: []string{ns}, OperatorNamespace: ns, AllowedAPIURLs: []string{env.url}, AcceptorID: "k8s-test"})
	pool := newPool(t, ctx, ns, "p", env.url, env.token, 2)
	key := client.ObjectKeyFromObject(pool)
	waitPool(t, ctx, key, "the pool Ready", ready)
	acceptor := "k8s-test:" + ns + ".p"
	for range 3 {
		env.session(ctx)
	}
	waitFor(t, ctx, "two claims", func() bool { return len(env.claims(ctx, acceptor)) == 2 }, nil)
	first := env.claims(ctx, acceptor)

	setCapacity := func(n int32) {
		p := getPool(t, ctx, key)
		patch := client.MergeFrom(p.DeepCopy())
		p.Spec.MaxConcurrentSessions = &n
		if err := kube.Patch(ctx, p, patch); err != nil {
			t.Fatal(err)
		}
	}
	setCapacity(3)
	waitPool(t, ctx, key, "three claims in the status", func(p *v1alpha1.OutpostPool) bool {
		return ready(p) && p.Status.ClaimedSessions == 3
	})
	held := env.claims(ctx, acceptor)
	for _, id := range first {
		if !slices.Contains(held, id) {
			t.Errorf("session %s was claimed before the restart and is not now (claims %v)", id, held)
		}
	}
	if n := env.hitsOf("release"); n != 0 {
		t.Fatalf("%d releases during the restart", n)
	}
	if n := count(op.m.SessionsClaimed, key.String()); n != 3 {
		t.Errorf("sessions_claimed_total = %d, want 3 (adoptions are not claims)", n)
	}

	setCapacity(1)
	waitPool(t, ctx, key, "the lowered capacity observed", func(p *v1alpha1.OutpostPool) bool {
		return ready(p) && p.Status.ClaimedSessions == 3
	})
	if held := env.claims(ctx, acceptor); len(held) != 3 || env.hitsOf("release") != 0 {
		t.Fatalf("after lowering the capacity: claims %v, %d releases; want all three kept", held, env.hitsOf("release"))
	}
}

// TestLeaderElection: of two operators sharing a Lease (and the acceptor
// id's ConfigMap), only the leader claims; when it stops it releases the
// Lease at once and the other adopts its claims and claims new sessions.
func TestLeaderElection(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t, ctx)
	env := newOutpostEnv(t)
	opts := Options{Namespaces: []string{ns}, OperatorNamespace: ns, AllowedAPIURLs: []string{env.url},
		LeaderElect: true, leaseDuration: 4 * time.Second, renewDeadline: 3 * time.Second, retryPeriod: 250 * time.Millisecond}
	ops := []*testOperator{startOperator(t, opts), startOperator(t, opts)}
	pool := newPool(t, ctx, ns, "p", env.url, env.token, 5)
	key := client.ObjectKeyFromObject(pool)
	p := waitPool(t, ctx, key, "the pool Ready", ready)
	var cm corev1.ConfigMap
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: AcceptorConfigMap}, &cm); err != nil {
		t.Fatal(err)
	}
	acceptor := cm.Data[AcceptorKey] + ":" + ns + ".p"
	if p.Status.AcceptorID != acceptor {
		t.Fatalf("status.acceptorId %q, want %q (the ConfigMap's id)", p.Status.AcceptorID, acceptor)
	}
	for range 3 {
		env.session(ctx)
	}
	var claimed []int
	// Three claims, and a pod made for each: a session whose pod the
	// stopping leader had not made yet holds nothing to adopt, and the
	// next leader rightly releases it.
	waitFor(t, ctx, "three claims counted, their pods made", func() bool {
		claimed = []int{count(ops[0].m.SessionsClaimed, key.String()), count(ops[1].m.SessionsClaimed, key.String())}
		var pods corev1.PodList
		if err := kube.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{LabelPool: "p"}); err != nil {
			return false
		}
		return claimed[0]+claimed[1] >= 3 && len(env.claims(ctx, acceptor)) == 3 && len(pods.Items) == 3
	}, nil)
	leader, other := 0, 1
	if claimed[1] > 0 {
		leader, other = 1, 0
	}
	if claimed[leader] != 3 || claimed[other] != 0 {
		t.Fatalf("sessions claimed by the two operators: %v; want 3 by one, 0 by the other", claimed)
	}

	var lease coordinationv1.Lease
	leaseKey := client.ObjectKey{Namespace: ns, Name: DefaultLeaderElectionID}
	if err := kube.Get(ctx, leaseKey, &lease); err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("lease: %+v, %v", lease.Spec, err)
	}
	holder := *lease.Spec.HolderIdentity
	start := time.Now()
	ops[leader].stop()
	// Released as it stopped, not left to expire.
	if err := kube.Get(ctx, leaseKey, &lease); err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h == holder {
		t.Errorf("the stopped leader %s still holds the Lease", holder)
	}
	id := env.session(ctx)
	waitFor(t, ctx, "the other operator to claim a new session", func() bool {
		return count(ops[other].m.SessionsClaimed, key.String()) == 1 && slices.Contains(env.claims(ctx, acceptor), id)
	}, nil)
	t.Logf("takeover: the new leader claimed a new session %s after the old one stopped", time.Since(start).Round(time.Millisecond))
	held := env.claims(ctx, acceptor)
	if len(held) != 4 || !slices.Contains(held, id) {
		e, err := env.admin.Queue.Get(ctx, id)
		t.Fatalf("claims after the takeover: %v, want the three adopted and %s (%d releases; its entry %+v, %v)",
			held, id, env.hitsOf("release"), e, err)
	}
	if n := env.hitsOf("release"); n != 0 {
		t.Errorf("%d releases during the takeover", n)
	}
}

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestProbesAndMetrics: /healthz answers, /readyz once the cache synced,
// and /metrics serves the outpost_operator_* series of each pool.
func TestProbesAndMetrics(t *testing.T) {
	ctx := testContext(t)
	ns := namespace(t, ctx)
	env := newOutpostEnv(t)
	health, metrics := freeAddr(t), freeAddr(t)
	op := startOperator(t, Options{Namespaces: []string{ns}, OperatorNamespace: ns, AllowedAPIURLs: []string{env.url}, AcceptorID: "k8s-test",
		HealthListen: health, MetricsListen: metrics, Registry: crmetrics.Registry})
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		waitFor(t, ctx, path+" 200", func() bool { code, _ := get("http://" + health + path); return code == http.StatusOK }, nil)
	}
	pool := newPool(t, ctx, ns, "p", env.url, env.token, 1)
	waitPool(t, ctx, client.ObjectKeyFromObject(pool), "the pool Ready", ready)
	env.session(ctx)
	name := ns + "/p"
	waitFor(t, ctx, "a claim counted", func() bool { return count(op.m.SessionsClaimed, name) == 1 }, nil)
	_, body := get("http://" + metrics + "/metrics")
	for _, want := range []string{
		`outpost_operator_reconciles_total{pool="` + name + `"}`,
		`outpost_operator_sessions_claimed_total{pool="` + name + `"} 1`,
		`outpost_operator_reconcile_failures_total{pool="` + name + `"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
