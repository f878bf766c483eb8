//go:build !windows

package kubelettest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/outpost-sh/outpost/internal/waitfor"
)

var (
	apiOnce sync.Once
	apiEnv  *envtest.Environment
	apiCfg  *rest.Config
	apiErr  error
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard()) // envtest logs through it
	code := m.Run()
	if apiEnv != nil {
		_ = apiEnv.Stop()
	}
	os.Exit(code)
}

// cluster returns the package's API server (started once) and a client.
func cluster(t *testing.T) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	RequireAssets(t)
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	apiOnce.Do(func() { apiEnv, apiCfg, apiErr = StartAPIServer() })
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	return apiCfg, kubernetes.NewForConfigOrDie(apiCfg)
}

// setup makes a namespace and a kubelet for it, stopped when t ends.
func setup(t *testing.T, opts Options) (kubernetes.Interface, string, *Kubelet) {
	t.Helper()
	cfg, cs := cluster(t)
	ns := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(ns) > 50 {
		ns = ns[:50]
	}
	ns = strings.Trim(ns, "-") + fmt.Sprintf("-%d", time.Now().UnixNano()%100000)
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	opts.Config, opts.Namespaces = cfg, []string{ns}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	k, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return cs, ns, k
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// shPod is a pod whose one container runs script with sh.
func shPod(name, script string) *corev1.Pod {
	never := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"test": name}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &never,
			Containers: []corev1.Container{{Name: "main", Image: "test/sh:1",
				Command: []string{"sh", "-c", script}}},
		},
	}
}

func create(t *testing.T, cs kubernetes.Interface, ns string, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitPod polls the pod until cond holds.
func waitPod(t *testing.T, cs kubernetes.Interface, ns, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && cond(p) {
			return p
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s/%s: timed out waiting for %s (last: %v %+v)", ns, name, what, err, status(p))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func status(p *corev1.Pod) any {
	if p == nil {
		return nil
	}
	return p.Status
}

// waitGone waits until the pod is gone from the API server.
func waitGone(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s/%s is still there (%v)", ns, name, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func phase(want corev1.PodPhase) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool { return p.Status.Phase == want }
}

func terminated(p *corev1.Pod) *corev1.ContainerStateTerminated {
	if len(p.Status.ContainerStatuses) == 0 {
		return nil
	}
	return p.Status.ContainerStatuses[0].State.Terminated
}

// recordStates watches the pod and returns, when asked, the container
// states it went through ("waiting:Reason", "running", "terminated:N").
func recordStates(t *testing.T, cs kubernetes.Interface, ns, name string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(done)
		for {
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error { // the watch cache not ready yet: watch again
					break
				}
				p, ok := ev.Object.(*corev1.Pod)
				if !ok || ev.Type == watch.Deleted || len(p.Status.ContainerStatuses) == 0 {
					continue
				}
				st := p.Status.ContainerStatuses[0].State
				var s string
				switch {
				case st.Waiting != nil:
					s = "waiting:" + st.Waiting.Reason
				case st.Running != nil:
					s = "running"
				case st.Terminated != nil:
					s = fmt.Sprintf("terminated:%d", st.Terminated.ExitCode)
				}
				mu.Lock()
				if len(seen) == 0 || seen[len(seen)-1] != s {
					seen = append(seen, s)
				}
				mu.Unlock()
			}
			w.Stop()
			if ctx.Err() != nil {
				return
			}
			if w, err = cs.CoreV1().Pods(ns).Watch(ctx, opts); err != nil {
				return
			}
		}
	}()
	return func() []string {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// TestPodRuns runs a pod whose command comes from the resolver, with an
// environment of a literal, a $(VAR) reference, a Secret's key and the
// pod's name and namespace, an emptyDir mounted with a working dir inside
// it: it is bound and scheduled, goes through ContainerCreating, running
// and terminated, succeeds, and its output says all of it was right (the
// command is pid 1; $$ in a command is an escaped $, as in Kubernetes).
func TestPodRuns(t *testing.T) {
	t.Parallel()
	cs, ns, k := setup(t, Options{Resolve: Commands(map[string]string{"greet": "/bin/sh"})})
	if _, err := cs.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		StringData: map[string]string{"token": "s3cr3t"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := shPod("runs", "")
	c := &pod.Spec.Containers[0]
	c.Command = []string{"greet", "-c", `echo "lit=$LIT ref=$REF tok=$TOKEN name=$POD_NAME ns=$POD_NS host=$(hostname) cwd=$(pwd) pid=$$$$ arg=$0"; echo data > /scratch/f; ls /scratch`, "$(LIT)-arg"}
	c.WorkingDir = "/scratch/sub"
	c.Env = []corev1.EnvVar{
		{Name: "LIT", Value: "one"},
		{Name: "REF", Value: "$(LIT)-two"},
		{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	states := recordStates(t, cs, ns, "runs")
	create(t, cs, ns, pod)
	p := waitPod(t, cs, ns, "runs", "Succeeded", phase(corev1.PodSucceeded))

	if p.Spec.NodeName != k.NodeName() {
		t.Errorf("nodeName %q, want %q", p.Spec.NodeName, k.NodeName())
	}
	var scheduled bool
	for _, c := range p.Status.Conditions {
		scheduled = scheduled || (c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue)
	}
	cst := p.Status.ContainerStatuses[0]
	if !scheduled || cst.ImageID == "" || cst.State.Terminated.Reason != "Completed" || cst.State.Terminated.StartedAt.IsZero() {
		t.Errorf("status: scheduled %v, %+v", scheduled, cst)
	}
	out := k.Logs(ns, "runs")
	want := fmt.Sprintf("lit=one ref=one-two tok=s3cr3t name=runs ns=%s host=runs cwd=/scratch/sub pid=1 arg=one-arg", ns)
	if !strings.Contains(out, want) || !strings.Contains(out, "f\nsub") {
		t.Errorf("output:\n%s\nwant %q and the emptyDir's files", out, want)
	}
	got := strings.Join(states(), " ")
	if !strings.HasPrefix(got, "waiting:ContainerCreating") || !strings.HasSuffix(got, "terminated:0") {
		t.Errorf("container states %s, want ContainerCreating, (running,) terminated:0", got)
	}
	runs := k.Runs()
	if len(runs) != 1 || runs[0].Argv[0] != "/bin/sh" || runs[0].ExitCode != 0 || runs[0].Finished.IsZero() {
		t.Errorf("runs %+v", runs)
	}
	// The pod is deleted (gracefully, as a controller would): it is
	// finalized, and its emptyDir is removed.
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), "runs", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, cs, ns, "runs")
}

// TestExitCodes: a command's exit code is the container's, the pod
// Failed with reason Error; a command that cannot be found fails the start
// as a runtime does (exit 128, StartError, the reason in the message).
func TestExitCodes(t *testing.T) {
	t.Parallel()
	cs, ns, _ := setup(t, Options{})
	create(t, cs, ns, shPod("three", "echo failing; exit 3"))
	missing := shPod("missing", "")
	missing.Spec.Containers[0].Command = []string{"no-such-command-here"}
	create(t, cs, ns, missing)
	p := waitPod(t, cs, ns, "three", "Failed", phase(corev1.PodFailed))
	if st := terminated(p); st == nil || st.ExitCode != 3 || st.Reason != "Error" {
		t.Errorf("terminated %+v, want exit 3, Error", st)
	}
	p = waitPod(t, cs, ns, "missing", "Failed", phase(corev1.PodFailed))
	if st := terminated(p); st == nil || st.ExitCode != 128 || st.Reason != "StartError" || !strings.Contains(st.Message, "no-such-command-here") {
		t.Errorf("terminated %+v, want exit 128, StartError", st)
	}
}

// TestMissingSecret: a container whose secretKeyRef names a Secret (or a
// key) that does not exist waits with CreateContainerConfigError and the
// kubelet's message; once the Secret has the key, it starts.
func TestMissingSecret(t *testing.T) {
	t.Parallel()
	cs, ns, _ := setup(t, Options{RetryInterval: 50 * time.Millisecond})
	pod := shPod("waits", `echo "got=$TOKEN"`)
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "later"}, Key: "token"}}}}
	create(t, cs, ns, pod)
	configWait := func(msg string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool {
			if len(p.Status.ContainerStatuses) == 0 || p.Status.Phase != corev1.PodPending {
				return false
			}
			w := p.Status.ContainerStatuses[0].State.Waiting
			return w != nil && w.Reason == "CreateContainerConfigError" && w.Message == msg
		}
	}
	waitPod(t, cs, ns, "waits", "the missing Secret", configWait(`secret "later" not found`))
	s, err := cs.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "later"},
		StringData: map[string]string{"other": "x"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPod(t, cs, ns, "waits", "the missing key", configWait(fmt.Sprintf("couldn't find key token in Secret %s/later", ns)))
	s.Data["token"] = []byte("finally")
	if _, err := cs.CoreV1().Secrets(ns).Update(t.Context(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, cs, ns, "waits", "Succeeded", phase(corev1.PodSucceeded))
}

// TestClaimOutlivesPods: a file written on a PersistentVolumeClaim by one
// pod is there for the next pod of the claim after the first is deleted;
// a file on an emptyDir is not. A pod whose claim does not exist yet stays
// unscheduled until it does, and the claim is then Bound.
func TestClaimOutlivesPods(t *testing.T) {
	t.Parallel()
	cs, ns, k := setup(t, Options{RetryInterval: 50 * time.Millisecond})
	withVolumes := func(name, script string) *corev1.Pod {
		p := shPod(name, script)
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "work", MountPath: "/work"}, {Name: "tmp", MountPath: "/work/scratch"}}
		p.Spec.Containers[0].WorkingDir = "/work/workspace"
		p.Spec.Volumes = []corev1.Volume{
			{Name: "work", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "ws"}}},
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}
		return p
	}
	create(t, cs, ns, withVolumes("first", `echo kept > kept; echo lost > /work/scratch/lost; while :; do sleep 0.05; done`))
	waitPod(t, cs, ns, "first", "unscheduled for want of its claim", func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable &&
				c.Message == `persistentvolumeclaim "ws" not found` {
				return p.Spec.NodeName == ""
			}
		}
		return false
	})
	pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "ws"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPod(t, cs, ns, "first", "Running", phase(corev1.PodRunning))
	kept := filepath.Join(k.ClaimDir(ns, "ws", pvc.UID), "workspace", "kept")
	waitFile(t, kept)
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, cs, ns, "first")
	create(t, cs, ns, withVolumes("second", `echo "kept=$(cat kept) lost=$(cat /work/scratch/lost 2>/dev/null || echo none)"`))
	waitPod(t, cs, ns, "second", "Succeeded", phase(corev1.PodSucceeded))
	if out := k.Logs(ns, "second"); !strings.Contains(out, "kept=kept lost=none") {
		t.Errorf("second pod's output:\n%s", out)
	}
	got, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "ws", metav1.GetOptions{})
	if err != nil || got.Status.Phase != corev1.ClaimBound {
		t.Errorf("claim %v %+v, want Bound", err, got.Status)
	}

	// The claim, deleted, stays while a pod refers to it (its protection
	// finalizer), and goes with the pod.
	if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), "ws", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err = cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "ws", metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp == nil {
		t.Fatalf("the deleted claim while the pod exists: %v %+v", err, got.ObjectMeta)
	}
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), "second", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, "the claim to go with its last pod", func() bool {
		_, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "ws", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	waitfor.True(t, path+" to appear", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}

// TestDeletion: a deleted pod's command gets SIGTERM (a shell that traps
// it exits at once); one that ignores it (pid 1 without a handler, as in a
// container) is killed after the grace period; either way the pod is
// finalized, and nothing it started is left running.
func TestDeletion(t *testing.T) {
	t.Parallel()
	cs, ns, k := setup(t, Options{})
	create(t, cs, ns, shPod("traps", `trap 'echo got-term; exit 0' TERM; echo ready; sleep 424242 & while :; do sleep 0.05; done`))
	create(t, cs, ns, shPod("ignores", `sleep 434343 & exec sleep 434344`))
	for _, name := range []string{"traps", "ignores"} {
		waitPod(t, cs, ns, name, "Running", phase(corev1.PodRunning))
	}
	waitfor.True(t, "both commands running", func() bool { return len(processes("424242")) > 0 && len(processes("434344")) > 0 })

	start := time.Now()
	grace := int64(30)
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), "traps", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, cs, ns, "traps")
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a pod that exits on SIGTERM took %s to go", took)
	}
	if out := k.Logs(ns, "traps"); !strings.Contains(out, "got-term") {
		t.Errorf("no SIGTERM seen:\n%s", out)
	}

	start = time.Now()
	grace = 1
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), "ignores", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, cs, ns, "ignores")
	if took := time.Since(start); took < time.Second {
		t.Errorf("a pod that ignores SIGTERM went after %s, before its grace period of 1s", took)
	}
	waitfor.True(t, "every process of the pods to go", func() bool { return len(processes("42424", "43434")) == 0 })
	exits := map[string]int{}
	for _, r := range k.Runs() {
		exits[r.Pod] = r.ExitCode
	}
	if len(exits) != 2 || exits["traps"] != 0 || exits["ignores"] != 137 {
		t.Errorf("exit codes %v, want traps 0 and ignores 137 (SIGKILL)", exits)
	}
}

// TestRestarts: restartPolicy OnFailure restarts a failing container in
// place (restartCount up, the emptyDir kept) until it succeeds.
func TestRestarts(t *testing.T) {
	t.Parallel()
	cs, ns, k := setup(t, Options{})
	pod := shPod("again", `n=$(cat /s/n 2>/dev/null || echo 0); echo $((n+1)) > /s/n; echo "try $n"; [ "$n" -ge 2 ]`)
	pod.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "s", MountPath: "/s"}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	create(t, cs, ns, pod)
	p := waitPod(t, cs, ns, "again", "Succeeded", phase(corev1.PodSucceeded))
	cst := p.Status.ContainerStatuses[0]
	if cst.RestartCount != 2 || cst.LastTerminationState.Terminated == nil || cst.LastTerminationState.Terminated.ExitCode != 1 {
		t.Errorf("status %+v, want 2 restarts after exit 1", cst)
	}
	if n := len(k.Runs()); n != 3 {
		t.Errorf("%d runs, want 3", n)
	}
}

// TestFailStarts: the next two starts of the matching pods fail on
// purpose with the given code; the third runs its command.
func TestFailStarts(t *testing.T) {
	t.Parallel()
	cs, ns, k := setup(t, Options{})
	k.FailStarts(func(p *corev1.Pod, c string) bool { return p.Labels["group"] == "flaky" && c == "main" }, 2, 7)
	for i := range 3 {
		pod := shPod(fmt.Sprintf("flaky-%d", i), "echo real-run")
		pod.Labels["group"] = "flaky"
		create(t, cs, ns, pod)
		want := corev1.PodFailed
		if i == 2 {
			want = corev1.PodSucceeded
		}
		p := waitPod(t, cs, ns, pod.Name, string(want), phase(want))
		if st := terminated(p); i < 2 && st.ExitCode != 7 {
			t.Errorf("pod %d: %+v, want exit 7", i, st)
		}
	}
	create(t, cs, ns, shPod("other", "echo fine"))
	waitPod(t, cs, ns, "other", "Succeeded", phase(corev1.PodSucceeded))
	if out := k.Logs(ns, "flaky-2"); !strings.Contains(out, "real-run") {
		t.Errorf("the third start did not run its command:\n%s", out)
	}
}

// TestStopKillsEverything: Stop kills every container the kubelet runs
// (and what they started), and returns.
func TestStopKillsEverything(t *testing.T) {
	t.Parallel()
	cs, ns, k := setup(t, Options{})
	for i := range 3 {
		create(t, cs, ns, shPod(fmt.Sprintf("long-%d", i), `sleep 515151 & sleep 515152`))
	}
	waitfor.True(t, "every pod's processes", func() bool { return k.Running() == 3 && len(processes("515152")) >= 6 })
	done := make(chan struct{})
	go func() { k.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Stop did not return")
	}
	if n := k.Running(); n != 0 {
		t.Errorf("%d containers still running after Stop", n)
	}
	waitfor.True(t, "every process to go", func() bool { return len(processes("51515")) == 0 })
}

// TestOtherNodesPods: a pod bound to another node is not run.
func TestOtherNodesPods(t *testing.T) {
	t.Parallel()
	cs, ns, k := setup(t, Options{})
	pod := shPod("elsewhere", "echo ran")
	pod.Spec.NodeName = "another-node"
	create(t, cs, ns, pod)
	create(t, cs, ns, shPod("here", "echo ran"))
	waitPod(t, cs, ns, "here", "Succeeded", phase(corev1.PodSucceeded))
	p, err := cs.CoreV1().Pods(ns).Get(t.Context(), "elsewhere", metav1.GetOptions{})
	if err != nil || p.Status.Phase != corev1.PodPending || len(p.Status.ContainerStatuses) != 0 {
		t.Errorf("another node's pod: %v %+v", err, p.Status)
	}
	for _, r := range k.Runs() {
		if r.Pod == "elsewhere" {
			t.Error("ran another node's pod")
		}
	}
}

// processes lists the pids whose command line contains one of marks.
func processes(marks ...string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		for _, m := range marks {
			if strings.Contains(cmd, m) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
