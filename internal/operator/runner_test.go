//go:build !windows

package operator

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// TestRunnerServesSessions: a consumer of capacity 2 with the runner, of 3
// sessions, has 2 pods at a time; each pod has its Secret holding only the
// claim's connect token, given through a secretKeyRef; the pool's token is
// in neither. Provisioning is on the transcript and in the metrics; a
// session that ends has its pod and Secret deleted and frees its slot.
func TestRunnerServesSessions(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{})
	r := e.runner()
	ids := []string{e.session(), e.session(), e.session()}
	e.startConsumer(e.consumer(r, 2))

	e.waitFor("two pods", func() bool { return len(e.pods()) == 2 })
	pods := e.pods()
	served := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		id := p.Labels[LabelSessionID]
		served[id] = true
		if p.Name != PodName(id) || !OwnedBy(p, e.getPool()) {
			t.Errorf("pod %s of session %s, owners %+v", p.Name, id, p.OwnerReferences)
		}
		var sec corev1.Secret
		if !e.get(SecretName(id), &sec) {
			t.Fatalf("no secret for session %s", id)
		}
		if len(sec.Data) != 1 || !strings.HasPrefix(string(sec.Data[TokenKey]), "opc_") || sec.Type != corev1.SecretTypeOpaque {
			t.Errorf("secret %s holds %v", sec.Name, keys(sec.Data))
		}
		for what, obj := range map[string]any{"pod": p, "secret": &sec} {
			b, _ := json.Marshal(obj)
			if strings.Contains(string(b), e.poolToken) {
				t.Errorf("the pool's token is in the %s of session %s", what, id)
			}
		}
		b, _ := json.Marshal(p)
		if strings.Contains(string(b), string(sec.Data[TokenKey])) {
			t.Errorf("the connect token is in the pod spec of session %s", id)
		}
		ref := envOf(&p.Spec.Containers[0])["OUTPOST_CONNECT_TOKEN"].ValueFrom
		if ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != sec.Name {
			t.Errorf("pod %s takes its token from %+v", p.Name, ref)
		}
		e.kubelet(r, p, corev1.PodRunning, running())
	}
	if len(served) != 2 {
		t.Fatalf("served %v", served)
	}
	var first, last string
	for _, id := range ids {
		if served[id] {
			if first == "" {
				first = id
			}
		} else {
			last = id
		}
	}
	e.waitEvent(first, api.EventMachine, api.MachineStepCreate, "Created pod "+PodName(first))
	e.waitEvent(first, api.EventMachine, api.MachineStepStart, "is running")
	e.waitFor("PodsActive 2 and two provisioning times", func() bool {
		return testutil.ToFloat64(e.active) == 2 && sampleCount(e.provisioned) == 2
	})

	e.terminate(first)
	e.waitGone(PodName(first), &corev1.Pod{})
	e.waitGone(SecretName(first), &corev1.Secret{})
	e.waitEvent(first, api.EventMachine, api.MachineStepTeardown, "deleted (the session ended)")
	p := e.waitPod(last, "the third session's pod", nil)
	if n := len(e.pods()); n > 2 {
		t.Errorf("%d pods at once, capacity 2", n)
	}
	e.kubelet(r, p, corev1.PodRunning, running())
	for id := range served {
		if id != first {
			e.terminate(id)
		}
	}
	e.terminate(last)
	e.waitFor("every pod and secret deleted", func() bool {
		l, err := r.Leftovers(e.ctx)
		return err == nil && len(l) == 0
	})
	e.waitFor("PodsActive 0", func() bool { return testutil.ToFloat64(e.active) == 0 })
}

// sampleCount is how many times h observed.
func sampleCount(h prometheus.Histogram) uint64 {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		panic(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestRunnerSucceeded: a pod whose remote exits 0 ends the run as Exited;
// its pod and Secret are deleted, and with FilesystemSnapshot the volume
// of a terminated session too. The exit is on the transcript.
func TestRunnerSucceeded(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{Resume: v1alpha1.ResumeSpec{Policy: v1alpha1.ResumeFilesystemSnapshot}})
	r := e.runner()
	id := e.session()
	ch := e.goRun(e.ctx, r, e.claim(id))
	p := e.waitPod(id, "the pod", nil)
	var v corev1.PersistentVolumeClaim
	if !e.get(VolumeName(id), &v) || !OwnedBy(&v, e.getPool()) {
		t.Fatalf("no volume of the pool for session %s", id)
	}
	if vol := p.Spec.Volumes[0]; vol.PersistentVolumeClaim == nil || vol.PersistentVolumeClaim.ClaimName != VolumeName(id) {
		t.Errorf("pod volumes %+v", p.Spec.Volumes)
	}
	e.kubelet(r, p, corev1.PodRunning, running())
	e.waitEvent(id, api.EventMachine, api.MachineStepStart, "is running")
	e.terminate(id) // the server's end frame, then the remote exits 0
	p = e.waitPod(id, "the pod", nil)
	e.kubelet(r, p, corev1.PodSucceeded, exited(0, "Completed"))
	out := e.outcome(ch)
	if out.Ending != fleet.EndExited {
		t.Errorf("outcome %+v", out)
	}
	for name, obj := range map[string]client.Object{PodName(id): &corev1.Pod{}, SecretName(id): &corev1.Secret{}, VolumeName(id): &corev1.PersistentVolumeClaim{}} {
		e.waitGone(name, obj)
	}
	ev := e.waitEvent(id, api.EventMachine, api.MachineStepExit, "exit code 0")
	if ev.ExitCode == nil || *ev.ExitCode != 0 {
		t.Errorf("exit event %+v", ev)
	}
}

// TestRunnerRestartLimit: a failing pod is replaced up to restartLimit
// times, the count kept on the Secret; then the session is given up: the
// release reason says why on the session's transcript, nothing of it is
// left, and the pool does not claim it again at once.
func TestRunnerRestartLimit(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{RestartLimit: ptr.To[int32](2)})
	r := e.runner()
	id := e.session()
	e.startConsumer(e.consumer(r, 1))
	seen := map[types.UID]bool{}
	for i := 1; i <= 3; i++ {
		p := e.waitPod(id, "a new pod", func(p *corev1.Pod) bool { return !seen[p.UID] })
		seen[p.UID] = true
		if i > 1 {
			var sec corev1.Secret
			if e.get(SecretName(id), &sec); sec.Annotations[AnnotationRestarts] != strconv.Itoa(i-1) {
				t.Errorf("before pod %d the secret counts %q restarts", i, sec.Annotations[AnnotationRestarts])
			}
		}
		e.kubelet(r, p, corev1.PodRunning, running())
		e.kubelet(r, p, corev1.PodFailed, exited(1, "Error"))
	}
	want := "pod " + PodName(id) + " failed 3 times (last: exit code 1, reason Error); giving up"
	e.waitEvent(id, api.EventRelease, "", want)
	e.waitEvent(id, api.EventMachine, api.MachineStepExit, "exit code 1")
	e.waitEvent(id, api.EventMachine, api.MachineStepTeardown, "restart 2 of 2")
	e.waitFor("the session's objects deleted", func() bool {
		l, err := r.Leftovers(e.ctx)
		return err == nil && len(l) == 0
	})
	if got := testutil.ToFloat64(e.givenUp); got != 1 {
		t.Errorf("PodsGivenUp = %v", got)
	}
	if q := e.entry(id); q.Status.Phase != api.PhasePending {
		t.Errorf("the session's entry is %s, want pending (released)", q.Status.Phase)
	}
	if len(seen) != 3 {
		t.Errorf("%d pods, want 3", len(seen))
	}
}

// TestRunnerClaimLost: when the claim is lost the pod and Secret are
// deleted at once.
func TestRunnerClaimLost(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{})
	r := e.runner()
	id := e.session()
	ctx, cancel := context.WithCancelCause(e.ctx)
	ch := e.goRun(ctx, r, e.claim(id))
	p := e.waitPod(id, "the pod", nil)
	e.kubelet(r, p, corev1.PodRunning, running())
	e.waitEvent(id, api.EventMachine, api.MachineStepStart, "is running")
	cancel(fleet.ErrClaimLost)
	out := e.outcome(ch)
	if !errors.Is(out.Err, fleet.ErrClaimLost) || out.Ending != fleet.EndStopped {
		t.Errorf("outcome %+v", out)
	}
	e.waitGone(PodName(id), &corev1.Pod{})
	e.waitGone(SecretName(id), &corev1.Secret{})
}

// TestRunnerStopAndAdopt: an operator that stops leaves the pod, its
// Secret and the claim alone; the next one adopts the pod without making
// another, and counts its restarts from the Secret.
func TestRunnerStopAndAdopt(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{RestartLimit: ptr.To[int32](2)})
	r1 := e.runner()
	id := e.session()
	stop := e.startConsumer(e.consumer(r1, 1))
	p := e.waitPod(id, "the pod", nil)
	e.kubelet(r1, p, corev1.PodRunning, running())
	e.waitEvent(id, api.EventMachine, api.MachineStepStart, "is running")
	stop()

	var after corev1.Pod
	if !e.get(PodName(id), &after) || after.UID != p.UID || after.DeletionTimestamp != nil {
		t.Fatal("the pod was touched on shutdown")
	}
	var sec corev1.Secret
	if !e.get(SecretName(id), &sec) {
		t.Fatal("the secret was deleted on shutdown")
	}
	if q := e.entry(id); q.Status.Phase != api.PhaseClaimed || q.Status.AcceptorID == nil || *q.Status.AcceptorID != e.acceptor {
		t.Fatalf("the claim was not kept: %+v", q.Status)
	}
	left, err := r1.Leftovers(e.ctx)
	if err != nil || len(left) != 1 || left[0] != (Leftover{SessionID: id, Pod: true, Secret: true}) {
		t.Fatalf("Leftovers = %+v, %v", left, err)
	}

	// Two restarts were counted before: one more failure gives up.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+AnnotationRestarts+`":"2"}}}`))
	if err := kube.Patch(e.ctx, &sec, patch); err != nil {
		t.Fatal(err)
	}
	r2 := e.runner()
	c := e.consumer(r2, 1)
	c.Recover = func(ctx context.Context) []api.QueueEntry {
		var out []api.QueueEntry
		for _, l := range left {
			claim, err := e.machine.Queue.Claim(ctx, l.SessionID, e.acceptor)
			if err != nil {
				t.Errorf("renew %s: %v", l.SessionID, err)
				continue
			}
			out = append(out, *claim)
		}
		return out
	}
	e.startConsumer(c)
	e.waitEvent(id, api.EventMachine, api.MachineStepStart, "adopted pod "+PodName(id))
	p = e.waitPod(id, "the adopted pod", nil)
	if p.UID != after.UID {
		t.Fatal("the adopted pod was replaced")
	}
	e.kubelet(r2, p, corev1.PodFailed, exited(2, "Error"))
	e.waitEvent(id, api.EventRelease, "", "failed 3 times (last: exit code 2, reason Error); giving up")
	e.waitGone(PodName(id), &corev1.Pod{})
	e.waitGone(SecretName(id), &corev1.Secret{})
}

// TestRunnerRefused: a pod the API server refuses fails the session at
// once with the API server's message on the transcript and as the
// outcome; its Secret is deleted.
func TestRunnerRefused(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{Worker: v1alpha1.WorkerSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: DefaultContainerName, Env: []corev1.EnvVar{{Name: "BAD=NAME", Value: "x"}}}}}}}})
	r := e.runner()
	id := e.session()
	out := e.outcome(e.goRun(e.ctx, r, e.claim(id)))
	if out.Ending != fleet.EndNotStarted || !out.Postpone || out.Err == nil || !strings.Contains(out.Err.Error(), "Invalid value") {
		t.Fatalf("outcome %+v", out)
	}
	e.waitEvent(id, api.EventMachine, api.MachineStepFailed, "The Kubernetes API server refused pod "+PodName(id))
	e.waitGone(SecretName(id), &corev1.Secret{})
	if e.get(PodName(id), &corev1.Pod{}) {
		t.Error("a pod exists")
	}
}

// TestRunnerNotOurs: an object of someone else under the session's name
// is neither used nor touched.
func TestRunnerNotOurs(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{})
	r := e.runner()
	id := e.session()
	theirs := &corev1.Secret{}
	theirs.Namespace, theirs.Name = e.ns, SecretName(id)
	theirs.StringData = map[string]string{"token": "theirs"}
	if err := kube.Create(e.ctx, theirs); err != nil {
		t.Fatal(err)
	}
	out := e.outcome(e.goRun(e.ctx, r, e.claim(id)))
	if out.Ending != fleet.EndNotStarted || out.Err == nil || !strings.Contains(out.Err.Error(), "not owned by the pool") {
		t.Fatalf("outcome %+v", out)
	}
	var sec corev1.Secret
	if !e.get(SecretName(id), &sec) || string(sec.Data["token"]) != "theirs" {
		t.Error("the other secret was changed or deleted")
	}
}

// TestRunnerImageDrift: a pod that has not started serving is replaced
// when the pool's worker image changes; a running one is never touched.
func TestRunnerImageDrift(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{})
	r := e.runner()
	id := e.session()
	ch := e.goRun(e.ctx, r, e.claim(id))
	p1 := e.waitPod(id, "the pod", nil)
	if img := p1.Spec.Containers[0].Image; img != testImage {
		t.Fatalf("image %s", img)
	}
	e.editPool(func(s *v1alpha1.OutpostPoolSpec) { s.Worker.Overrides.Image = "worker:v2" })
	r.NotifyAll()
	p2 := e.waitPod(id, "a pod of the new image", func(p *corev1.Pod) bool { return p.UID != p1.UID })
	if img := p2.Spec.Containers[0].Image; img != "worker:v2" {
		t.Fatalf("replacement image %s", img)
	}
	e.waitEvent(id, api.EventMachine, api.MachineStepTeardown, "the pool's worker image is now worker:v2")

	e.kubelet(r, p2, corev1.PodRunning, running())
	e.waitEvent(id, api.EventMachine, api.MachineStepStart, "is running")
	e.editPool(func(s *v1alpha1.OutpostPoolSpec) { s.Worker.Overrides.Image = "worker:v3" })
	// Schedule the pod as it runs: its report proves a read after the
	// image change.
	binding := &corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}
	binding.Name = p2.Name
	if err := kube.SubResource("binding").Create(e.ctx, p2, binding); err != nil {
		t.Fatalf("bind: %v", err)
	}
	r.NotifyAll()
	e.waitEvent(id, api.EventMachine, api.MachineStepCreate, "scheduled on node node-1")
	var now corev1.Pod
	if !e.get(PodName(id), &now) || now.UID != p2.UID || now.DeletionTimestamp != nil {
		t.Fatal("a running pod was replaced on an image change")
	}
	if e.hasEvent(id, api.EventMachine, api.MachineStepTeardown, "worker:v3") {
		t.Error("the running pod was reported replaced")
	}
	e.terminate(id)
	e.kubelet(r, &now, corev1.PodSucceeded, exited(0, "Completed"))
	if out := e.outcome(ch); out.Ending != fleet.EndExited {
		t.Errorf("outcome %+v", out)
	}
}

// TestRunnerVolumeResume: a volume kept for a suspended session is reused
// (not remade) by its next pod, which clears its suspended-at mark; the
// pod and Secret go when the claim is lost, the volume stays.
func TestRunnerVolumeResume(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{Resume: v1alpha1.ResumeSpec{Policy: v1alpha1.ResumeFilesystemSnapshot}})
	r := e.runner()
	id := e.session()
	ch := e.goRun(e.ctx, r, e.claim(id))
	p := e.waitPod(id, "the pod", nil)
	e.kubelet(r, p, corev1.PodRunning, running())
	// The session goes on (the queue shows it running): exit 0 keeps the
	// volume for its next pod.
	p = e.waitPod(id, "the pod", nil)
	e.kubelet(r, p, corev1.PodSucceeded, exited(0, "Completed"))
	if out := e.outcome(ch); out.Ending != fleet.EndExited {
		t.Fatalf("outcome %+v", out)
	}
	var v1 corev1.PersistentVolumeClaim
	if !e.get(VolumeName(id), &v1) {
		t.Fatal("the volume of a session going on was deleted")
	}
	// What the queue answering "suspended" does.
	if err := r.applyFate(e.ctx, id, fateSuspend, time.Now()); err != nil {
		t.Fatal(err)
	}
	left, err := r.Leftovers(e.ctx)
	if err != nil || len(left) != 1 || left[0] != (Leftover{SessionID: id, Volume: true, Suspended: true}) {
		t.Fatalf("Leftovers = %+v, %v", left, err)
	}

	ctx, cancel := context.WithCancelCause(e.ctx)
	ch = e.goRun(ctx, r, e.claim(id))
	e.waitPod(id, "the resumed pod", nil)
	e.waitFor("suspended-at cleared", func() bool {
		var v corev1.PersistentVolumeClaim
		return e.get(VolumeName(id), &v) && v.Annotations[AnnotationSuspendedAt] == ""
	})
	var v2 corev1.PersistentVolumeClaim
	if e.get(VolumeName(id), &v2); v2.UID != v1.UID {
		t.Error("the volume was made again")
	}
	cancel(fleet.ErrClaimLost)
	e.outcome(ch)
	e.waitGone(PodName(id), &corev1.Pod{})
	if !e.get(VolumeName(id), &corev1.PersistentVolumeClaim{}) {
		t.Error("the volume went with the lost claim")
	}
}

// TestCollectVolumes: suspended volumes past the TTL go, recent ones stay;
// volumes of sessions over (terminated, or gone from the queue) go; a
// volume not owned by the pool is left alone whatever its labels.
func TestCollectVolumes(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{Resume: v1alpha1.ResumeSpec{Policy: v1alpha1.ResumeFilesystemSnapshot, SnapshotTTLSeconds: ptr.To[int64](3600)}})
	r := e.runner()
	old, recent, ended, live := e.session(), e.session(), e.session(), e.session()
	gone := "ses_gone"
	e.terminate(ended)
	pool := e.getPool()
	mk := func(id, suspendedAt string, owned bool) {
		v := RenderVolume(pool, id, r.render())
		if suspendedAt != "" {
			v.Annotations[AnnotationSuspendedAt] = suspendedAt
		}
		if !owned {
			v.Name = "other-" + v.Name
			v.OwnerReferences = nil
		}
		if err := kube.Create(e.ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	mk(old, time.Now().Add(-2*time.Hour).UTC().Format(time.RFC3339), true)
	mk(recent, time.Now().UTC().Format(time.RFC3339), true)
	mk(ended, "", true)
	mk(gone, "", true)
	mk(live, "", true)
	mk(gone, "", false)
	if err := r.CollectVolumes(e.ctx); err != nil {
		t.Fatal(err)
	}
	for id, keep := range map[string]bool{old: false, recent: true, ended: false, gone: false, live: true} {
		var v corev1.PersistentVolumeClaim
		if kept := e.get(VolumeName(id), &v) && v.DeletionTimestamp == nil; kept != keep {
			t.Errorf("volume of session %s kept = %v, want %v", id, kept, keep)
		}
	}
	if !e.get("other-"+VolumeName(gone), &corev1.PersistentVolumeClaim{}) {
		t.Error("a volume not owned by the pool was deleted")
	}

	// RemoveAll takes the rest.
	if err := r.RemoveAll(e.ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := r.Leftovers(e.ctx); err != nil || len(l) != 0 {
		t.Errorf("after RemoveAll: %+v, %v", l, err)
	}
}

// TestRunnerPodDeleted: a pod deleted by someone else (a drain, kubectl)
// is made again and counts as a restart.
func TestRunnerPodDeleted(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{})
	r := e.runner()
	id := e.session()
	ctx, cancel := context.WithCancelCause(e.ctx)
	ch := e.goRun(ctx, r, e.claim(id))
	p1 := e.waitPod(id, "the pod", nil)
	e.kubelet(r, p1, corev1.PodRunning, running())
	e.waitEvent(id, api.EventMachine, api.MachineStepStart, "is running")
	if err := kube.Delete(e.ctx, p1); err != nil {
		t.Fatal(err)
	}
	r.Notify(id)
	p2 := e.waitPod(id, "a new pod", func(p *corev1.Pod) bool { return p.UID != p1.UID })
	var sec corev1.Secret
	if e.get(SecretName(id), &sec); sec.Annotations[AnnotationRestarts] != "1" {
		t.Errorf("restarts %q after a deleted pod", sec.Annotations[AnnotationRestarts])
	}
	e.waitEvent(id, api.EventMachine, api.MachineStepTeardown, "was deleted")
	cancel(fleet.ErrClaimLost)
	e.outcome(ch)
	e.waitGone(p2.Name, &corev1.Pod{})
}

// TestRunnerRejected: a remote the gateway refused (exit 4) leaves the
// claim to whoever serves the session, and nothing running here.
func TestRunnerRejected(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{})
	r := e.runner()
	id := e.session()
	ch := e.goRun(e.ctx, r, e.claim(id))
	p := e.waitPod(id, "the pod", nil)
	e.kubelet(r, p, corev1.PodFailed, exited(api.RemoteExitRejected, "Error"))
	out := e.outcome(ch)
	if out.Ending != fleet.EndHandedOff {
		t.Errorf("outcome %+v", out)
	}
	e.waitGone(PodName(id), &corev1.Pod{})
	e.waitGone(SecretName(id), &corev1.Secret{})
	if got := testutil.ToFloat64(e.givenUp); got != 0 {
		t.Errorf("PodsGivenUp = %v", got)
	}
}

// TestRunnerStartTimeout: a pod whose worker never starts (an image that
// cannot be pulled) counts as failed once StartTimeout has passed since it
// was created: replaced up to restartLimit, then the session is given up
// with the waiting reason in the release — it does not hold its claim for
// ever.
func TestRunnerStartTimeout(t *testing.T) {
	t.Parallel()
	e := newKenv(t, v1alpha1.OutpostPoolSpec{RestartLimit: ptr.To[int32](1)})
	r := NewRunner(RunnerConfig{Kube: kube, Pool: e.getPool, API: e.machine, AcceptorID: e.acceptor,
		OutpostID: e.outpost.Metadata.OutpostID, WorkerImage: testImage,
		Metrics:      RunnerMetrics{PodsActive: e.active, PodsGivenUp: e.givenUp, ProvisionSeconds: e.provisioned},
		PollInterval: 100 * time.Millisecond, StartTimeout: 2 * time.Second, Logger: testLogger(t)})
	id := e.session()
	e.startConsumer(e.consumer(r, 1))
	pull := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}
	seen := map[types.UID]bool{}
	for i := 1; i <= 2; i++ {
		p := e.waitPod(id, "a new pod", func(p *corev1.Pod) bool { return !seen[p.UID] })
		seen[p.UID] = true
		e.kubelet(r, p, corev1.PodPending, pull)
	}
	want := "its worker container was not running 2s after the pod was created (ImagePullBackOff: Back-off pulling image)"
	e.waitEvent(id, api.EventRelease, "", "pod "+PodName(id)+" failed 2 times (last: "+want+"); giving up")
	e.waitEvent(id, api.EventMachine, api.MachineStepFailed, "failed to start: "+want)
	e.waitFor("the session's objects deleted", func() bool {
		l, err := r.Leftovers(e.ctx)
		return err == nil && len(l) == 0
	})
	if len(seen) != 2 {
		t.Errorf("%d pods, want 2", len(seen))
	}
}
