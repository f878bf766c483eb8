package operator

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
