package operator

// This file stands in for the pod runner (names.go, pod.go, runner.go,
// volume.go) until it is merged: the same names and signatures, with a
// runner that makes no pods. It keeps the sessions it holds in memory, per
// pool, as if they were pods, so that restarts adopt them. Delete it when
// the runner lands.

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outpost-sh/outpost/api"
	outpost "github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// Labels and values of what the runner makes (names.go).
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "outpost-operator"
	LabelPool      = "outpost.dev/pool"
	LabelSessionID = "outpost.dev/session-id"
)

// RunnerMetrics are the metrics a pool's runner keeps.
type RunnerMetrics struct {
	PodsActive       prometheus.Gauge
	PodsGivenUp      prometheus.Counter
	ProvisionSeconds prometheus.Observer
}

// RunnerConfig configures a pool's runner.
type RunnerConfig struct {
	Kube                               client.Client
	Pool                               func() *v1alpha1.OutpostPool
	API                                *outpost.Client
	AcceptorID, OutpostID, WorkerImage string
	Metrics                            RunnerMetrics
	Logger                             *slog.Logger
}

// Runner is a pool's fleet.Runner.
type Runner struct{ cfg RunnerConfig }

// stubObjects are the sessions each pool's stub runner "has pods" for.
var stubObjects = struct {
	sync.Mutex
	m map[types.UID]map[string]bool
}{m: map[types.UID]map[string]bool{}}

func (r *Runner) objects() map[string]bool {
	uid := r.cfg.Pool().UID
	if stubObjects.m[uid] == nil {
		stubObjects.m[uid] = map[string]bool{}
	}
	return stubObjects.m[uid]
}

// NewRunner returns a pool's runner.
func NewRunner(cfg RunnerConfig) *Runner { return &Runner{cfg: cfg} }

// Run serves s until it ends or the consumer stops (leaving the claim).
func (r *Runner) Run(ctx context.Context, s *fleet.Session) fleet.Outcome {
	stubObjects.Lock()
	r.objects()[s.ID] = true
	stubObjects.Unlock()
	select {
	case <-s.Stopping():
		return fleet.Outcome{LeaveClaim: true}
	case <-ctx.Done():
	case <-s.Ended():
	}
	stubObjects.Lock()
	delete(r.objects(), s.ID)
	stubObjects.Unlock()
	return fleet.Outcome{}
}

// Notify says a Pod, Secret or PVC of the session changed.
func (r *Runner) Notify(string) {}

// NotifyAll says the pool's spec changed.
func (r *Runner) NotifyAll() {}

// Leftover is what the runner found of a session.
type Leftover struct {
	SessionID           string
	Pod, Secret, Volume bool
	Suspended           bool
}

// Leftovers lists the sessions the pool has objects of.
func (r *Runner) Leftovers(context.Context) ([]Leftover, error) {
	stubObjects.Lock()
	defer stubObjects.Unlock()
	var out []Leftover
	for id := range r.objects() {
		out = append(out, Leftover{SessionID: id, Pod: true, Secret: true})
	}
	return out, nil
}

// Remove deletes a session's objects.
func (r *Runner) Remove(_ context.Context, id string, _ bool) error {
	stubObjects.Lock()
	delete(r.objects(), id)
	stubObjects.Unlock()
	return nil
}

// RemoveAll deletes every object of the pool.
func (r *Runner) RemoveAll(context.Context) error {
	stubObjects.Lock()
	delete(stubObjects.m, r.cfg.Pool().UID)
	stubObjects.Unlock()
	return nil
}

// CollectVolumes deletes volumes past the pool's snapshot TTL.
func (r *Runner) CollectVolumes(context.Context) error { return nil }

// Render is what rendering a session's objects needs besides the pool and
// the claim (pod.go).
type Render struct {
	OutpostID   string
	WorkerImage string
}

// RenderPod renders the Pod of the claimed session (pod.go): here only the
// template with the worker container's image.
func RenderPod(pool *v1alpha1.OutpostPool, claim *api.QueueEntry, rd Render) *corev1.Pod {
	tmpl := pool.Spec.Worker.Template.DeepCopy()
	spec := tmpl.Spec
	name := pool.Spec.Worker.ContainerName
	if name == "" {
		name = "outpost-remote"
	}
	image := pool.Spec.Worker.Overrides.Image
	if image == "" {
		image = rd.WorkerImage
	}
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		spec.Containers = append(spec.Containers, corev1.Container{Name: name, Image: image})
	} else if spec.Containers[i].Image == "" || pool.Spec.Worker.Overrides.Image != "" {
		spec.Containers[i].Image = image
	}
	spec.RestartPolicy = corev1.RestartPolicyNever
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: pool.Namespace, Name: "outpost-" + strings.ReplaceAll(strings.ToLower(claim.Metadata.SessionID), "_", "-"),
			Labels: tmpl.Labels, Annotations: tmpl.Annotations},
		Spec: spec,
	}
}
