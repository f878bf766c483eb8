package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/outpost-sh/outpost/backoff"
	outpost "github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

const (
	// Finalizer holds a deleted pool until the operator released its
	// claims and deleted its pods.
	Finalizer = "outpost.dev/release-claims"
	// ConditionReady is the pool's condition: True while it serves its
	// queue.
	ConditionReady = "Ready"
	// defaultMaxConcurrent is maxConcurrentSessions when unset (the CRD's
	// default too).
	defaultMaxConcurrent = 10
	// resyncReady is how often a Ready pool is reconciled with nothing
	// changed: a rotated token Secret (Secrets are not watched) is picked
	// up, and the watch cursor written to the status.
	resyncReady = time.Minute
	// conflictRetry is how soon a status write that lost to a newer
	// resourceVersion (a cache behind the API server) is tried again.
	conflictRetry = 100 * time.Millisecond
)

// Reasons of the Ready condition.
const (
	ReasonServing          = "Serving"
	ReasonNoAPIURL         = "NoAPIURL"
	ReasonAPIURLNotAllowed = "APIURLNotAllowed"
	ReasonTokenSecret      = "TokenSecretInvalid"
	ReasonTemplateInvalid  = "TemplateInvalid"
	ReasonAcceptorID       = "AcceptorIDInvalid"
	ReasonUnauthorized     = "Unauthorized"
	ReasonOutpostNotFound  = "OutpostNotFound"
	ReasonServerError      = "ServerUnreachable"
	ReasonConsumerFailed   = "ConsumerFailed"
)

// degradedBackoff paces the reconciles of a pool that is not Ready.
var degradedBackoff = backoff.Policy{Base: 2 * time.Second, Max: 2 * time.Minute, Jitter: 0.2}

// poolReconciler reconciles OutpostPools: it keeps one fleet consumer per
// usable pool and writes the pool's status.
type poolReconciler struct {
	kube client.Client
	// egress is the egress proxy's registry; nil when none is served.
	egress      *EgressSessions
	consumers   *consumers
	allow       *AllowList
	defaultURL  string
	acceptor    string // the operator's; a pool's is acceptor:namespace.name
	workerImage string
	// startTimeout is the runners' RunnerConfig.StartTimeout.
	startTimeout time.Duration
	http         *http.Client
	metrics      *Metrics
	log          *slog.Logger
	events       chan event.GenericEvent
	// recorder records the pool's Events (a restricted session refused);
	// nil records none.
	recorder events.EventRecorder

	mu    sync.Mutex // guards state
	state map[types.UID]*poolState
}

// poolState is what the reconciler remembers of a pool between reconciles.
type poolState struct {
	failures int   // reconciles in a row that left the pool not Ready
	dryRun   int64 // the generation whose template passed the dry-run
	// written is the status last written, as the API server returned it.
	written *v1alpha1.OutpostPoolStatus
	// api is the pool's last usable client of its server (an allowed
	// apiUrl, the token read then), kept in memory only: a pool deleted
	// with its token Secret still has its claims released.
	api *outpost.Client
}

// problem is why a pool is not Ready.
type problem struct {
	phase  v1alpha1.PoolPhase
	reason string
	err    error
}

func degraded(reason string, format string, args ...any) *problem {
	return &problem{phase: v1alpha1.PoolDegraded, reason: reason, err: fmt.Errorf(format, args...)}
}

func (r *poolReconciler) setup(mgr ctrl.Manager) error {
	skip := true
	return ctrl.NewControllerManagedBy(mgr).
		Named("outpostpool").
		For(&v1alpha1.OutpostPool{}, builder.WithPredicates(specChanged{})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.owned)).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(r.owned)).
		WatchesRawSource(source.Channel(r.events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: &skip}).
		Complete(r)
}

// specChanged passes the pool's events that may need work: creation,
// deletion, and updates of its spec, deletion mark or finalizers, not of
// its status alone (which this reconciler writes).
type specChanged struct{ predicate.Funcs }

func (specChanged) Update(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	return o.GetGeneration() != n.GetGeneration() || !o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
		!equality.Semantic.DeepEqual(o.GetFinalizers(), n.GetFinalizers())
}

func (specChanged) Create(event.CreateEvent) bool   { return true }
func (specChanged) Delete(event.DeleteEvent) bool   { return true }
func (specChanged) Generic(event.GenericEvent) bool { return true }

// owned maps a Pod's or PVC's event to its pool (the controller owner
// reference, checked by UID against the pool served) and tells the pool's
// runner.
func (r *poolReconciler) owned(_ context.Context, obj client.Object) []reconcile.Request {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "OutpostPool" || ref.APIVersion != v1alpha1.GroupVersion.String() {
		return nil
	}
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}
	if pc := r.consumers.get(key); pc != nil {
		if pc.uid != ref.UID {
			return nil
		}
		if id := obj.GetLabels()[LabelSessionID]; id != "" {
			pc.runner.Notify(id)
		}
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// poke asks for a reconcile of the pool key, without blocking.
func (r *poolReconciler) poke(key types.NamespacedName) {
	select {
	case r.events <- event.GenericEvent{Object: &v1alpha1.OutpostPool{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
	default: // a full queue is drained by reconciles that see this change too
	}
}

// Reconcile brings one pool's consumer and status in line with its spec.
func (r *poolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pool v1alpha1.OutpostPool
	if err := r.kube.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone without the finalizer's work (it was removed by hand).
			if pc := r.consumers.remove(req.NamespacedName); pc != nil {
				r.forget(pc.uid)
			}
			r.metrics.forget(req.String())
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	r.metrics.Reconciles.WithLabelValues(req.String()).Inc()
	r.metrics.touch(req.String())
	if !pool.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, &pool)
	}
	if !controllerutil.ContainsFinalizer(&pool, Finalizer) {
		patch := client.MergeFromWithOptions(pool.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&pool, Finalizer)
		if err := r.kube.Patch(ctx, &pool, patch); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: conflictRetry}, nil // the cache is behind
			}
			r.metrics.ReconcileFailures.WithLabelValues(req.String()).Inc()
			return ctrl.Result{}, fmt.Errorf("add the finalizer: %w", err)
		}
	}
	pc, prob := r.serve(ctx, &pool)
	if ctx.Err() != nil {
		return ctrl.Result{}, nil // stopping: the next operator writes the status
	}
	if pc != nil {
		if err := pc.runner.CollectVolumes(ctx); err != nil {
			r.log.Warn("cannot collect the pool's expired volumes", "pool", req.String(), "err", err)
		}
		if err := pc.runner.CollectNetworkPolicies(ctx); err != nil {
			r.log.Warn("cannot collect the network policies of gone pods", "pool", req.String(), "err", err)
		}
	}
	s := r.poolState(pool.UID)
	st := r.status(&pool, pc, prob)
	r.mu.Lock()
	written := s.written
	r.mu.Unlock()
	// The cache may not show the last write yet: a status equal to the
	// cached one but not to the one last written is written again (the
	// update then fails on the stale resourceVersion, and is retried
	// once the cache caught up).
	if !equality.Semantic.DeepEqual(pool.Status, st) || written != nil && !equality.Semantic.DeepEqual(*written, st) {
		pool.Status = st
		err := r.kube.Status().Update(ctx, &pool)
		switch {
		case apierrors.IsConflict(err):
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		case apierrors.IsNotFound(err):
			return ctrl.Result{}, nil
		case err != nil:
			r.metrics.ReconcileFailures.WithLabelValues(req.String()).Inc()
			return ctrl.Result{}, fmt.Errorf("write the pool's status: %w", err)
		}
		r.mu.Lock()
		s.written = pool.Status.DeepCopy()
		r.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prob == nil {
		s.failures = 0
		return ctrl.Result{RequeueAfter: resyncReady}, nil
	}
	s.failures++
	r.metrics.ReconcileFailures.WithLabelValues(req.String()).Inc()
	r.log.Warn("the pool cannot serve", "pool", req.String(), "phase", prob.phase, "reason", prob.reason, "err", prob.err)
	return ctrl.Result{RequeueAfter: degradedBackoff.Delay(s.failures)}, nil
}

// serve checks the pool and keeps its consumer running when it may run,
// returning the consumer (nil when none runs) and why the pool is not
// Ready (nil when it is).
func (r *poolReconciler) serve(ctx context.Context, pool *v1alpha1.OutpostPool) (*poolConsumer, *problem) {
	key := types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}
	stop := func(p *problem) (*poolConsumer, *problem) {
		r.consumers.remove(key)
		return nil, p
	}
	c, apiURL, token, prob := r.apiClient(ctx, pool)
	if prob != nil {
		return stop(prob)
	}
	s := r.poolState(pool.UID)
	r.mu.Lock()
	s.api = c
	r.mu.Unlock()
	if prob := r.dryRun(ctx, pool); prob != nil {
		return stop(prob)
	}
	capacity := defaultMaxConcurrent
	if pool.Spec.MaxConcurrentSessions != nil {
		capacity = int(*pool.Spec.MaxConcurrentSessions)
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%s\x00%d", pool.UID, pool.Spec.Outpost, apiURL, token, capacity))
	fingerprint := hex.EncodeToString(sum[:])

	pc := r.consumers.get(key)
	if pc != nil && pc.fingerprint == fingerprint && pc.running() {
		if old := pc.pool.Swap(pool.DeepCopy()); old.Generation != pool.Generation {
			pc.runner.NotifyAll() // a new template or image: pods not serving yet are replaced
			// New network settings: restricted sessions are decided, and
			// their refusals said, again.
			pc.refusals.reset()
			pc.lastRefusal.Store(nil)
			pc.consumer.Wake()
		}
		if !pc.suspect.Load() {
			return pc, nil
		}
		// Listing or watching the queue failed: is the token still good?
		if _, prob := r.lookup(ctx, pc.api, pool); prob != nil {
			return pc, prob
		}
		pc.suspect.Store(false)
		return pc, nil
	}
	var failed *problem
	if pc != nil && pc.fingerprint == fingerprint && pc.err != nil {
		// Its Run failed (another process under the acceptor id, say):
		// start it again after a backoff, and say why meanwhile.
		failed = &problem{phase: v1alpha1.PoolDegraded, reason: ReasonConsumerFailed, err: pc.err}
		s := r.poolState(pool.UID)
		r.mu.Lock()
		wait := degradedBackoff.Bound(s.failures + 1)
		r.mu.Unlock()
		if time.Since(pc.exited) < wait {
			return nil, failed
		}
	}
	op, prob := r.lookup(ctx, c, pool)
	if prob != nil {
		return stop(prob)
	}
	// The consumer's runners leave pods and claims when stopped; the new
	// one's Recover adopts them, so a restart drops no session.
	r.consumers.remove(key)
	base, ok := r.consumers.base(ctx)
	if !ok {
		return nil, nil // stopping
	}
	acceptor := r.acceptor + ":" + pool.Namespace + "." + pool.Name
	pc, err := r.startConsumer(base, consumerSpec{pool: pool, api: c, outpost: *op, acceptor: acceptor,
		capacity: max(capacity, 1), drain: capacity == 0, fingerprint: fingerprint})
	if err != nil {
		return nil, degraded(ReasonAcceptorID, "the pool's acceptor id %s: %w", acceptor, err)
	}
	if !r.consumers.put(key, pc) {
		return nil, nil
	}
	return pc, failed
}

// status is the pool's status after a reconcile: unchanged conditions keep
// their lastTransitionTime, so that nothing is written when nothing
// changed.
func (r *poolReconciler) status(pool *v1alpha1.OutpostPool, pc *poolConsumer, prob *problem) v1alpha1.OutpostPoolStatus {
	st := *pool.Status.DeepCopy()
	st.ObservedGeneration = pool.Generation
	st.AcceptorID = r.acceptor + ":" + pool.Namespace + "." + pool.Name
	st.ClaimedSessions = 0
	if pc != nil {
		st.ClaimedSessions = pc.held.Load()
		st.OutpostID = pc.outpost.Metadata.OutpostID
		if cur := pc.cursor.Load(); cur != nil {
			st.WatchCursor = *cur
		}
	}
	cond := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonServing,
		ObservedGeneration: pool.Generation, LastTransitionTime: metav1.Now()}
	st.Phase = v1alpha1.PoolReady
	if prob != nil {
		st.Phase = prob.phase
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, prob.reason, clip(prob.err.Error(), 2000)
	} else if pc != nil {
		cond.Message = fmt.Sprintf("serving outpost %s", pc.outpost.Spec.Name)
	}
	apimeta.SetStatusCondition(&st.Conditions, cond)
	apimeta.SetStatusCondition(&st.Conditions, networkCondition(pool, pc, r.egress != nil))
	return st
}

// networkCondition is the pool's NetworkPolicy condition: whether it
// serves restricted sessions, and the last one it refused.
func networkCondition(pool *v1alpha1.OutpostPool, pc *poolConsumer, proxyServed bool) metav1.Condition {
	c := metav1.Condition{Type: ConditionNetworkPolicy, Status: metav1.ConditionTrue, Reason: ReasonNetworkEnforced,
		ObservedGeneration: pool.Generation, LastTransitionTime: metav1.Now(),
		Message: "restricted sessions get a NetworkPolicy allowing egress only to DNS, the control plane and their ipv4/ipv6 rules; " +
			"sessions whose policy has hostname rules are not claimed (set spec.network.egressProxy to enforce them)"}
	switch {
	case pool.Spec.Network.EgressProxy != nil && proxyServed:
		c.Message = "restricted sessions get a NetworkPolicy allowing egress only to DNS, the control plane, the operator's egress proxy " +
			"and their ipv4/ipv6 rules; the proxy enforces their hostname rules"
	case pool.Spec.Network.EgressProxy != nil:
		c.Message = "restricted sessions get a NetworkPolicy allowing egress only to DNS, the control plane and their ipv4/ipv6 rules; " +
			"sessions whose policy has hostname rules are not claimed: the pool names an egress proxy, but the operator serves none " +
			"(run it with --egress-proxy-listen)"
	}
	if err := PoolNetworkEnforcement(pool); err != nil {
		c.Status, c.Message = metav1.ConditionFalse, "restricted sessions are not claimed: "+err.Error()
		c.Reason = ReasonNetworkSettingsInvalid
		if errors.Is(err, errNotEnforced) {
			c.Reason = ReasonNetworkNotEnforced
		}
	}
	if pc != nil {
		if last := pc.lastRefusal.Load(); last != nil {
			c.Message += ". Last refused: " + *last
		}
	}
	c.Message = clip(c.Message, 2000)
	return c
}

func (r *poolReconciler) poolState(uid types.UID) *poolState {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.state[uid]
	if s == nil {
		s = &poolState{}
		r.state[uid] = s
	}
	return s
}

func (r *poolReconciler) forget(uid types.UID) {
	r.mu.Lock()
	delete(r.state, uid)
	r.mu.Unlock()
}

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}
