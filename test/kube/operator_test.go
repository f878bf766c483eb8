//go:build !windows

package kube

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// objectName is the design's deterministic name of a session's object:
// prefix, the id made DNS-safe, and 8 hex digits of the raw id's FNV-1a.
func objectName(prefix, id string) string {
	h := fnv.New32a()
	h.Write([]byte(id))
	safe := strings.Trim(strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, id), "-")
	name := prefix + "-" + safe
	if max := 63 - 9; len(name) > max {
		name = strings.TrimRight(name[:max], "-")
	}
	return fmt.Sprintf("%s-%08x", name, h.Sum32())
}

func ptr[T any](v T) *T { return &v }

// tool calls one of an external session's tools as its agent; while the
// server answers 503 (no machine connected yet, which it may say for a
// moment after remote_connected) it tries again.
func (f *fixture) tool(id, tool string, args any) api.ToolResult {
	f.t.Helper()
	var res *api.ToolResult
	f.waitFor(60*time.Second, tool+" on "+id+" to be answered", func() bool {
		var err error
		res, err = f.admin.Sessions.CallTool(f.t.Context(), id, tool, args)
		if client.IsUnavailable(err) {
			return false
		}
		if err != nil {
			f.t.Fatalf("%s on %s: %v", tool, id, err)
		}
		return true
	})
	return *res
}

// exec runs a command as an external session's agent and returns its
// output.
func (f *fixture) exec(id, command string) string {
	f.t.Helper()
	res := f.tool(id, api.ToolExec, api.ExecArgs{Command: command})
	if !res.OK {
		f.t.Fatalf("exec %q on %s: %+v", command, id, res)
	}
	return res.Output
}

// externalSession creates a session driven by the test, over HTTP.
func (f *fixture) externalSession(outpost, title string) string {
	f.t.Helper()
	return f.createSession(api.CreateSessionRequest{Outpost: outpost, Title: title, Agent: api.Agent{Kind: api.AgentExternal}})
}

func (f *fixture) waitStatus(id, status string, within time.Duration) {
	f.t.Helper()
	f.waitFor(within, "session "+id+" to be "+status, func() bool { return f.session(id).Status.Status == status })
}

func (f *fixture) getPool(name string) *v1alpha1.OutpostPool {
	f.t.Helper()
	var p v1alpha1.OutpostPool
	if err := f.kc.Get(f.t.Context(), ctrlclient.ObjectKey{Namespace: f.ns, Name: name}, &p); err != nil {
		f.t.Fatal(err)
	}
	return &p
}

// TestPoolServesSessions: a pool of two serves five script sessions;
// they all finish, never more than two of its pods live at once, their
// pods and Secrets are gone at the end, each pod is the design's (names,
// labels, owner, the connect token from the session's Secret, no
// service-account token), and the pool's token is in no Pod, no
// per-session Secret and no container's environment.
func TestPoolServesSessions(t *testing.T) {
	requireOperator(t)
	t.Parallel()
	f := newFixture(t)
	token := f.outpost("fleet")
	w := f.watch()
	pool := f.pool("fleet", "fleet", token, func(p *v1alpha1.OutpostPool) { p.Spec.MaxConcurrentSessions = ptr(int32(2)) })
	op := f.operator()
	var ids []string
	for i := range 5 {
		ids = append(ids, f.scriptSession("fleet", fmt.Sprintf("s%d", i), fmt.Sprintf("echo hello-%d; sleep 0.5", i), "pwd"))
	}
	for _, id := range ids {
		f.waitFinished(id, 120*time.Second)
	}
	f.waitNothingLeft(60 * time.Second)
	maxLive, maxExisting, pods, secrets := w.snapshot()
	t.Logf("pods alive at once: at most %d (%d counting those being deleted)", maxLive, maxExisting)
	if maxLive > 2 || maxLive == 0 {
		t.Errorf("at most %d pods alive at once, want 1 or 2 (maxConcurrentSessions 2)", maxLive)
	}
	if len(pods) == 0 || len(secrets) == 0 {
		t.Fatalf("saw %d pod and %d Secret versions", len(pods), len(secrets))
	}

	for _, id := range ids {
		if n := w.podsOf(id); n != 1 {
			t.Errorf("session %s had %d pods, want 1", id, n)
		}
		tr := f.transcript(id)
		if !strings.Contains(tr, `"type":"machine"`) {
			t.Errorf("session %s: no provisioning on the transcript:\n%s", id, tr)
		}
	}
	for _, p := range pods {
		raw, _ := json.Marshal(p)
		if bytes.Contains(raw, []byte(token)) {
			t.Fatalf("pod %s holds the pool's token:\n%s", p.Name, raw)
		}
		id := p.Labels[labelSession]
		if want := objectName("outpost", id); p.Name != want {
			t.Errorf("pod %s of session %s, want the name %s", p.Name, id, want)
		}
		if p.Labels[labelPool] != "fleet" || p.Labels["app.kubernetes.io/name"] != "outpost-session" {
			t.Errorf("pod %s labels %v", p.Name, p.Labels)
		}
		if owner := metav1.GetControllerOf(&p); owner == nil || owner.UID != pool.UID || owner.BlockOwnerDeletion == nil || !*owner.BlockOwnerDeletion {
			t.Errorf("pod %s owner %+v, want the pool (uid %s)", p.Name, owner, pool.UID)
		}
		if p.Spec.RestartPolicy != corev1.RestartPolicyNever || p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
			t.Errorf("pod %s: restartPolicy %s, automountServiceAccountToken %v", p.Name, p.Spec.RestartPolicy, p.Spec.AutomountServiceAccountToken)
		}
		var c *corev1.Container
		for i := range p.Spec.Containers {
			if p.Spec.Containers[i].Name == "outpost-remote" {
				c = &p.Spec.Containers[i]
			}
		}
		if c == nil || c.Image != workerImage || c.WorkingDir != "/work/workspace" {
			t.Fatalf("pod %s: worker container %+v", p.Name, c)
		}
		var ref *corev1.SecretKeySelector
		for _, e := range c.Env {
			if e.Name == envConnect && e.ValueFrom != nil {
				ref = e.ValueFrom.SecretKeyRef
			}
			if e.Name == envConnect && e.Value != "" {
				t.Errorf("pod %s: the connect token is in the spec", p.Name)
			}
		}
		if ref == nil || ref.Name != objectName("outpost-token", id) || ref.Key != "token" {
			t.Errorf("pod %s: %s from %+v, want the session's Secret", p.Name, envConnect, ref)
		}
	}
	for _, s := range secrets {
		for k, v := range s.Data {
			if bytes.Contains(v, []byte(token)) {
				t.Fatalf("Secret %s key %s holds the pool's token", s.Name, k)
			}
		}
		if _, ok := s.Data["token"]; len(s.Data) != 1 || !ok {
			t.Errorf("Secret %s has keys %v, want only token", s.Name, keys(s.Data))
		}
	}
	for _, r := range f.kubelet.Runs() {
		if strings.Contains(strings.Join(r.Env, "\n"), token) {
			t.Fatalf("pod %s ran with the pool's token in its environment", r.Pod)
		}
	}
	f.waitFor(30*time.Second, "the pool Ready with no claims", func() bool {
		p := f.getPool("fleet")
		return p.Status.Phase == v1alpha1.PoolReady && p.Status.ClaimedSessions == 0
	})
	metrics := get(t, "http://"+op.metrics+"/metrics")
	for _, m := range []string{"outpost_operator_sessions_claimed_total", "outpost_operator_reconciles_total", "outpost_operator_provisioning_seconds"} {
		if !strings.Contains(metrics, m) {
			t.Errorf("metrics lack %s", m)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func get(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestRestartLimit: a session whose pod fails on every start gets its pod
// replaced restartLimit times, then its claim is released with the reason
// on its transcript; the starts after that succeed, so whoever claims it
// next serves it to the end.
func TestRestartLimit(t *testing.T) {
	requireOperator(t)
	t.Parallel()
	f := newFixture(t)
	token := f.outpost("flaky")
	const limit = 2
	f.kubelet.FailStarts(func(p *corev1.Pod, c string) bool {
		return p.Labels[labelPool] == "flaky" && c == "outpost-remote"
	}, limit+1, 1)
	f.pool("flaky", "flaky", token, func(p *v1alpha1.OutpostPool) { p.Spec.RestartLimit = ptr(int32(limit)) })
	f.operator()
	id := f.scriptSession("flaky", "fails to start", "echo finally-ran")

	var release *api.Event
	f.waitFor(120*time.Second, "the claim to be released with a reason", func() bool {
		for _, ev := range f.events(id) {
			if ev.Type == api.EventRelease && ev.Reason != "" {
				release = &ev
				return true
			}
		}
		return false
	})
	t.Logf("released: %s", release.Reason)
	failed := 0
	for _, r := range f.kubelet.Runs() {
		if r.Failed {
			failed++
			if r.Finished.IsZero() || r.Finished.UnixMilli() > release.Time {
				t.Errorf("a failed start of pod %s ended after the release", r.Pod)
			}
		}
	}
	if failed != limit+1 {
		t.Errorf("%d failed starts before the release, want %d (the pod and %d replacements)", failed, limit+1, limit)
	}
	// The reason names the pod and how often it failed.
	if !strings.Contains(release.Reason, objectName("outpost", id)) || !strings.Contains(release.Reason, fmt.Sprint(limit+1)) {
		t.Errorf("the release's reason %q does not say the pod failed %d times", release.Reason, limit+1)
	}
	f.waitFinished(id, 120*time.Second)
	if tr := f.transcript(id); !strings.Contains(tr, "finally-ran") {
		t.Errorf("the session did not run its step:\n%s", tr)
	}
	f.waitNothingLeft(60 * time.Second)
}

// TestDeletePool: deleting a pool with sessions running releases every
// claim (the sessions go back to the queue, not ended), removes its pods
// and Secrets, and the pool goes (its finalizer done).
func TestDeletePool(t *testing.T) {
	requireOperator(t)
	t.Parallel()
	f := newFixture(t)
	token := f.outpost("doomed")
	pool := f.pool("doomed", "doomed", token, nil)
	f.operator()
	ids := []string{f.externalSession("doomed", "a"), f.externalSession("doomed", "b")}
	for _, id := range ids {
		f.waitStatus(id, api.StatusRunning, 90*time.Second)
	}
	if err := f.kc.Delete(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	f.waitFor(60*time.Second, "the pool to go", func() bool {
		err := f.kc.Get(t.Context(), ctrlclient.ObjectKeyFromObject(pool), &v1alpha1.OutpostPool{})
		return apierrors.IsNotFound(err)
	})
	f.waitNothingLeft(60 * time.Second)
	for _, id := range ids {
		f.waitFor(30*time.Second, "session "+id+" back in the queue", func() bool {
			e := f.queueEntry(id)
			return e.Status.Phase == api.PhasePending && e.Status.AcceptorID == nil
		})
		if s := f.session(id); api.IsFinal(s.Status.Status) {
			t.Errorf("session %s ended with its pool: %+v", id, s.Status)
		}
	}
}

// TestOperatorKill9Adopts kills the operator with SIGKILL while its
// sessions run a call, and starts another: it adopts their pods (none is
// made again), the calls finish, each step ran once, and nothing is left.
func TestOperatorKill9Adopts(t *testing.T) {
	requireOperator(t)
	t.Parallel()
	f := newFixture(t)
	token := f.outpost("durable")
	w := f.watch()
	f.pool("durable", "durable", token, nil)
	op := f.operator()
	gate := t.TempDir()
	var ids []string
	for i := range 3 {
		marks := filepath.Join(gate, fmt.Sprintf("marks-%d", i))
		ids = append(ids, f.scriptSession("durable", fmt.Sprintf("d%d", i),
			fmt.Sprintf("echo first >> %s; while [ ! -e %s/release ]; do sleep 0.05; done", marks, gate),
			fmt.Sprintf("echo second >> %s", marks)))
	}
	f.waitFor(90*time.Second, "every session's first call to run", func() bool {
		for i := range ids {
			if _, err := os.Stat(filepath.Join(gate, fmt.Sprintf("marks-%d", i))); err != nil {
				return false
			}
		}
		return true
	})
	op.kill9()
	f.operator()
	if err := os.WriteFile(filepath.Join(gate, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		f.waitFinished(id, 120*time.Second)
	}
	for i, id := range ids {
		b, _ := os.ReadFile(filepath.Join(gate, fmt.Sprintf("marks-%d", i)))
		if string(b) != "first\nsecond\n" {
			t.Errorf("session %s ran its steps as %q, want each once", id, b)
		}
		if n := w.podsOf(id); n != 1 {
			t.Errorf("session %s had %d pods, want its first one adopted", id, n)
		}
	}
	f.waitNothingLeft(60 * time.Second)
	if n := len(f.kubelet.Runs()); n != len(ids) {
		t.Errorf("%d container starts, want %d", n, len(ids))
	}
}

// TestSuspendResumeKeepsVolume: with FilesystemSnapshot the session's
// workspace is a PersistentVolumeClaim that outlives the suspend (its pod
// goes, the claim stays), and the resumed session's pod mounts the same
// claim: a file written before the suspend, and one put on the volume
// while it was suspended, are both there for its next step.
func TestSuspendResumeKeepsVolume(t *testing.T) {
	requireOperator(t)
	t.Parallel()
	f := newFixture(t)
	token := f.outpost("keep")
	f.pool("keep", "keep", token, func(p *v1alpha1.OutpostPool) {
		p.Spec.Resume.Policy = v1alpha1.ResumeFilesystemSnapshot
	})
	f.operator()
	id := f.externalSession("keep", "suspend me")
	f.waitStatus(id, api.StatusRunning, 90*time.Second)
	cwd := strings.TrimSpace(strings.SplitN(f.exec(id, "pwd; echo before-the-suspend > kept.txt"), "\n", 2)[0])
	if !strings.HasPrefix(cwd, "/work/") {
		t.Fatalf("the session works in %q, want a directory of the volume at /work", cwd)
	}
	claimName := objectName("outpost-work", id)
	var pvc corev1.PersistentVolumeClaim
	if err := f.kc.Get(t.Context(), ctrlclient.ObjectKey{Namespace: f.ns, Name: claimName}, &pvc); err != nil {
		t.Fatalf("the session's claim %s: %v", claimName, err)
	}
	firstPod := f.podOf(id)
	if v := workVolume(firstPod); v == nil || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != claimName {
		t.Fatalf("pod %s's workspace volume %+v, want the claim %s", firstPod.Name, v, claimName)
	}

	if _, err := f.admin.Sessions.Suspend(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(id, api.StatusSuspended, 60*time.Second)
	f.waitFor(60*time.Second, "the suspended session's pod to go", func() bool {
		pods, _, _ := f.managed()
		return len(pods) == 0
	})
	var kept corev1.PersistentVolumeClaim
	if err := f.kc.Get(t.Context(), ctrlclient.ObjectKeyFromObject(&pvc), &kept); err != nil || kept.UID != pvc.UID || kept.DeletionTimestamp != nil {
		t.Fatalf("the claim after the suspend: %v %+v", err, kept.ObjectMeta)
	}
	hostDir := filepath.Join(f.kubelet.ClaimDir(f.ns, claimName, pvc.UID), strings.TrimPrefix(cwd, "/work/"))
	if err := os.WriteFile(filepath.Join(hostDir, "while-suspended.txt"), []byte("on-the-volume\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	if _, err := f.admin.Sessions.Resume(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(id, api.StatusRunning, 90*time.Second)
	got := f.exec(id, "cat kept.txt while-suspended.txt")
	if !strings.Contains(got, "before-the-suspend") || !strings.Contains(got, "on-the-volume") {
		t.Errorf("the resumed workspace has:\n%s", got)
	}
	// The resumed remote found the workspace still the snapshot on the
	// volume and downloaded nothing (which is also why the file written on
	// the volume while suspended is there: a download would have replaced
	// the workspace with the snapshot).
	inPlace := false
	for _, ev := range f.events(id) {
		var info api.SnapshotInfo
		if ev.Type == api.EventRestore && json.Unmarshal(ev.Value, &info) == nil && info.InPlace {
			inPlace = true
		}
	}
	if !inPlace {
		t.Error("no restore event says the snapshot was kept in place on the volume")
	}
	second := f.podOf(id)
	if second.UID == firstPod.UID {
		t.Error("the resumed session kept its first pod")
	}
	if v := workVolume(second); v == nil || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != claimName {
		t.Errorf("the resumed pod's workspace volume %+v, want the claim %s", v, claimName)
	}
	f.tool(id, "end_session", map[string]any{})
	f.waitFor(60*time.Second, "the session to end", func() bool { return api.IsFinal(f.session(id).Status.Status) })
	f.waitNothingLeft(60 * time.Second)
}

// podOf is the session's live pod.
func (f *fixture) podOf(id string) *corev1.Pod {
	f.t.Helper()
	var pod *corev1.Pod
	f.waitFor(30*time.Second, "session "+id+"'s pod", func() bool {
		pods, _, _ := f.managed()
		for i := range pods {
			if pods[i].Labels[labelSession] == id && pods[i].DeletionTimestamp == nil {
				pod = &pods[i]
				return true
			}
		}
		return false
	})
	return pod
}

func workVolume(p *corev1.Pod) *corev1.Volume {
	for i := range p.Spec.Volumes {
		if p.Spec.Volumes[i].Name == "outpost-work" {
			return &p.Spec.Volumes[i]
		}
	}
	return nil
}

// TestAPIURLNotAllowed: a pool whose apiUrl the operator's allow-list
// does not hold is Degraded with the reason, and that URL receives
// nothing — while a pool of the same operator on an allowed URL serves
// its sessions.
func TestAPIURLNotAllowed(t *testing.T) {
	requireOperator(t)
	t.Parallel()
	f := newFixture(t)
	token := f.outpost("allowed")
	var hits atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "nothing here", http.StatusTeapot)
	}))
	t.Cleanup(elsewhere.Close)
	f.operator()
	bad := f.pool("elsewhere", "allowed", token, func(p *v1alpha1.OutpostPool) { p.Spec.APIURL = elsewhere.URL })
	f.waitFor(60*time.Second, "the pool to be Degraded", func() bool {
		p := f.getPool(bad.Name)
		return p.Status.Phase == v1alpha1.PoolDegraded && p.Status.ObservedGeneration == p.Generation
	})
	p := f.getPool(bad.Name)
	var ready *metav1.Condition
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == "Ready" {
			ready = &p.Status.Conditions[i]
		}
	}
	if ready == nil || ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, elsewhere.URL) {
		t.Errorf("Ready condition %+v, want False naming %s", ready, elsewhere.URL)
	}
	f.pool("good", "allowed", token, nil)
	f.waitFinished(f.scriptSession("allowed", "still served", "echo ok"), 90*time.Second)
	if n := hits.Load(); n != 0 {
		t.Errorf("the URL outside the allow-list received %d requests", n)
	}
}

// TestLeaderElection: two operators with --leader-elect claim each
// session once (one pod, one run of each step); when one stops, the
// other serves the next sessions.
func TestLeaderElection(t *testing.T) {
	requireOperator(t)
	t.Parallel()
	f := newFixture(t)
	token := f.outpost("elected")
	w := f.watch()
	f.pool("elected", "elected", token, func(p *v1alpha1.OutpostPool) { p.Spec.MaxConcurrentSessions = ptr(int32(4)) })
	args := []string{"--leader-elect", "--leader-election-id", "kube-test-operator"}
	a, _ := f.operator(args...), f.operator(args...)
	marks := t.TempDir()
	var ids []string
	run := func(n int) {
		var batch []string
		for range n {
			i := len(ids)
			id := f.scriptSession("elected", fmt.Sprintf("e%d", i), fmt.Sprintf("echo ran >> %s/%d", marks, i))
			ids, batch = append(ids, id), append(batch, id)
		}
		for _, id := range batch {
			f.waitFinished(id, 120*time.Second)
		}
	}
	run(4)
	var lease coordinationv1.Lease
	if err := f.kc.Get(t.Context(), ctrlclient.ObjectKey{Namespace: f.ns, Name: "kube-test-operator"}, &lease); err != nil || lease.Spec.HolderIdentity == nil {
		t.Errorf("the leader election lease: %v %+v", err, lease.Spec)
	}
	if err := a.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Logf("first operator: %v", err)
	}
	run(2)
	for i, id := range ids {
		if n := w.podsOf(id); n != 1 {
			t.Errorf("session %s had %d pods, want 1", id, n)
		}
		if b, err := os.ReadFile(filepath.Join(marks, fmt.Sprint(i))); err != nil || string(b) != "ran\n" {
			t.Errorf("session %s's step ran as %q (%v), want once", id, b, err)
		}
	}
	f.waitNothingLeft(60 * time.Second)
}
