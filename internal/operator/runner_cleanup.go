package operator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outpost-sh/outpost/api"
	outpost "github.com/outpost-sh/outpost/client"
)

// Leftover is what the pool has in the cluster for one session.
type Leftover struct {
	// SessionID is the session.
	SessionID string
	// Pod, Secret and Volume say which of its objects exist.
	Pod, Secret, Volume bool
	// Suspended says its volume is marked suspended-at: kept for a
	// resume.
	Suspended bool
}

// listOpts select the pool's objects in its namespace; ownership is then
// checked by the owner reference's UID.
func (r *Runner) listOpts() []client.ListOption {
	pool := r.cfg.Pool()
	return []client.ListOption{client.InNamespace(pool.Namespace),
		client.MatchingLabels{LabelManagedBy: ManagedBy, LabelPool: pool.Name}}
}

// owned lists the pool's pods, Secrets and volumes (owned by its UID), but
// those being deleted. Secrets are never listed — the operator's RBAC
// grants no list or watch on them, so that it cannot enumerate a
// namespace's Secrets — but read by name: those of the sessions its pods
// and volumes name, and of the sessions it holds claims on (a Secret
// written just before a crash, whose pod was never made).
func (r *Runner) owned(ctx context.Context) ([]corev1.Pod, []corev1.Secret, []corev1.PersistentVolumeClaim, error) {
	pool := r.cfg.Pool()
	var pods corev1.PodList
	var vols corev1.PersistentVolumeClaimList
	for _, l := range []struct {
		what string
		list client.ObjectList
	}{{"pods", &pods}, {"volumes", &vols}} {
		if err := r.cfg.Kube.List(ctx, l.list, r.listOpts()...); err != nil {
			return nil, nil, nil, fmt.Errorf("list the pool's %s: %w", l.what, err)
		}
	}
	notMine := func(o metav1.Object) bool {
		return !OwnedBy(o, pool) || o.GetLabels()[LabelSessionID] == "" || o.GetDeletionTimestamp() != nil
	}
	pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return notMine(&p) })
	vols.Items = slices.DeleteFunc(vols.Items, func(v corev1.PersistentVolumeClaim) bool { return notMine(&v) })
	ids := map[string]bool{}
	for _, p := range pods.Items {
		ids[p.Labels[LabelSessionID]] = true
	}
	for _, v := range vols.Items {
		ids[v.Labels[LabelSessionID]] = true
	}
	claimed, err := r.claimedSessions(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, id := range claimed {
		ids[id] = true
	}
	var secrets []corev1.Secret
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		var sec corev1.Secret
		err := r.cfg.Kube.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: SecretName(id)}, &sec)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, nil, nil, fmt.Errorf("read the Secret of session %s: %w", id, err)
		}
		if !notMine(&sec) && sec.Labels[LabelSessionID] == id {
			secrets = append(secrets, sec)
		}
	}
	return pods.Items, secrets, vols.Items, nil
}

// claimedSessions lists the sessions the pool's acceptor holds claims on;
// none without an API client (a deleted pool whose token or server cannot
// be used: its pods and volumes still name their Secrets).
func (r *Runner) claimedSessions(ctx context.Context) ([]string, error) {
	if r.cfg.API == nil {
		return nil, nil
	}
	var ids []string
	f := outpost.QueueFilter{Outpost: r.cfg.OutpostID, Phase: api.PhaseClaimed, AcceptorID: r.cfg.AcceptorID, First: 200}
	for {
		l, err := r.cfg.API.Queue.List(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("list the pool's claims: %w", err)
		}
		for _, e := range l.Items {
			ids = append(ids, e.Metadata.SessionID)
		}
		if !l.HasNextPage || l.Cursor == "" || len(l.Items) == 0 {
			return ids, nil
		}
		f.Cursor = l.Cursor
	}
}

// Leftovers lists the pool's objects (by owner UID), grouped by session,
// ordered by session id: what an operator finds after a restart. Objects
// being deleted are not listed.
func (r *Runner) Leftovers(ctx context.Context) ([]Leftover, error) {
	pods, secrets, vols, err := r.owned(ctx)
	if err != nil {
		return nil, err
	}
	by := map[string]*Leftover{}
	get := func(o metav1.Object) *Leftover {
		id := o.GetLabels()[LabelSessionID]
		if by[id] == nil {
			by[id] = &Leftover{SessionID: id}
		}
		return by[id]
	}
	for i := range pods {
		get(&pods[i]).Pod = true
	}
	for i := range secrets {
		get(&secrets[i]).Secret = true
	}
	for i := range vols {
		l := get(&vols[i])
		l.Volume = true
		l.Suspended = vols[i].Annotations[AnnotationSuspendedAt] != ""
	}
	out := make([]Leftover, 0, len(by))
	for _, l := range by {
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b Leftover) int { return strings.Compare(a.SessionID, b.SessionID) })
	return out, nil
}

// Remove deletes the session's pod and Secret, and its volume unless
// keepVolume; objects already gone are no error. Its NetworkPolicy stays
// until the pod is gone (CollectNetworkPolicies).
func (r *Runner) Remove(ctx context.Context, sessionID string, keepVolume bool) error {
	errs := []error{r.deletePod(ctx, sessionID, ""), r.deleteSecret(ctx, sessionID)}
	if !keepVolume {
		errs = append(errs, r.deleteVolume(ctx, sessionID))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove the objects of session %s: %w", sessionID, err)
	}
	return nil
}

// RemoveAll deletes every pod, Secret and volume the pool owns, as the
// pool is deleted.
func (r *Runner) RemoveAll(ctx context.Context) error {
	pods, secrets, vols, err := r.owned(ctx)
	if err != nil {
		return err
	}
	var objs []client.Object
	for i := range pods {
		objs = append(objs, &pods[i])
	}
	for i := range secrets {
		objs = append(objs, &secrets[i])
	}
	for i := range vols {
		objs = append(objs, &vols[i])
	}
	var errs []error
	for _, o := range objs {
		uid := o.GetUID()
		if err := ignoreGone(r.cfg.Kube.Delete(ctx, o, client.Preconditions{UID: &uid})); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", o.GetName(), err))
		}
	}
	// A session whose Secret is the pool's may have a pod the cache does
	// not show yet (made just before the pool's consumer stopped): its
	// pod is deleted by name too, or it would outlive the claim released
	// next.
	listed := map[string]bool{}
	for _, p := range pods {
		listed[p.Name] = true
	}
	for _, s := range secrets {
		id := s.Labels[LabelSessionID]
		if !listed[PodName(id)] {
			if err := r.deletePod(ctx, id, ""); err != nil {
				errs = append(errs, fmt.Errorf("delete %s: %w", PodName(id), err))
			}
		}
	}
	return errors.Join(errs...)
}
