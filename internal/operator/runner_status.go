package operator

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// containerStatus is the status of the pod's container name, nil when
// not reported yet.
func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func workerIndex(p *corev1.Pod, name string) int {
	for i, c := range p.Spec.Containers {
		if c.Name == name {
			return i
		}
	}
	return 0
}

// workerImage is the image of the pod's worker container.
func workerImage(p *corev1.Pod, name string) string {
	for _, c := range p.Spec.Containers {
		if c.Name == name {
			return c.Image
		}
	}
	return ""
}

// idle reports whether the pod has not started serving its session: it is
// pending, or its worker container has not started. A running pod without
// a status of the worker container (made before the pool's containerName
// changed) is not known to be idle.
func idle(p *corev1.Pod, cs *corev1.ContainerStatus) bool {
	if p.Status.Phase == corev1.PodPending || p.Status.Phase == "" {
		return true
	}
	return p.Status.Phase == corev1.PodRunning && cs != nil && cs.State.Waiting != nil
}

// waitingOf says why a pod is stuck before its worker runs, "" when it is
// not (or only briefly: creating the container).
func waitingOf(p *corev1.Pod, cs *corev1.ContainerStatus) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason != "" {
			return sentence(c.Reason, c.Message)
		}
	}
	if cs == nil || cs.State.Waiting == nil {
		return ""
	}
	switch w := cs.State.Waiting; w.Reason {
	case "", "ContainerCreating", "PodInitializing":
		return ""
	default:
		return sentence(w.Reason, w.Message)
	}
}

// exitOf is how a failed pod's worker ended: its exit code when known,
// and words for it.
func exitOf(p *corev1.Pod, cs *corev1.ContainerStatus) (*int, string) {
	if cs != nil && cs.State.Terminated != nil {
		t := cs.State.Terminated
		code := int(t.ExitCode)
		why := fmt.Sprintf("exit code %d", code)
		if r := sentence(t.Reason, t.Message); r != "" {
			why += ", reason " + r
		}
		return &code, why
	}
	if r := sentence(p.Status.Reason, p.Status.Message); r != "" {
		return nil, "exit code unknown, reason " + r
	}
	return nil, "exit code unknown"
}

func sentence(reason, msg string) string {
	switch {
	case reason == "":
		return msg
	case msg == "":
		return reason
	}
	return reason + ": " + msg
}

func phaseOf(p *corev1.Pod) string {
	if p.Status.Phase == "" {
		return "pending"
	}
	return "phase " + string(p.Status.Phase)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
