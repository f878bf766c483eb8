package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outpost-sh/outpost/api"
	outpost "github.com/outpost-sh/outpost/client"
)

// fate is what becomes of a session's volume once its pod is gone.
type fate int

const (
	// fateKeep leaves the volume as it is: the queue could not say, or
	// the session goes on (it is requeued, and its next pod here mounts
	// it again); CollectVolumes deletes it once the session is over.
	fateKeep fate = iota
	// fateSuspend keeps the volume for the session's resume, marked
	// suspended-at (resume.snapshotTtlSeconds counts from it).
	fateSuspend
	// fateDelete deletes the volume: the session is over.
	fateDelete
)

func (f fate) String() string {
	switch f {
	case fateSuspend:
		return "suspend"
	case fateDelete:
		return "delete"
	}
	return "keep"
}

// volumeFate decides a session's volume from its queue entry (the answer
// of Queue.Get): gone or terminated deletes it, suspended keeps it for the
// resume, anything else (an error included) leaves it alone.
func volumeFate(e *api.QueueEntry, err error) fate {
	switch {
	case outpost.IsNotFound(err):
		return fateDelete
	case err != nil || e == nil:
		return fateKeep
	case e.Status.SessionStatus == api.QueueSessionTerminated:
		return fateDelete
	case e.Status.SessionStatus == api.QueueSessionSuspended:
		return fateSuspend
	}
	return fateKeep
}

// applyFate acts on the session's volume, if it has one: fateSuspend marks
// it suspended-at now (unless marked already), fateDelete deletes it.
func (r *Runner) applyFate(ctx context.Context, sessionID string, f fate, now time.Time) error {
	switch f {
	case fateDelete:
		return r.deleteVolume(ctx, sessionID)
	case fateSuspend:
		var v corev1.PersistentVolumeClaim
		err := r.cfg.Kube.Get(ctx, r.key(VolumeName(sessionID)), &v)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("read volume %s: %w", VolumeName(sessionID), err)
		case v.Annotations[AnnotationSuspendedAt] != "" || !OwnedBy(&v, r.cfg.Pool()):
			return nil
		}
		patch := client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+AnnotationSuspendedAt+`":"`+now.UTC().Format(time.RFC3339)+`"}}}`))
		if err := r.cfg.Kube.Patch(ctx, &v, patch, client.FieldOwner(ManagedBy)); err != nil {
			return fmt.Errorf("mark volume %s suspended: %w", v.Name, err)
		}
		r.log.Info("volume kept for the session's resume", "session", sessionID, "volume", v.Name)
	}
	return nil
}

// CollectVolumes deletes the pool's volumes that no session needs any
// more: a suspended session's once resume.snapshotTtlSeconds have passed
// since it was suspended, and those whose session is gone from the queue
// or terminated. Volumes of sessions a run serves now are left alone.
func (r *Runner) CollectVolumes(ctx context.Context) error {
	pool := r.cfg.Pool()
	var ttl time.Duration
	if t := pool.Spec.Resume.SnapshotTTLSeconds; t != nil && *t > 0 {
		ttl = time.Duration(*t) * time.Second
	}
	var list corev1.PersistentVolumeClaimList
	if err := r.cfg.Kube.List(ctx, &list, r.listOpts()...); err != nil {
		return fmt.Errorf("list volumes: %w", err)
	}
	now := time.Now()
	var errs []error
	for i := range list.Items {
		v := &list.Items[i]
		id := v.Labels[LabelSessionID]
		if !OwnedBy(v, pool) || id == "" || v.DeletionTimestamp != nil || r.running(id) {
			continue
		}
		why := ""
		if at, err := time.Parse(time.RFC3339, v.Annotations[AnnotationSuspendedAt]); err == nil && ttl > 0 && now.Sub(at) > ttl {
			why = fmt.Sprintf("suspended since %s, past resume.snapshotTtlSeconds (%s)", at.Format(time.RFC3339), ttl)
		} else {
			e, err := r.cfg.API.Queue.Get(ctx, id)
			if f := volumeFate(e, err); f == fateDelete {
				why = "the session is over"
			} else if err != nil && !outpost.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("read session %s: %w", id, err))
			}
		}
		if why == "" {
			continue
		}
		uid := v.UID
		if err := r.cfg.Kube.Delete(ctx, v, client.Preconditions{UID: &uid}); ignoreGone(err) != nil {
			errs = append(errs, fmt.Errorf("delete volume %s: %w", v.Name, err))
			continue
		}
		r.log.Info("volume collected", "session", id, "volume", v.Name, "why", why)
	}
	return errors.Join(errs...)
}
