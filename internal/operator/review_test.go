//go:build !windows

package operator

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outpost-sh/outpost/api"
	outpost "github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// laggingCache is the operator's cached client before its informer has
// seen the pods just made: lists of pods come back empty.
type laggingCache struct{ client.Client }

func (c laggingCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.PodList); ok {
		return nil
	}
	return c.Client.List(ctx, list, opts...)
}

// TestRemoveAllPodNotCachedYet: a pool deleted right after its runner made
// a claimed session's pod (the cache not showing it yet) still has that
// pod deleted, not only its Secret: the claim is released next, and a pod
// left behind would serve a session given to someone else.
func TestRemoveAllPodNotCachedYet(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{})
	r := e.runner()
	id := e.session()
	ctx, cancel := context.WithCancelCause(e.ctx)
	ch := e.goRun(ctx, r, e.claim(id))
	e.waitPod(id, "the pod", nil)
	lag := NewRunner(RunnerConfig{Kube: laggingCache{kube}, Pool: e.getPool, API: e.machine, AcceptorID: e.acceptor,
		OutpostID: e.outpost.Metadata.OutpostID, WorkerImage: testImage, Logger: testLogger(t)})
	if err := lag.RemoveAll(e.ctx); err != nil {
		t.Fatal(err)
	}
	var p corev1.Pod
	if e.get(PodName(id), &p) && p.DeletionTimestamp == nil {
		t.Errorf("pod %s of a claimed session is left by RemoveAll", p.Name)
	}
	cancel(fleet.ErrClaimLost)
	e.outcome(ch)
}

// TestRecoverRenewFailsForAWhile: an operator restarting while its
// server answers the claim renewals with errors (a 502 from a proxy) keeps
// trying: the session's pod is neither deleted nor its claim released (a
// live session killed and handed to another claimer), and it is adopted
// once the server answers.
func TestRecoverRenewFailsForAWhile(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{})
	id := e.session()
	// What the last operator left: the claim, the Secret and the pod.
	s := e.claim(id)
	pool := e.getPool()
	rd := Render{OutpostID: e.outpost.Metadata.OutpostID, WorkerImage: testImage}
	if err := kube.Create(e.ctx, RenderSecret(pool, id, s.Claim.Status.ConnectToken, "", rd)); err != nil {
		t.Fatal(err)
	}
	if err := kube.Create(e.ctx, RenderPod(pool, &s.Claim, rd)); err != nil {
		t.Fatal(err)
	}

	var failing atomic.Bool
	var failed, released atomic.Int32
	failing.Store(true)
	target, err := url.Parse(e.machine.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/release"):
			released.Add(1)
		case strings.HasSuffix(r.URL.Path, "/claim") && failing.Load():
			failed.Add(1)
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	flaky, err := outpost.New(proxy.URL, e.poolToken)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRunner(RunnerConfig{Kube: kube, Pool: e.getPool, API: flaky, AcceptorID: e.acceptor,
		OutpostID: e.outpost.Metadata.OutpostID, WorkerImage: testImage, Logger: testLogger(t)})
	pc := &poolConsumer{runner: r, log: testLogger(t), acceptor: e.acceptor, outpost: e.outpost, api: flaky}
	c := &fleet.Consumer{Client: flaky, Outpost: e.outpost, Identity: &fleet.Identity{AcceptorID: e.acceptor, Kind: api.WorkerKindOrchestrator},
		Runner: r, Logger: testLogger(t)}
	done := make(chan []api.QueueEntry, 1)
	go func() { done <- pc.recover(e.ctx, c) }()

	var adopted []api.QueueEntry
	select {
	case adopted = <-done:
		t.Fatalf("recover returned after %d failed renewals, adopting %d", failed.Load(), len(adopted))
	case <-waitCond(e.ctx, func() bool { return failed.Load() >= 2 }):
	}
	var p corev1.Pod
	if !e.get(PodName(id), &p) || p.DeletionTimestamp != nil {
		t.Error("the live session's pod was deleted while the server failed")
	}
	if n := released.Load(); n != 0 {
		t.Errorf("%d releases while the server failed", n)
	}
	failing.Store(false)
	select {
	case adopted = <-done:
	case <-e.ctx.Done():
		t.Fatal("recover did not return")
	}
	if len(adopted) != 1 || adopted[0].Metadata.SessionID != id {
		t.Errorf("adopted %+v, want session %s", adopted, id)
	}
	if q := e.entry(id); q.Status.Phase != api.PhaseClaimed || q.Status.AcceptorID == nil || *q.Status.AcceptorID != e.acceptor {
		t.Errorf("the session is %s by %v, want claimed by %s", q.Status.Phase, q.Status.AcceptorID, e.acceptor)
	}
}

// waitCond is closed when cond holds, polled until ctx ends.
func waitCond(ctx context.Context, cond func() bool) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for !cond() {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		close(ch)
	}()
	return ch
}

// TestContainerNameChangeKeepsServingPods: renaming spec.worker.containerName
// on a live pool does not take a running pod (made under the old name) for
// an idle one of an old image: it keeps serving its session, workspace and
// all.
func TestContainerNameChangeKeepsServingPods(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{})
	r := e.runner()
	id := e.session()
	s := e.claim(id)
	rd := Render{OutpostID: e.outpost.Metadata.OutpostID, WorkerImage: testImage}
	p := RenderPod(e.getPool(), &s.Claim, rd)
	if err := kube.Create(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: DefaultContainerName, Image: testImage, State: running(), Ready: true}}
	if err := kube.Status().Update(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	e.editPool(func(spec *v1alpha1.OutpostPoolSpec) { spec.Worker.ContainerName = "worker" })
	sr := &sessionRun{r: r, s: s, claim: &s.Claim, id: id, pod: PodName(id), wake: make(chan struct{}, 1),
		start: time.Now(), log: testLogger(t), served: p.UID, observed: true, started: true, scheduled: true}
	if out, done := sr.observe(e.ctx, e.getPool(), p); done {
		t.Fatalf("observe ended the run: %+v", out)
	}
	var cur corev1.Pod
	if !e.get(PodName(id), &cur) || cur.DeletionTimestamp != nil {
		t.Error("a running pod was deleted as idle after the pool's containerName changed")
	}
}

// TestDeletePoolWithItsTokenSecret: a pool deleted together with its
// token Secret (kubectl delete -f of the file holding both, helm
// uninstall) still has its claims released, with the token the operator
// used last: otherwise they would lapse at their deadline minutes later,
// each costing its session an attempt.
func TestDeletePoolWithItsTokenSecret(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t, ctx)
	env := newOutpostEnv(t)
	startOperator(t, Options{Namespaces: []string{ns}, OperatorNamespace: ns, AllowedAPIURLs: []string{env.url}, AcceptorID: "k8s-test"})
	pool := newPool(t, ctx, ns, "p", env.url, env.token, 2)
	key := client.ObjectKeyFromObject(pool)
	waitPool(t, ctx, key, "the pool Ready", ready)
	id := env.session(ctx)
	acceptor := "k8s-test:" + ns + ".p"
	waitFor(t, ctx, "a claim", func() bool { return len(env.claims(ctx, acceptor)) == 1 }, nil)

	if err := kube.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p-token"}}); err != nil {
		t.Fatal(err)
	}
	deletePool(t, ctx, getPool(t, ctx, key))
	if held := env.claims(ctx, acceptor); len(held) != 0 {
		t.Fatalf("claims left after the pool's deletion: %v", held)
	}
	if e, err := env.admin.Queue.Get(ctx, id); err != nil || e.Status.Phase != api.PhasePending || e.Status.Attempts != 0 {
		t.Errorf("session %s: %+v, %v; want pending again with no failed attempt", id, e, err)
	}
	noPods(t, ctx, ns, "p")
}
