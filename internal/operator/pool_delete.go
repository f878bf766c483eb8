package operator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/outpost-sh/outpost/api"
	outpost "github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// policyHold bounds how long a deleted pool is held for its restricted
// sessions' pods to go.
const policyHold = 5 * time.Minute

// finalize serves a deleted pool: its consumer stops, its pods, Secrets
// and volumes are deleted, its claims released (not as failed attempts),
// and the finalizer dropped. A pool whose token, URL or server cannot be
// used is let go all the same: its claims lapse at their deadline.
func (r *poolReconciler) finalize(ctx context.Context, pool *v1alpha1.OutpostPool) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(pool, Finalizer) {
		return ctrl.Result{}, nil
	}
	key := types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}
	log := r.log.With("pool", key.String())
	r.consumers.remove(key)
	acceptor := r.acceptor + ":" + pool.Namespace + "." + pool.Name
	c, _, _, prob := r.apiClient(ctx, pool)
	if prob != nil && prob.reason == ReasonTokenSecret {
		// Deleted with its token Secret (one kubectl delete -f, a helm
		// uninstall): the token used last, for the URL allowed then.
		s := r.poolState(pool.UID)
		r.mu.Lock()
		last := s.api
		r.mu.Unlock()
		if last != nil && r.allow.Check(last.BaseURL()) == nil {
			log.Info("the deleted pool's token Secret is gone; releasing its claims with the token used last", "why", prob.err)
			c, prob = last, nil
		}
	}
	if prob != nil {
		log.Warn("cannot release the deleted pool's claims: they lapse at their deadline", "err", prob.err)
		c = nil
	}
	p := pool.DeepCopy()
	runner := func(c *outpost.Client) *Runner {
		return NewRunner(RunnerConfig{Kube: r.kube, Pool: func() *v1alpha1.OutpostPool { return p }, API: c,
			AcceptorID: acceptor, WorkerImage: r.workerImage, Metrics: r.metrics.runner(key.String()), Logger: log})
	}
	// Deleted while the claims are still held, so that the Secrets of
	// claimed sessions without a pod are found too. Owner references
	// would have the garbage collector delete all of it, but not at once,
	// and not at all where none runs.
	err := runner(c).RemoveAll(ctx)
	if err != nil && c != nil {
		// The server's claims could not be listed, say: what the cluster
		// shows is enough to delete.
		log.Warn("cannot delete everything of the deleted pool; deleting what its pods and volumes name", "err", err)
		err = runner(nil).RemoveAll(ctx)
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("delete the pool's pods: %w", err)
	}
	if c != nil {
		r.releaseAll(ctx, c, acceptor, "the OutpostPool "+key.String()+" was deleted", log)
	}
	// The pods of restricted sessions stay restricted while they
	// terminate: the pool (and so its NetworkPolicies) is held until
	// they are gone, for at most policyHold (a pod on a lost node may
	// never be).
	if n, err := runner(nil).policiesInUse(ctx); err != nil {
		log.Warn("cannot tell whether restricted sessions' pods remain", "err", err)
	} else if n > 0 && time.Since(pool.DeletionTimestamp.Time) < policyHold {
		log.Info("holding the deleted pool until its restricted sessions' pods are gone", "pods", n)
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	patch := client.MergeFromWithOptions(pool.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(pool, Finalizer)
	if err := r.kube.Patch(ctx, pool, patch); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: conflictRetry}, nil // the cache is behind
		}
		return ctrl.Result{}, fmt.Errorf("remove the finalizer: %w", err)
	}
	r.forget(pool.UID)
	r.metrics.forget(key.String())
	log.Info("pool deleted")
	return ctrl.Result{}, nil
}

// releaseAll releases every claim acceptor holds, saying why; claims
// already gone are no error, and the others lapse at their deadline.
func (r *poolReconciler) releaseAll(ctx context.Context, c *outpost.Client, acceptor, why string, log *slog.Logger) {
	released := 0
	err := eachEntry(ctx, c, outpost.QueueFilter{Phase: api.PhaseClaimed, AcceptorID: acceptor, First: 200}, func(e api.QueueEntry) {
		_, err := c.Queue.ReleaseRequest(ctx, e.Metadata.SessionID, api.ClaimRequest{AcceptorID: acceptor, Reason: why, Shutdown: true})
		switch {
		case err == nil:
			released++
		case outpost.IsNotFound(err) || outpost.IsConflict(err):
		default:
			log.Warn("cannot release a claim of the deleted pool: it lapses at its deadline", "session", e.Metadata.SessionID, "err", err)
		}
	})
	if err != nil {
		log.Warn("cannot list the deleted pool's claims: they lapse at their deadline", "err", err)
	}
	log.Info("released the deleted pool's claims", "released", released)
}
