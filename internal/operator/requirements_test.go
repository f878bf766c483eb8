//go:build !windows

package operator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/outpost-sh/outpost/api"
)

// TestRenderRequirements: a session's requirements reach its pod — labels
// into the node selector (over the template's), GPUs as a limit of
// nvidia.com/gpu, CPUs and memory as requests no lower than the
// template's — and a session without them leaves the template alone.
func TestRenderRequirements(t *testing.T) {
	t.Parallel()
	pool, claim := testPool(), testClaim()
	pool.Spec.Worker.Template.Spec.NodeSelector = map[string]string{"pool": "gpu", "gpu": "a100"}
	pool.Spec.Worker.Template.Spec.Containers = []corev1.Container{{Name: ContainerName(pool), Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}
	plain := RenderPod(pool, claim, testRender)
	if c := worker(t, plain, ContainerName(pool)); len(c.Resources.Limits) != 0 || plain.Spec.NodeSelector["gpu"] != "a100" {
		t.Fatalf("a session without requirements changed the pod: limits %v, node selector %v", c.Resources.Limits, plain.Spec.NodeSelector)
	}

	claim.Spec.Requirements = &api.Requirements{Labels: map[string]string{"gpu": "h200"}, GPUs: 2, CPUs: 8, MemoryGiB: 64}
	p := RenderPod(pool, claim, testRender)
	if p.Spec.NodeSelector["gpu"] != "h200" || p.Spec.NodeSelector["pool"] != "gpu" {
		t.Errorf("node selector %v, want gpu=h200 over the template's and pool=gpu kept", p.Spec.NodeSelector)
	}
	c := worker(t, p, ContainerName(pool))
	if q := c.Resources.Limits[GPUResource]; q.Value() != 2 {
		t.Errorf("nvidia.com/gpu limit %s, want 2", q.String())
	}
	if q := c.Resources.Requests[corev1.ResourceCPU]; q.Value() != 16 {
		t.Errorf("cpu request %s, want the template's 16 (more than the 8 required)", q.String())
	}
	if q := c.Resources.Requests[corev1.ResourceMemory]; q.Value() != 64<<30 {
		t.Errorf("memory request %s, want 64Gi", q.String())
	}
	if pool.Spec.Worker.Template.Spec.NodeSelector["gpu"] != "a100" {
		t.Error("rendering changed the pool's template")
	}
}
