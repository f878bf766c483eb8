package operator

import (
	"net/url"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// The worker container's defaults (the spawn contract of direct-serve
// mode, internal/worker/direct.go).
const (
	// DefaultContainerName is the worker container's name when
	// spec.worker.containerName is empty.
	DefaultContainerName = "outpost-remote"
	// WorkVolume is the name of the session's workspace volume, mounted at
	// WorkDir: an emptyDir, or the session's PersistentVolumeClaim with
	// FilesystemSnapshot.
	WorkVolume = "outpost-work"
	// WorkDir is where WorkVolume is mounted; the workspace and the
	// worker's data dir live under it.
	WorkDir = "/work"
	// TokenKey is the key of the per-session Secret holding the connect
	// token.
	TokenKey = "token"
	// DefaultRestartLimit is spec.restartLimit when unset.
	DefaultRestartLimit = 5
	// runAs is the uid, gid and fsGroup of the default security context.
	runAs = 10001
	// defaultContainerAnnotation makes kubectl logs and exec pick the
	// worker container.
	defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"
	// backendName is the machine backend reported on transcripts.
	backendName = "kubernetes"
)

// DefaultVolumeSize is resume.volumeSize when unset.
var DefaultVolumeSize = resource.MustParse("20Gi")

var (
	workspaceDir = WorkDir + "/workspace"
	dataDir      = WorkDir + "/data"
	// ownedEnv are the worker container's variables the operator writes:
	// the template's, under either name, are removed first.
	ownedEnv = []api.EnvVar{api.EnvSessionToken, api.EnvConnectToken, api.EnvGatewayURL, api.EnvSessionID, api.EnvWorkerRemoteSHA}
)

// ContainerName is the pool's worker container name.
func ContainerName(pool *v1alpha1.OutpostPool) string {
	if n := pool.Spec.Worker.ContainerName; n != "" {
		return n
	}
	return DefaultContainerName
}

// RestartLimit is the pool's spec.restartLimit, defaulted.
func RestartLimit(pool *v1alpha1.OutpostPool) int {
	if l := pool.Spec.RestartLimit; l != nil && *l >= 0 {
		return int(*l)
	}
	return DefaultRestartLimit
}

// WorkerImage is the image of the pool's worker container:
// spec.worker.overrides.image, else the template container's, else
// defaultImage (the operator's --worker-image).
func WorkerImage(pool *v1alpha1.OutpostPool, defaultImage string) string {
	if img := pool.Spec.Worker.Overrides.Image; img != "" {
		return img
	}
	name := ContainerName(pool)
	for _, c := range pool.Spec.Worker.Template.Spec.Containers {
		if c.Name == name && c.Image != "" {
			return c.Image
		}
	}
	return defaultImage
}

// WorkerArgs are the worker container's default arguments for a session:
// `outpost worker start` in direct-serve mode.
func WorkerArgs(sessionID string) []string {
	return []string{"worker", "start", "--session", sessionID, "--dir", workspaceDir, "--data-dir", dataDir}
}

// Render is what rendering a session's objects needs besides the pool and
// the claim.
type Render struct {
	// OutpostID is the outpost served (AnnotationOutpostID).
	OutpostID string
	// WorkerImage is the operator's default worker image.
	WorkerImage string
	// EgressProxy says the operator serves the egress proxy: restricted
	// sessions of a pool that names it (spec.network.egressProxy) reach
	// names through it.
	EgressProxy bool
}

// Labels are the operator's labels of a session's objects.
func Labels(pool *v1alpha1.OutpostPool, sessionID string) map[string]string {
	return map[string]string{
		LabelManagedBy: ManagedBy,
		LabelName:      NameSession,
		LabelPool:      pool.Name,
		LabelSessionID: sessionID,
	}
}

// OwnerReference is the reference every object of the pool carries: the
// pool, as controller, blocking its deletion until the object is gone.
func OwnerReference(pool *v1alpha1.OutpostPool) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         v1alpha1.GroupVersion.String(),
		Kind:               "OutpostPool",
		Name:               pool.Name,
		UID:                pool.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// OwnedBy reports whether obj's owner references name the pool by UID.
func OwnedBy(obj metav1.Object, pool *v1alpha1.OutpostPool) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID == pool.UID {
			return true
		}
	}
	return false
}

// meta is the operator's metadata of a session's object named name.
func meta(pool *v1alpha1.OutpostPool, name, sessionID string, rd Render) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name:            name,
		Namespace:       pool.Namespace,
		Labels:          Labels(pool, sessionID),
		OwnerReferences: []metav1.OwnerReference{OwnerReference(pool)},
	}
	if rd.OutpostID != "" {
		m.Annotations = map[string]string{AnnotationOutpostID: rd.OutpostID}
	}
	return m
}

// RenderPod renders the Pod of the claimed session in three layers: the
// pool's template; then the operator's fields (metadata, owner, restart
// policy Never, the worker container with the spawn contract's environment
// and the workspace volume, and defaults the template leaves unset: no
// service-account token, a restrictive security context); then
// spec.worker.overrides (image, command, args). It is pure: the API server
// validates the result.
func RenderPod(pool *v1alpha1.OutpostPool, claim *api.QueueEntry, rd Render) *corev1.Pod {
	id := claim.Metadata.SessionID
	tmpl := pool.Spec.Worker.Template.DeepCopy()
	m := meta(pool, PodName(id), id, rd)
	m.Labels = merge(tmpl.Labels, m.Labels)
	m.Annotations = merge(tmpl.Annotations, m.Annotations)
	pod := &corev1.Pod{ObjectMeta: m, Spec: tmpl.Spec}
	spec := &pod.Spec
	name := ContainerName(pool)
	if _, ok := pod.Annotations[defaultContainerAnnotation]; !ok {
		pod.Annotations = merge(pod.Annotations, map[string]string{defaultContainerAnnotation: name})
	}

	spec.RestartPolicy = corev1.RestartPolicyNever
	if spec.AutomountServiceAccountToken == nil {
		spec.AutomountServiceAccountToken = ptr.To(false)
	}

	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		// First, so that tools picking "the" container find it.
		spec.Containers = slices.Insert(spec.Containers, 0, corev1.Container{Name: name})
		i = 0
	}
	c := &spec.Containers[i]

	// A template that sets no security context at all gets a restrictive
	// one; one that sets either level has taken charge of both.
	if spec.SecurityContext == nil && c.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To[int64](runAs),
			RunAsGroup:     ptr.To[int64](runAs),
			FSGroup:        ptr.To[int64](runAs),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
		c.SecurityContext = &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
	}

	// The workspace volume is the operator's.
	vol := corev1.Volume{Name: WorkVolume}
	if pool.Spec.Resume.Policy == v1alpha1.ResumeFilesystemSnapshot {
		vol.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: VolumeName(id)}
	} else {
		vol.EmptyDir = &corev1.EmptyDirVolumeSource{}
	}
	spec.Volumes = append(slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == WorkVolume }), vol)
	c.VolumeMounts = append(slices.DeleteFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool {
		return v.Name == WorkVolume || strings.TrimRight(v.MountPath, "/") == WorkDir
	}), corev1.VolumeMount{Name: WorkVolume, MountPath: WorkDir})

	c.Image = WorkerImage(pool, rd.WorkerImage)
	c.Command = []string{"outpost"}
	c.Args = WorkerArgs(id)
	if o := pool.Spec.Worker.Overrides; len(o.Command) > 0 {
		c.Command = slices.Clone(o.Command)
	}
	if o := pool.Spec.Worker.Overrides; len(o.Args) > 0 {
		c.Args = slices.Clone(o.Args)
	}
	c.WorkingDir = workspaceDir
	c.Env = workerEnv(c.Env, pool, claim, proxied(pool, claim, rd))
	applyRequirements(spec, c, claim.Spec.Requirements)
	return pod
}

// GPUResource is the extended resource a session's requirements.gpus asks
// for: NVIDIA's device plugin's.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// applyRequirements maps a session's requirements onto its pod, over what
// the template says: its labels join the node selector, its GPUs become
// a limit of GPUResource, its CPUs and memory requests of at least that
// much. gpu_model and gpu_memory_gib have no portable node label (GPU
// feature discovery's nvidia.com/gpu.product is an exact name, not a
// pattern): a pool that serves them selects its nodes in its template.
func applyRequirements(spec *corev1.PodSpec, c *corev1.Container, r *api.Requirements) {
	if r.IsZero() {
		return
	}
	if len(r.Labels) > 0 {
		spec.NodeSelector = merge(spec.NodeSelector, r.Labels)
	}
	atLeast := func(list *corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
		if *list == nil {
			*list = corev1.ResourceList{}
		}
		if cur, ok := (*list)[name]; !ok || cur.Cmp(q) < 0 {
			(*list)[name] = q
		}
	}
	if n := r.MinGPUs(); n > 0 {
		atLeast(&c.Resources.Limits, GPUResource, *resource.NewQuantity(int64(n), resource.DecimalSI))
	}
	if r.CPUs > 0 {
		atLeast(&c.Resources.Requests, corev1.ResourceCPU, *resource.NewQuantity(int64(r.CPUs), resource.DecimalSI))
	}
	if r.MemoryGiB > 0 {
		atLeast(&c.Resources.Requests, corev1.ResourceMemory, *resource.NewQuantity(int64(r.MemoryGiB)<<30, resource.BinarySI))
	}
}

// workerEnv is the template container's env without the variables the
// operator owns, then the spawn contract's: the connect token only through
// a secretKeyRef to the session's Secret. A proxied session's proxy
// variables read its proxy URL from the Secret too; NO_PROXY keeps the
// control plane (and loopback) off the proxy.
func workerEnv(env []corev1.EnvVar, pool *v1alpha1.OutpostPool, claim *api.QueueEntry, proxy bool) []corev1.EnvVar {
	id := claim.Metadata.SessionID
	owned := map[string]bool{}
	for _, v := range ownedEnv {
		for _, n := range v.Names() {
			owned[n] = true
		}
	}
	for _, n := range append(slices.Clone(ProxyVars), NoProxyVars...) {
		owned[n] = true
	}
	// The template's NO_PROXY entries are kept (a host its NetworkPolicy
	// reaches directly, such as a separate host of remote builds).
	var extraNoProxy []string
	for _, e := range env {
		if slices.Contains(NoProxyVars, e.Name) && e.Value != "" {
			extraNoProxy = append(extraNoProxy, e.Value)
		}
	}
	env = slices.DeleteFunc(slices.Clone(env), func(e corev1.EnvVar) bool { return owned[e.Name] })
	isolation := slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == api.EnvWorkerIsolation.Name })
	env = append(env,
		corev1.EnvVar{Name: api.EnvSessionToken.Name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: SecretName(id)}, Key: TokenKey, Optional: ptr.To(false)}}},
		corev1.EnvVar{Name: api.EnvGatewayURL.Name, Value: claim.Status.GatewayURL},
		corev1.EnvVar{Name: api.EnvSessionID.Name, Value: id},
	)
	if sha := claim.Spec.RemoteBinarySHA; sha != nil && *sha != "" {
		env = append(env, corev1.EnvVar{Name: api.EnvWorkerRemoteSHA.Name, Value: *sha})
	}
	if !isolation {
		// The pod is the isolation boundary.
		env = append(env, corev1.EnvVar{Name: api.EnvWorkerIsolation.Name, Value: "none"})
	}
	if proxy {
		for _, n := range ProxyVars {
			env = append(env, corev1.EnvVar{Name: n, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: SecretName(id)}, Key: ProxyURLKey, Optional: ptr.To(false)}}})
		}
		noProxy := noProxyList(claim.Status.GatewayURL, extraNoProxy)
		for _, n := range NoProxyVars {
			env = append(env, corev1.EnvVar{Name: n, Value: noProxy})
		}
	}
	return env
}

// ProxyVars are the variables a proxied session's pod gets its proxy URL
// in: the names curl, Go, Python, Node's agents and git read.
// EnvEgressProxy (the last) tells the worker to pass them on to the
// session's remote, whose environment is otherwise clean.
var ProxyVars = []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy", fleet.EnvEgressProxy}

// NoProxyVars are the variables that list what is reached directly.
var NoProxyVars = []string{"NO_PROXY", "no_proxy"}

// noProxyList is NO_PROXY of a proxied pod: loopback, the control
// plane's host, which its NetworkPolicy lets the pod reach directly, and
// the template's entries.
func noProxyList(gatewayURL string, extra []string) string {
	list := []string{"localhost", "127.0.0.1", "::1"}
	if u, err := url.Parse(gatewayURL); err == nil && u.Hostname() != "" {
		list = append(list, u.Hostname())
	}
	for _, x := range extra {
		for _, h := range strings.Split(x, ",") {
			if h = strings.TrimSpace(h); h != "" && !slices.Contains(list, h) {
				list = append(list, h)
			}
		}
	}
	return strings.Join(list, ",")
}

// RenderSecret renders the session's Secret: Opaque, holding the connect
// token under TokenKey and, for a proxied session (proxyURL not empty),
// its proxy URL under ProxyURLKey; nothing else.
func RenderSecret(pool *v1alpha1.OutpostPool, sessionID, token, proxyURL string, rd Render) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: meta(pool, SecretName(sessionID), sessionID, rd),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{TokenKey: []byte(token)},
	}
	if proxyURL != "" {
		s.Data[ProxyURLKey] = []byte(proxyURL)
	}
	return s
}

// RenderVolume renders the session's PersistentVolumeClaim
// (FilesystemSnapshot): ReadWriteOnce, of resume.volumeSize and
// resume.storageClassName.
func RenderVolume(pool *v1alpha1.OutpostPool, sessionID string, rd Render) *corev1.PersistentVolumeClaim {
	size := DefaultVolumeSize
	if s := pool.Spec.Resume.VolumeSize; s != nil {
		size = s.DeepCopy()
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: meta(pool, VolumeName(sessionID), sessionID, rd),
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			StorageClassName: pool.Spec.Resume.StorageClassName,
		},
	}
}

// merge returns a copy of base with over's entries written over it; nil
// when both are empty.
func merge(base, over map[string]string) map[string]string {
	if len(base)+len(over) == 0 {
		return nil
	}
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}
