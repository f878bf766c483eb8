package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/backoff"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// setupBackoff paces the retries of a Secret or volume write that failed
// for a reason worth retrying (the API server unreachable, a conflict).
var setupBackoff = backoff.Policy{Base: 200 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.2}

// sessionRun is the run of one claimed session. Only its Run's goroutine
// uses it.
type sessionRun struct {
	r     *Runner
	s     *fleet.Session
	claim *api.QueueEntry // the claim, with the consumer's gateway when it names none
	id    string
	pod   string // the pod's name
	wake  chan struct{}
	start time.Time
	log   *slog.Logger

	// served is the UID of the pod serving the session (made by this run,
	// or adopted); observed says it was read back at least once, so that
	// its absence means it was deleted (not that a cache lags).
	served   types.UID
	observed bool
	// gone is the UID of a pod this run deleted and waits to see gone
	// before it makes the next one.
	gone types.UID
	// restarts counts the session's failed pods (AnnotationRestarts).
	restarts int
	// active says PodsActive counts this run.
	active bool
	// secret is the UID of the session's Secret once written.
	secret types.UID
	// proxyURL is the session's egress proxy URL with its credential, ""
	// when it is not proxied; unproxy removes it from the proxy.
	proxyURL  string
	proxyPass string
	unproxy   func()
	// madeVolume says this run created the session's volume.
	madeVolume bool
	// resumed says the volume's suspended-at mark was cleared.
	resumed bool
	// policyGen is the pool's generation the session's NetworkPolicy was
	// last written for; policyDue asks for it to be checked again.
	policyGen int64
	policyDue bool
	// mayHavePolicy says the session may have a NetworkPolicy: this run
	// wrote one, or one of a previous run may be left (an adopted
	// session, or a pool that has network settings).
	mayHavePolicy bool
	// What was last reported about the served pod.
	scheduled, started, timed bool
	waiting                   string
}

// run is Run's body.
func (sr *sessionRun) run(ctx context.Context) fleet.Outcome {
	if out, ok := sr.setup(ctx); !ok {
		return out
	}
	tick := time.NewTicker(sr.r.cfg.PollInterval)
	defer tick.Stop()
	for {
		// The session's fate before its pod's: a lost claim first.
		select {
		case <-ctx.Done():
			return sr.lost(ctx)
		default:
		}
		select {
		case <-sr.s.Ended():
			return sr.ended(ctx)
		case <-sr.s.Stopping():
			return sr.stopping()
		default:
		}
		if sr.policyDue || sr.r.cfg.Pool().Generation != sr.policyGen {
			// New network settings (control plane, DNS, enforcement)
			// reach the pods that serve already; at each poll, a policy
			// deleted or edited by hand is written back.
			sr.policyDue = false
			if out, done := sr.syncPolicy(ctx); done {
				return out
			}
		}
		if out, done := sr.step(ctx); done {
			return out
		}
		select {
		case <-ctx.Done():
		case <-sr.s.Ended():
		case <-sr.s.Stopping():
		case <-sr.wake:
		case <-tick.C:
			sr.policyDue = true
		case <-sr.s.Updated():
			if out, done := sr.syncPolicy(ctx); done {
				return out
			}
		}
	}
}

// setup writes the session's volume (FilesystemSnapshot) and Secret; ok
// false with the outcome when it cannot.
func (sr *sessionRun) setup(ctx context.Context) (fleet.Outcome, bool) {
	sctx, cancel := sr.s.Setup(ctx)
	defer cancel()
	pool := sr.r.cfg.Pool()
	var err error
	if pool.Spec.Resume.Policy == v1alpha1.ResumeFilesystemSnapshot {
		err = sr.retry(sctx, "write the session's volume", func(ctx context.Context) error { return sr.ensureVolume(ctx, pool) })
	}
	if err == nil {
		err = sr.retry(sctx, "write the session's Secret", func(ctx context.Context) error { return sr.writeSecret(ctx, pool) })
	}
	if err == nil {
		// Before the pod: a restricted session's pod never runs open.
		err = sr.retry(sctx, "write the session's NetworkPolicy", sr.ensurePolicy)
	}
	switch {
	case err == nil:
		return fleet.Outcome{}, true
	case errors.As(err, new(policyRefusal)):
		return sr.policyRefused(ctx, err), false
	case ctx.Err() != nil:
		return sr.lost(ctx), false
	case isClosed(sr.s.Ended()):
		return sr.ended(ctx), false
	case isClosed(sr.s.Stopping()):
		return sr.stopping(), false
	}
	return sr.refused(ctx, "the session's objects", err), false
}

// retry calls fn until it succeeds, fails for good (permanent) or ctx
// ends.
func (sr *sessionRun) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	clock := clockwork.NewRealClock()
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil || permanent(err) || ctx.Err() != nil {
			return err
		}
		sr.log.Warn("cannot "+what+"; retrying", "err", err)
		if setupBackoff.Wait(ctx, clock, attempt) != nil {
			return err
		}
	}
}

// ensureVolume creates the session's PersistentVolumeClaim unless it
// exists (a suspended session's, reused by its resume).
func (sr *sessionRun) ensureVolume(ctx context.Context, pool *v1alpha1.OutpostPool) error {
	var cur corev1.PersistentVolumeClaim
	err := sr.r.cfg.Kube.Get(ctx, sr.r.key(VolumeName(sr.id)), &cur)
	switch {
	case apierrors.IsNotFound(err):
		v := RenderVolume(pool, sr.id, sr.r.render())
		if err := sr.r.cfg.Kube.Create(ctx, v, client.FieldOwner(ManagedBy)); err != nil {
			return fmt.Errorf("create volume %s: %w", v.Name, err)
		}
		sr.madeVolume = true
		sr.log.Info("volume created", "volume", v.Name)
		return nil
	case err != nil:
		return fmt.Errorf("read volume %s: %w", VolumeName(sr.id), err)
	case !OwnedBy(&cur, pool):
		return notOurs("PersistentVolumeClaim", cur.Name, pool)
	case cur.DeletionTimestamp != nil:
		// Collected as the session resumed: wait until it is gone, then
		// make a new one.
		return fmt.Errorf("volume %s is being deleted", cur.Name)
	}
	return nil
}

// writeSecret creates or updates the session's Secret with the claim's
// connect token. Updating it is safe while an older pod of the session
// runs: the container read its token at start, and every token of the
// claim's epoch stays valid (the server prunes only older epochs'), so a
// replacement pod gets the newest. An adopted session keeps its restart
// count; a fresh claim starts from zero.
func (sr *sessionRun) writeSecret(ctx context.Context, pool *v1alpha1.OutpostPool) error {
	var cur corev1.Secret
	err := sr.r.cfg.Kube.Get(ctx, sr.r.key(SecretName(sr.id)), &cur)
	if err == nil && OwnedBy(&cur, pool) {
		sr.proxySecretFrom(&cur)
	}
	if perr := sr.proxySetup(pool); perr != nil {
		return perr
	}
	want := RenderSecret(pool, sr.id, sr.claim.Status.ConnectToken, sr.proxyURL, sr.r.render())
	switch {
	case apierrors.IsNotFound(err):
		sr.restarts = 0
		if err := sr.r.cfg.Kube.Create(ctx, want, client.FieldOwner(ManagedBy)); err != nil {
			return fmt.Errorf("create secret %s: %w", want.Name, err)
		}
		sr.secret = want.UID
		return nil
	case err != nil:
		return fmt.Errorf("read secret %s: %w", want.Name, err)
	case !OwnedBy(&cur, pool):
		return notOurs("Secret", cur.Name, pool)
	}
	restarts := ""
	if sr.s.Adopted {
		restarts = cur.Annotations[AnnotationRestarts]
		sr.restarts, _ = strconv.Atoi(restarts)
	}
	cur.Labels = merge(cur.Labels, want.Labels)
	cur.Annotations = merge(cur.Annotations, want.Annotations)
	delete(cur.Annotations, AnnotationRestarts)
	if restarts != "" {
		cur.Annotations[AnnotationRestarts] = restarts
	}
	cur.OwnerReferences = want.OwnerReferences
	cur.Data, cur.StringData = want.Data, nil
	if err := sr.r.cfg.Kube.Update(ctx, &cur, client.FieldOwner(ManagedBy)); err != nil {
		return fmt.Errorf("update secret %s: %w", want.Name, err)
	}
	sr.secret = cur.UID
	return nil
}

// step reads the session's pod and acts on what it shows; done with the
// run's outcome when the run is over.
func (sr *sessionRun) step(ctx context.Context) (fleet.Outcome, bool) {
	pool := sr.r.cfg.Pool()
	var p corev1.Pod
	err := sr.r.cfg.Kube.Get(ctx, sr.r.key(sr.pod), &p)
	switch {
	case apierrors.IsNotFound(err):
		return sr.absent(ctx, pool)
	case err != nil:
		if ctx.Err() == nil {
			sr.log.Warn("cannot read the session's pod; retrying", "err", err)
		}
		return fleet.Outcome{}, false
	case p.UID == sr.gone:
		return fleet.Outcome{}, false // still going
	case sr.served == "" && sr.s.Adopted && sr.gone == "" && !sr.observed && OwnedBy(&p, pool):
		sr.served = p.UID
		sr.scheduled = p.Spec.NodeName != ""
		sr.serving()
		if cs := containerStatus(&p, ContainerName(pool)); cs != nil && cs.State.Running != nil {
			sr.started = true
		}
		sr.log.Info("adopted the session's pod", "phase", p.Status.Phase)
		sr.r.report(ctx, sr.id, api.MachineStepStart, fmt.Sprintf("The operator restarted and adopted pod %s (%s).", sr.pod, phaseOf(&p)), nil)
	case p.UID != sr.served:
		return sr.stale(ctx, pool, &p)
	}
	sr.observed = true
	return sr.observe(ctx, pool, &p)
}

// absent handles a missing pod: make one, unless the cache has yet to show
// the one just made; a pod deleted by someone else counts as failed.
func (sr *sessionRun) absent(ctx context.Context, pool *v1alpha1.OutpostPool) (fleet.Outcome, bool) {
	switch {
	case sr.gone != "":
		sr.gone = ""
	case sr.served != "" && !sr.observed:
		return fleet.Outcome{}, false // made, not in the cache yet
	case sr.served != "":
		sr.served = ""
		why := fmt.Sprintf("pod %s was deleted", sr.pod)
		sr.log.Warn("the session's pod was deleted by someone else")
		if out, over := sr.failed(ctx, pool, why, nil); over {
			return out, true
		}
	}
	return sr.create(ctx, pool)
}

// create makes the session's pod.
func (sr *sessionRun) create(ctx context.Context, pool *v1alpha1.OutpostPool) (fleet.Outcome, bool) {
	// Written again before every pod, in case it was deleted meanwhile.
	if err := sr.ensurePolicy(ctx); err != nil {
		switch {
		case errors.As(err, new(policyRefusal)):
			return sr.policyRefused(ctx, err), true
		case permanent(err):
			return sr.refused(ctx, "NetworkPolicy "+NetworkPolicyName(sr.id), err), true
		}
		if ctx.Err() == nil {
			sr.log.Warn("cannot write the session's network policy; the pod waits for it", "err", err)
		}
		return fleet.Outcome{}, false
	}
	pod := RenderPod(pool, sr.claim, sr.r.render())
	err := sr.r.cfg.Kube.Create(ctx, pod, client.FieldOwner(ManagedBy))
	switch {
	case err == nil:
	case apierrors.IsAlreadyExists(err):
		return fleet.Outcome{}, false // the next read shows whose it is
	case permanent(err):
		return sr.refused(ctx, "pod "+sr.pod, err), true
	default:
		if ctx.Err() == nil {
			sr.log.Warn("cannot create the session's pod; retrying", "err", err)
		}
		return fleet.Outcome{}, false
	}
	sr.served, sr.observed = pod.UID, false
	sr.scheduled, sr.started, sr.waiting = false, false, ""
	sr.serving()
	image := pod.Spec.Containers[workerIndex(pod, ContainerName(pool))].Image
	sr.log.Info("pod created", "image", image)
	sr.r.report(ctx, sr.id, api.MachineStepCreate, fmt.Sprintf("Created pod %s in namespace %s (image %s).", sr.pod, pod.Namespace, image), nil)
	sr.resume(ctx)
	return fleet.Outcome{}, false
}

// resume clears the suspended-at mark of the session's volume once a pod
// mounts it again.
func (sr *sessionRun) resume(ctx context.Context) {
	if sr.resumed || sr.r.cfg.Pool().Spec.Resume.Policy != v1alpha1.ResumeFilesystemSnapshot {
		return
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+AnnotationSuspendedAt+`":null}}}`))
	v := &corev1.PersistentVolumeClaim{}
	v.Namespace, v.Name = sr.r.cfg.Pool().Namespace, VolumeName(sr.id)
	if err := sr.r.cfg.Kube.Patch(ctx, v, patch, client.FieldOwner(ManagedBy)); err != nil {
		sr.log.Warn("cannot clear the volume's suspended-at mark", "volume", v.Name, "err", err)
		return
	}
	sr.resumed = true
}

// serving counts the run in PodsActive once.
func (sr *sessionRun) serving() {
	if !sr.active && sr.r.cfg.Metrics.PodsActive != nil {
		sr.r.cfg.Metrics.PodsActive.Inc()
	}
	sr.active = true
}

// stale handles a pod under the session's name that this run does not
// serve: left over from an earlier claim (deleted, then replaced), or
// someone else's (refused).
func (sr *sessionRun) stale(ctx context.Context, pool *v1alpha1.OutpostPool, p *corev1.Pod) (fleet.Outcome, bool) {
	if !OwnedBy(p, pool) {
		return sr.refused(ctx, "pod "+sr.pod, notOurs("Pod", p.Name, pool)), true
	}
	if p.DeletionTimestamp == nil {
		sr.log.Info("deleting a pod left over from an earlier claim", "uid", p.UID)
		if err := sr.r.deletePod(ctx, sr.id, p.UID); err != nil {
			sr.log.Warn("cannot delete the leftover pod", "err", err)
			return fleet.Outcome{}, false
		}
	}
	sr.gone = p.UID
	poke(sr.wake) // a pod without a grace period is gone at once
	return fleet.Outcome{}, false
}

// observe reports what the served pod shows and acts on its end.
func (sr *sessionRun) observe(ctx context.Context, pool *v1alpha1.OutpostPool, p *corev1.Pod) (fleet.Outcome, bool) {
	if p.DeletionTimestamp != nil {
		return fleet.Outcome{}, false // someone deletes it: absent() counts it
	}
	name := ContainerName(pool)
	cs := containerStatus(p, name)
	if p.Spec.NodeName != "" && !sr.scheduled {
		sr.scheduled = true
		sr.r.report(ctx, sr.id, api.MachineStepCreate, fmt.Sprintf("Pod %s scheduled on node %s.", sr.pod, p.Spec.NodeName), nil)
	}
	if why := waitingOf(p, cs); why != "" && why != sr.waiting {
		sr.waiting = why
		sr.log.Info("pod waiting", "why", why)
		sr.r.report(ctx, sr.id, api.MachineStepCreate, fmt.Sprintf("Pod %s is waiting: %s", sr.pod, why), nil)
	}
	if cs != nil && cs.State.Running != nil && !sr.started {
		sr.started = true
		took := time.Since(sr.start).Round(time.Millisecond)
		if !sr.s.Adopted && !sr.timed {
			sr.timed = true
			if o := sr.r.cfg.Metrics.ProvisionSeconds; o != nil {
				o.Observe(time.Since(sr.start).Seconds())
			}
		}
		sr.log.Info("worker container started", "node", p.Spec.NodeName, "took", took)
		sr.r.report(ctx, sr.id, api.MachineStepStart, fmt.Sprintf("Pod %s is running on node %s; its remote started (%s after the claim).", sr.pod, p.Spec.NodeName, took), nil)
	}
	if t := sr.r.cfg.StartTimeout; t > 0 && !sr.started && p.Status.Phase == corev1.PodPending &&
		time.Since(p.CreationTimestamp.Time) > t {
		why := fmt.Sprintf("its worker container was not running %s after the pod was created", t)
		if sr.waiting != "" {
			why += " (" + strings.TrimSuffix(sr.waiting, ".") + ")"
		}
		sr.r.report(ctx, sr.id, api.MachineStepFailed, fmt.Sprintf("Pod %s failed to start: %s.", sr.pod, why), nil)
		if out, over := sr.failed(ctx, pool, why, p); over {
			return out, true
		}
		return fleet.Outcome{}, false
	}
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		return sr.succeeded(ctx), true
	case corev1.PodFailed:
		code, why := exitOf(p, cs)
		sr.r.report(ctx, sr.id, api.MachineStepExit, fmt.Sprintf("The remote in pod %s exited: %s.", sr.pod, why), code)
		if code != nil && *code == api.RemoteExitRejected {
			sr.teardown(ctx, "the gateway refused the remote", false)
			return fleet.HandedOff(fmt.Errorf("the gateway refused the remote in pod %s (%s)", sr.pod, why)), true
		}
		if out, over := sr.failed(ctx, pool, why, p); over {
			return out, true
		}
		return fleet.Outcome{}, false
	}
	if want := WorkerImage(pool, sr.r.cfg.WorkerImage); idle(p, cs) && workerImage(p, name) != want {
		sr.log.Info("replacing an idle pod: the pool's worker image changed", "from", workerImage(p, name), "to", want)
		if err := sr.r.deletePod(ctx, sr.id, p.UID); err != nil {
			sr.log.Warn("cannot delete the pod", "err", err)
			return fleet.Outcome{}, false
		}
		sr.r.report(ctx, sr.id, api.MachineStepTeardown, fmt.Sprintf("Replacing pod %s, which had not started serving: the pool's worker image is now %s (was %s).", sr.pod, want, workerImage(p, name)), nil)
		sr.gone, sr.served = p.UID, ""
		poke(sr.wake)
	}
	return fleet.Outcome{}, false
}

// failed counts a failed pod (p, nil when it was deleted) toward the
// pool's restartLimit and deletes it; over with the outcome when the limit
// is passed and the session given up.
func (sr *sessionRun) failed(ctx context.Context, pool *v1alpha1.OutpostPool, why string, p *corev1.Pod) (fleet.Outcome, bool) {
	sr.restarts++
	limit := RestartLimit(pool)
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+AnnotationRestarts+`":"`+strconv.Itoa(sr.restarts)+`"}}}`))
	sec := &corev1.Secret{}
	sec.Namespace, sec.Name = pool.Namespace, SecretName(sr.id)
	if err := sr.r.cfg.Kube.Patch(ctx, sec, patch, client.FieldOwner(ManagedBy)); err != nil {
		sr.log.Warn("cannot record the restart count", "err", err)
	}
	if sr.restarts > limit {
		reason := fmt.Sprintf("pod %s failed %d times (last: %s); giving up", sr.pod, sr.restarts, why)
		sr.log.Warn("giving the session up", "reason", reason)
		if m := sr.r.cfg.Metrics.PodsGivenUp; m != nil {
			m.Inc()
		}
		sr.r.report(ctx, sr.id, api.MachineStepFailed, "Pod "+reason+".", nil)
		sr.teardown(ctx, "given up", true)
		return fleet.NotStarted(errors.New(reason)).Postponed(), true
	}
	sr.log.Info("replacing the failed pod", "restart", sr.restarts, "limit", limit, "why", why)
	if p != nil {
		if err := sr.r.deletePod(ctx, sr.id, p.UID); err != nil {
			sr.log.Warn("cannot delete the failed pod", "err", err)
		}
		sr.gone = p.UID
	}
	sr.served = ""
	poke(sr.wake)
	sr.r.report(ctx, sr.id, api.MachineStepTeardown, fmt.Sprintf("Replacing pod %s (restart %d of %d): %s.", sr.pod, sr.restarts, limit, why), nil)
	return fleet.Outcome{}, false
}

// succeeded ends the run of a pod whose remote exited 0: the session ended
// or was suspended (the consumer confirms which).
func (sr *sessionRun) succeeded(ctx context.Context) fleet.Outcome {
	code := 0
	sr.r.report(ctx, sr.id, api.MachineStepExit, fmt.Sprintf("The remote in pod %s exited: exit code 0.", sr.pod), &code)
	sr.teardown(ctx, "the remote exited", false)
	sr.settleVolume(ctx)
	return fleet.Exited(errors.New("remote exited: exit code 0"))
}

// ended ends the run of a session the queue shows over (or suspended).
func (sr *sessionRun) ended(ctx context.Context) fleet.Outcome {
	sr.teardown(ctx, "the session ended", false)
	sr.settleVolume(ctx)
	return fleet.Stopped(errors.New("session ended"))
}

// lost ends the run of a claim lost: the session is someone else's, so
// nothing of it may keep running here. No report: only the holder may.
func (sr *sessionRun) lost(ctx context.Context) fleet.Outcome {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	sr.log.Warn("the claim was lost; deleting the session's pod")
	if err := sr.r.deletePod(bg, sr.id, ""); err != nil {
		sr.log.Warn("cannot delete the pod", "err", err)
	}
	if err := sr.r.deleteSecret(bg, sr.id); err != nil {
		sr.log.Warn("cannot delete the secret", "err", err)
	}
	cause := context.Cause(ctx)
	if cause == nil {
		cause = fleet.ErrClaimLost
	}
	return fleet.Stopped(fmt.Errorf("%w; pod %s deleted", cause, sr.pod))
}

// stopping ends the run as the operator stops: the pod keeps serving and
// the claim is kept, for the next operator to adopt.
func (sr *sessionRun) stopping() fleet.Outcome {
	sr.log.Info("operator stopping; leaving the session's pod and claim to the next one")
	return fleet.HandedOff(errors.New("the operator stopped; its pod and claim are left for the next operator to adopt"))
}

// refused ends the run of a session whose objects the API server refused
// (what names them), or when another's object is in the way: the reason
// goes on the transcript and, as the release reason, on the session's
// status; other claimers get the session first. What this run wrote is
// deleted.
func (sr *sessionRun) refused(ctx context.Context, what string, err error) fleet.Outcome {
	why := fmt.Sprintf("The Kubernetes API server refused %s: %v", what, err)
	if errors.Is(err, errNotOurs) {
		why = fmt.Sprintf("Cannot serve the session: %v", err)
	}
	sr.log.Warn("cannot give the session a pod", "err", err)
	sr.r.report(ctx, sr.id, api.MachineStepFailed, why, nil)
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	if sr.secret != "" {
		s := &corev1.Secret{}
		s.Namespace, s.Name = sr.r.cfg.Pool().Namespace, SecretName(sr.id)
		if err := ignoreGone(sr.r.cfg.Kube.Delete(bg, s, client.Preconditions{UID: &sr.secret})); err != nil {
			sr.log.Warn("cannot delete the secret", "err", err)
		}
	}
	if sr.madeVolume {
		if err := sr.r.deleteVolume(bg, sr.id); err != nil {
			sr.log.Warn("cannot delete the volume", "err", err)
		}
	}
	return fleet.NotStarted(errors.New(why)).Postponed()
}

// teardown deletes the session's pod and Secret, and its volume too with
// all, then reports it.
func (sr *sessionRun) teardown(ctx context.Context, reason string, all bool) {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	var errs []error
	errs = append(errs, sr.r.deletePod(bg, sr.id, ""), sr.r.deleteSecret(bg, sr.id))
	what := "its Secret"
	if all {
		errs = append(errs, sr.r.deleteVolume(bg, sr.id))
		what = "its Secret and volume"
	}
	if err := errors.Join(errs...); err != nil {
		sr.log.Warn("cannot delete the session's objects", "err", err)
	}
	sr.log.Info("pod deleted", "reason", reason)
	sr.r.report(bg, sr.id, api.MachineStepTeardown, fmt.Sprintf("Pod %s and %s deleted (%s).", sr.pod, what, reason), nil)
}

// settleVolume keeps a suspended session's volume (marked suspended-at)
// and deletes an ended one's; it leaves it when the queue cannot say.
func (sr *sessionRun) settleVolume(ctx context.Context) {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	e, err := sr.r.cfg.API.Queue.Get(bg, sr.id)
	if err := sr.r.applyFate(bg, sr.id, volumeFate(e, err), time.Now()); err != nil {
		sr.log.Warn("cannot settle the session's volume", "err", err)
	}
}
