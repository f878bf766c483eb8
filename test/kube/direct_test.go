//go:build !windows

package kube

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// designPod is the Pod the design gives a claimed session (without the
// owner reference and security context): `outpost worker start --session`
// in direct-serve mode, the connect token from the session's Secret, the
// workspace on an emptyDir at /work.
func designPod(name, secret, id, gatewayURL string) *corev1.Pod {
	falseV := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelManagedBy: "kube-test", labelSession: id}},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &falseV,
			Containers: []corev1.Container{{
				Name: "outpost-remote", Image: workerImage,
				Command:    []string{"outpost"},
				Args:       []string{"worker", "start", "--session", id, "--dir", "/work/workspace", "--data-dir", "/work/data"},
				WorkingDir: "/work/workspace",
				Env: []corev1.EnvVar{
					{Name: envConnect, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "token", Optional: &falseV}}},
					{Name: api.EnvGatewayURL.Name, Value: gatewayURL},
					{Name: api.EnvSessionID.Name, Value: id},
					{Name: api.EnvWorkerIsolation.Name, Value: "none"},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "outpost-work", MountPath: "/work"}},
			}},
			Volumes: []corev1.Volume{{Name: "outpost-work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

// serveDirect does what the operator does for one session, by hand:
// claims it, makes its Secret and Pod; the kubelet runs the pod.
func (f *fixture) serveDirect(machine *client.Client, acceptor, id string) {
	f.t.Helper()
	ctx := f.t.Context()
	e, err := machine.Queue.Claim(ctx, id, acceptor)
	if err != nil {
		f.t.Fatal(err)
	}
	name := "direct-" + strings.ReplaceAll(strings.ToLower(id), "_", "-")
	if _, err := f.cs.CoreV1().Secrets(f.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
		StringData: map[string]string{"token": e.Status.ConnectToken}}, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.cs.CoreV1().Pods(f.ns).Create(ctx, designPod(name, name, id, e.Status.GatewayURL), metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// TestKubeletServesDesignPod checks the harness without the operator:
// a session claimed by the test, given the design's Secret and Pod, is
// served by `outpost worker start --session` run by the test kubelet — the
// session finishes, the pod succeeds, and the step ran in the pod's
// workspace with the connect token from the Secret.
func TestKubeletServesDesignPod(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	token := f.outpost("direct")
	machine, err := client.New(f.url, token)
	if err != nil {
		t.Fatal(err)
	}
	id := f.scriptSession("direct", "by hand", `echo "in=$(pwd)"; echo hello > made.txt; cat made.txt`)
	f.serveDirect(machine, "kube-test-acceptor", id)
	f.waitFinished(id, 60*time.Second)
	name := "direct-" + strings.ReplaceAll(strings.ToLower(id), "_", "-")
	f.waitFor(30*time.Second, "the pod to succeed", func() bool {
		p, err := f.cs.CoreV1().Pods(f.ns).Get(t.Context(), name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodSucceeded
	})
	tr := f.transcript(id)
	if !strings.Contains(tr, "in=/work/workspace") || !strings.Contains(tr, "hello") {
		t.Errorf("the step did not run in the pod's workspace:\n%s", tr)
	}
	runs := f.kubelet.Runs()
	if len(runs) != 1 || runs[0].Argv[0] != binary {
		t.Fatalf("runs %+v", runs)
	}
	var connect string
	for _, kv := range runs[0].Env {
		if v, ok := strings.CutPrefix(kv, envConnect+"="); ok {
			connect = v
		}
	}
	if connect == "" || connect == token {
		t.Errorf("the container's connect token %q: want the claim's, not the outpost's token", connect)
	}
}
