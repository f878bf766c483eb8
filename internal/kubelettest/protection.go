//go:build !windows

package kubelettest

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// pvcProtection is the finalizer the API server puts on every
// PersistentVolumeClaim; the controller-manager, which envtest does not
// run, takes it off a deleted claim once no scheduled pod uses it.
const pvcProtection = "kubernetes.io/pvc-protection"

// protect plays the controller-manager's pvc-protection controller for the
// kubelet's namespaces: at every change of a pod or a claim, each deleted
// claim no scheduled pod refers to (a pod deleted with grace 0 aside) loses
// the finalizer, so that it goes. It returns when stop closes.
func (k *Kubelet) protect(stop <-chan struct{}, kick <-chan struct{}, pods, claims []cache.Indexer) {
	for {
		select {
		case <-stop:
			return
		case <-kick:
		}
		for _, ci := range claims {
			for _, obj := range ci.List() {
				pvc, ok := obj.(*corev1.PersistentVolumeClaim)
				if !ok || pvc.DeletionTimestamp == nil || !slices.Contains(pvc.Finalizers, pvcProtection) || claimInUse(pvc, pods) {
					continue
				}
				k.unprotect(pvc)
			}
		}
	}
}

// claimInUse reports whether a scheduled pod refers to the claim.
func claimInUse(pvc *corev1.PersistentVolumeClaim, pods []cache.Indexer) bool {
	for _, pi := range pods {
		for _, obj := range pi.List() {
			pod, ok := obj.(*corev1.Pod)
			if !ok || pod.Namespace != pvc.Namespace || pod.Spec.NodeName == "" {
				continue
			}
			if pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0 {
				continue
			}
			for _, v := range pod.Spec.Volumes {
				if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == pvc.Name {
					return true
				}
			}
		}
	}
	return false
}

// unprotect removes the pvc-protection finalizer from a deleted claim.
func (k *Kubelet) unprotect(pvc *corev1.PersistentVolumeClaim) {
	ctx, cancel := context.WithTimeout(k.ctx, apiTimeout)
	defer cancel()
	claims := k.cs.CoreV1().PersistentVolumeClaims(pvc.Namespace)
	cur, err := claims.Get(ctx, pvc.Name, metav1.GetOptions{})
	if err != nil || cur.UID != pvc.UID {
		return
	}
	cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == pvcProtection })
	if _, err := claims.Update(ctx, cur, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		k.log.Warn("remove a deleted claim's protection", "claim", pvc.Namespace+"/"+pvc.Name, "err", err)
	}
}
