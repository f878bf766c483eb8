//go:build !windows

package operator

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/outpost-sh/outpost/api"
	outpost "github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

const testImage = "ghcr.io/outpost-sh/outpost-worker:test"

func testPool() *v1alpha1.OutpostPool {
	return &v1alpha1.OutpostPool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns", UID: "pool-uid"},
		Spec:       v1alpha1.OutpostPoolSpec{Outpost: "dev", TokenSecretRef: v1alpha1.SecretKeyRef{Name: "pool-token", Key: "token"}},
	}
}

func testClaim() *api.QueueEntry {
	return &api.QueueEntry{
		Metadata: api.QueueMetadata{SessionID: "ses_Abc123", OutpostID: "out_1"},
		Status:   api.QueueStatus{ConnectToken: "opc_secret", GatewayURL: "wss://gw.example.com/v1/gateway"},
	}
}

var testRender = Render{OutpostID: "out_1", WorkerImage: testImage}

func envOf(c *corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if _, dup := m[e.Name]; dup {
			panic("duplicate env " + e.Name)
		}
		m[e.Name] = e
	}
	return m
}

func worker(t *testing.T, p *corev1.Pod, name string) *corev1.Container {
	t.Helper()
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == name {
			return &p.Spec.Containers[i]
		}
	}
	t.Fatalf("pod has no container %q: %+v", name, p.Spec.Containers)
	return nil
}

// TestRenderDefaults: an empty template gives the operator's pod: the
// names, labels and owner of the design, restart policy Never, no
// service-account token, the restrictive security context, the worker
// container running direct-serve with the spawn contract, the token only
// through a secretKeyRef, and an emptyDir workspace.
func TestRenderDefaults(t *testing.T) {
	t.Parallel()
	pool, claim := testPool(), testClaim()
	p := RenderPod(pool, claim, testRender)
	if p.Name != PodName(claim.Metadata.SessionID) || p.Namespace != "ns" {
		t.Errorf("pod %s/%s", p.Namespace, p.Name)
	}
	want := map[string]string{LabelManagedBy: ManagedBy, LabelName: NameSession, LabelPool: "pool", LabelSessionID: "ses_Abc123"}
	for k, v := range want {
		if p.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, p.Labels[k], v)
		}
	}
	if p.Annotations[AnnotationOutpostID] != "out_1" {
		t.Errorf("annotations %v", p.Annotations)
	}
	if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != "pool-uid" || !*p.OwnerReferences[0].Controller ||
		!*p.OwnerReferences[0].BlockOwnerDeletion || p.OwnerReferences[0].Kind != "OutpostPool" || p.OwnerReferences[0].APIVersion != "outpost.dev/v1alpha1" {
		t.Errorf("owner references %+v", p.OwnerReferences)
	}
	if p.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restart policy %q", p.Spec.RestartPolicy)
	}
	if a := p.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Error("the service-account token is mounted")
	}
	sc := p.Spec.SecurityContext
	if sc == nil || !*sc.RunAsNonRoot || *sc.RunAsUser != 10001 || *sc.RunAsGroup != 10001 || *sc.FSGroup != 10001 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", sc)
	}
	if len(p.Spec.Containers) != 1 {
		t.Fatalf("containers %+v", p.Spec.Containers)
	}
	c := worker(t, p, DefaultContainerName)
	if csc := c.SecurityContext; csc == nil || *csc.AllowPrivilegeEscalation || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context %+v", csc)
	}
	if c.Image != testImage || !slices.Equal(c.Command, []string{"outpost"}) ||
		!slices.Equal(c.Args, []string{"worker", "start", "--session", "ses_Abc123", "--dir", "/work/workspace", "--data-dir", "/work/data"}) ||
		c.WorkingDir != "/work/workspace" {
		t.Errorf("container %s %v %v in %s", c.Image, c.Command, c.Args, c.WorkingDir)
	}
	env := envOf(c)
	tok := env["OUTPOST_CONNECT_TOKEN"]
	if tok.Value != "" || tok.ValueFrom == nil || tok.ValueFrom.SecretKeyRef == nil ||
		tok.ValueFrom.SecretKeyRef.Name != SecretName("ses_Abc123") || tok.ValueFrom.SecretKeyRef.Key != "token" ||
		tok.ValueFrom.SecretKeyRef.Optional == nil || *tok.ValueFrom.SecretKeyRef.Optional {
		t.Errorf("OUTPOST_CONNECT_TOKEN %+v", tok)
	}
	if env["OUTPOST_GATEWAY_URL"].Value != claim.Status.GatewayURL || env["OUTPOST_SESSION_ID"].Value != "ses_Abc123" ||
		env["OUTPOST_WORKER_ISOLATION"].Value != "none" {
		t.Errorf("env %+v", env)
	}
	if _, ok := env["OUTPOST_WORKER_REMOTE_SHA"]; ok {
		t.Error("OUTPOST_WORKER_REMOTE_SHA set for an entry that pins no build")
	}
	if len(p.Spec.Volumes) != 1 || p.Spec.Volumes[0].Name != WorkVolume || p.Spec.Volumes[0].EmptyDir == nil {
		t.Errorf("volumes %+v", p.Spec.Volumes)
	}
	if len(c.VolumeMounts) != 1 || !isWorkMount(c.VolumeMounts[0]) {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
	if b, _ := json.Marshal(p); strings.Contains(string(b), "opc_secret") {
		t.Errorf("the connect token is in the pod: %s", b)
	}
}

// TestRenderLayers: the template's sidecars, labels, env, resources and
// security context survive; the operator's fields win over the template's
// (labels, owned env under either name, the work volume and mount, restart
// policy); the overrides win over both.
func TestRenderLayers(t *testing.T) {
	t.Parallel()
	pool, claim := testPool(), testClaim()
	sha := "abc123"
	claim.Spec.RemoteBinarySHA = &sha
	pool.Spec.Worker.ContainerName = "main"
	pool.Spec.Worker.Template = corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      map[string]string{"team": "a", LabelPool: "forged", LabelSessionID: "forged"},
			Annotations: map[string]string{"note": "x"},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyAlways,
			AutomountServiceAccountToken: ptr.To(true),
			ServiceAccountName:           "runner",
			SecurityContext:              &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)},
			Volumes: []corev1.Volume{
				{Name: WorkVolume, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}},
				{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			Containers: []corev1.Container{
				{Name: "sidecar", Image: "proxy:1", Env: []corev1.EnvVar{{Name: "OUTPOST_SESSION_ID", Value: "sidecar's"}}},
				{Name: "main", Image: "custom:2", Command: []string{"sh"},
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}},
					Env: []corev1.EnvVar{
						{Name: "KEEP", Value: "1"},
						{Name: "OUTPOST_CONNECT_TOKEN", Value: "forged"},
						{Name: "DEVIN_REMOTE_SESSION_TOKEN", Value: "forged"},
						{Name: "DEVIN_OUTPOST_GATEWAY_URL", Value: "wss://evil"},
						{Name: "OUTPOST_WORKER_REMOTE_SHA", Value: "forged"},
						{Name: "OUTPOST_WORKER_ISOLATION", Value: "bwrap"},
					},
					VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}, {Name: "other", MountPath: "/work/"}},
				},
			},
		},
	}
	p := RenderPod(pool, claim, testRender)
	if p.Labels["team"] != "a" || p.Labels[LabelPool] != "pool" || p.Labels[LabelSessionID] != "ses_Abc123" {
		t.Errorf("labels %v", p.Labels)
	}
	if p.Annotations["note"] != "x" || p.Annotations[AnnotationOutpostID] != "out_1" || p.Annotations["kubectl.kubernetes.io/default-container"] != "main" {
		t.Errorf("annotations %v", p.Annotations)
	}
	if p.Spec.RestartPolicy != corev1.RestartPolicyNever || !*p.Spec.AutomountServiceAccountToken || p.Spec.ServiceAccountName != "runner" {
		t.Errorf("spec %+v", p.Spec)
	}
	if p.Spec.SecurityContext.RunAsNonRoot != nil || *p.Spec.SecurityContext.RunAsUser != 1000 {
		t.Errorf("the template's security context was changed: %+v", p.Spec.SecurityContext)
	}
	if len(p.Spec.Containers) != 2 || p.Spec.Containers[0].Name != "sidecar" || p.Spec.Containers[0].Env[0].Value != "sidecar's" {
		t.Errorf("the sidecar changed: %+v", p.Spec.Containers)
	}
	c := worker(t, p, "main")
	if c.SecurityContext != nil {
		t.Errorf("container security context added to a template that set the pod's: %+v", c.SecurityContext)
	}
	if c.Image != "custom:2" || !slices.Equal(c.Command, []string{"outpost"}) || c.Resources.Limits.Cpu().String() != "2" {
		t.Errorf("container %s %v %v", c.Image, c.Command, c.Resources)
	}
	env := envOf(c)
	for _, n := range []string{"DEVIN_REMOTE_SESSION_TOKEN", "DEVIN_OUTPOST_GATEWAY_URL"} {
		if _, ok := env[n]; ok {
			t.Errorf("the template's %s survived", n)
		}
	}
	if env["KEEP"].Value != "1" || env["OUTPOST_CONNECT_TOKEN"].ValueFrom == nil || env["OUTPOST_CONNECT_TOKEN"].Value != "" ||
		env["OUTPOST_WORKER_REMOTE_SHA"].Value != "abc123" || env["OUTPOST_WORKER_ISOLATION"].Value != "bwrap" ||
		env["OUTPOST_GATEWAY_URL"].Value != claim.Status.GatewayURL {
		t.Errorf("env %+v", env)
	}
	var work []corev1.Volume
	for _, v := range p.Spec.Volumes {
		if v.Name == WorkVolume {
			work = append(work, v)
		}
	}
	if len(work) != 1 || work[0].EmptyDir == nil || work[0].HostPath != nil || len(p.Spec.Volumes) != 2 {
		t.Errorf("volumes %+v", p.Spec.Volumes)
	}
	if len(c.VolumeMounts) != 2 || c.VolumeMounts[0].Name != "cache" || !isWorkMount(c.VolumeMounts[1]) {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
	// The template is not changed by rendering.
	if pool.Spec.Worker.Template.Spec.Containers[1].Image != "custom:2" || len(pool.Spec.Worker.Template.Spec.Containers[1].Env) != 6 {
		t.Error("rendering changed the pool's template")
	}

	pool.Spec.Worker.Overrides = v1alpha1.WorkerOverrides{Image: "override:3", Command: []string{"/entry.sh"}, Args: []string{"a"}}
	c = worker(t, RenderPod(pool, claim, testRender), "main")
	if c.Image != "override:3" || !slices.Equal(c.Command, []string{"/entry.sh"}) || !slices.Equal(c.Args, []string{"a"}) {
		t.Errorf("overrides: %s %v %v", c.Image, c.Command, c.Args)
	}
}

// TestWorkerImage: overrides.image, else the template container's, else
// the operator's default.
func TestWorkerImage(t *testing.T) {
	t.Parallel()
	pool := testPool()
	if got := WorkerImage(pool, "def"); got != "def" {
		t.Errorf("empty pool: %q", got)
	}
	pool.Spec.Worker.Template.Spec.Containers = []corev1.Container{{Name: "other", Image: "o:1"}, {Name: DefaultContainerName}}
	if got := WorkerImage(pool, "def"); got != "def" {
		t.Errorf("template container without image: %q", got)
	}
	pool.Spec.Worker.Template.Spec.Containers[1].Image = "tmpl:1"
	if got := WorkerImage(pool, "def"); got != "tmpl:1" {
		t.Errorf("template image: %q", got)
	}
	pool.Spec.Worker.Overrides.Image = "ovr:1"
	if got := WorkerImage(pool, "def"); got != "ovr:1" {
		t.Errorf("override: %q", got)
	}
	if c := worker(t, RenderPod(pool, testClaim(), testRender), DefaultContainerName); c.Image != "ovr:1" {
		t.Errorf("rendered image %q", c.Image)
	}
}

// TestRenderSecretAndVolume: the Secret holds the connect token and
// nothing else; FilesystemSnapshot mounts the session's claim, of the
// pool's size and class.
func TestRenderSecretAndVolume(t *testing.T) {
	t.Parallel()
	pool, claim := testPool(), testClaim()
	s := RenderSecret(pool, claim.Metadata.SessionID, claim.Status.ConnectToken, "", testRender)
	if s.Name != SecretName(claim.Metadata.SessionID) || s.Type != corev1.SecretTypeOpaque || len(s.Data) != 1 ||
		string(s.Data["token"]) != "opc_secret" || len(s.StringData) != 0 || s.Labels[LabelSessionID] != "ses_Abc123" ||
		len(s.OwnerReferences) != 1 {
		t.Errorf("secret %+v", s)
	}

	v := RenderVolume(pool, claim.Metadata.SessionID, testRender)
	if v.Name != VolumeName(claim.Metadata.SessionID) || v.Spec.Resources.Requests.Storage().String() != "20Gi" ||
		v.Spec.StorageClassName != nil || !slices.Equal(v.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("volume %+v", v)
	}
	size := resource.MustParse("5Gi")
	pool.Spec.Resume = v1alpha1.ResumeSpec{Policy: v1alpha1.ResumeFilesystemSnapshot, VolumeSize: &size, StorageClassName: ptr.To("fast")}
	v = RenderVolume(pool, claim.Metadata.SessionID, testRender)
	if v.Spec.Resources.Requests.Storage().String() != "5Gi" || *v.Spec.StorageClassName != "fast" {
		t.Errorf("volume %+v", v.Spec)
	}
	p := RenderPod(pool, claim, testRender)
	if len(p.Spec.Volumes) != 1 || p.Spec.Volumes[0].PersistentVolumeClaim == nil ||
		p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != v.Name || p.Spec.Volumes[0].EmptyDir != nil {
		t.Errorf("volumes %+v", p.Spec.Volumes)
	}
}

// TestVolumeFate: gone or terminated deletes, suspended keeps for the
// resume, a session going on or an unreadable queue leaves it alone.
func TestVolumeFate(t *testing.T) {
	t.Parallel()
	entry := func(status string) *api.QueueEntry {
		return &api.QueueEntry{Status: api.QueueStatus{SessionStatus: status}}
	}
	for _, tc := range []struct {
		e    *api.QueueEntry
		err  error
		want fate
	}{
		{nil, &outpost.Error{StatusCode: 404}, fateDelete},
		{entry(api.QueueSessionTerminated), nil, fateDelete},
		{entry(api.QueueSessionSuspended), nil, fateSuspend},
		{entry(api.QueueSessionRunning), nil, fateKeep},
		{entry(api.QueueSessionPending), nil, fateKeep},
		{nil, errors.New("connection refused"), fateKeep},
		{nil, &outpost.Error{StatusCode: 500}, fateKeep},
	} {
		if got := volumeFate(tc.e, tc.err); got != tc.want {
			t.Errorf("volumeFate(%+v, %v) = %v, want %v", tc.e, tc.err, got, tc.want)
		}
	}
}

func isWorkMount(m corev1.VolumeMount) bool {
	return m.Name == WorkVolume && m.MountPath == "/work" && !m.ReadOnly && m.SubPath == ""
}
