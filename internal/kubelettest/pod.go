//go:build !windows

package kubelettest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

const (
	// apiTimeout bounds each call to the API server.
	apiTimeout = 15 * time.Second
	// podIP is every pod's IP (pods share the host's network).
	podIP = "127.0.0.1"
	// defaultGrace is a deleted pod's grace period when it has none.
	defaultGrace = 30 * time.Second
	// maxRestartDelay caps the delay before a container restarts.
	maxRestartDelay = time.Second
)

// errInterrupted ends a podRun's wait: the pod is being deleted, is gone,
// or the kubelet stops.
var errInterrupted = errors.New("interrupted")

// podRun is the life of one Pod (one uid) on the kubelet.
type podRun struct {
	k        *Kubelet
	log      *slog.Logger
	uid      types.UID
	ns, name string
	dir      string // the pod's host directory

	deleting chan struct{} // closed once the pod has a deletionTimestamp
	gone     chan struct{} // closed once the pod is gone from the API server
	delOnce  sync.Once
	goneOnce sync.Once

	mu    sync.Mutex // guards the following
	pod   *corev1.Pod
	grace time.Duration

	// Owned by run's goroutine.
	exits     chan exit
	procs     sync.WaitGroup // the goroutines that wait for processes
	ctrs      []*ctr
	startTime metav1.Time
	bound     bool
	prepared  bool
	schedMsg  string // why the pod is not scheduled yet
	lastWait  string // the last waiting message written
}

// ctr is one container of the pod.
type ctr struct {
	c         corev1.Container
	spec      containerSpec
	proc      *sandboxProc
	run       *Run
	state     corev1.ContainerState
	last      corev1.ContainerState
	restarts  int32
	restartAt time.Time // a restart is due then (zero: none)
	id        string
}

type exit struct {
	i    int
	proc *sandboxProc
}

func newPodRun(k *Kubelet, pod *corev1.Pod) *podRun {
	r := &podRun{k: k, uid: pod.UID, ns: pod.Namespace, name: pod.Name, pod: pod.DeepCopy(),
		log:      k.log.With("pod", pod.Namespace+"/"+pod.Name),
		dir:      filepath.Join(k.opts.Dir, "pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID)),
		deleting: make(chan struct{}), gone: make(chan struct{}),
		exits: make(chan exit, len(pod.Spec.Containers))}
	for _, c := range pod.Spec.Containers {
		r.ctrs = append(r.ctrs, &ctr{c: c, state: waiting("ContainerCreating", "")})
	}
	return r
}

func (r *podRun) homeDir() string { return filepath.Join(r.dir, "home") }

func (r *podRun) latest() *corev1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pod
}

// markDeleting records the pod's deletion and its grace period.
func (r *podRun) markDeleting(pod *corev1.Pod) {
	grace := defaultGrace
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	if m := r.k.opts.MaxGracePeriod; m > 0 && grace > m {
		grace = m
	}
	r.mu.Lock()
	r.pod = pod.DeepCopy()
	r.grace = grace
	r.mu.Unlock()
	r.delOnce.Do(func() { close(r.deleting) })
}

func (r *podRun) markGone() { r.goneOnce.Do(func() { close(r.gone) }) }

func (r *podRun) isDeleting() bool {
	select {
	case <-r.deleting:
		return true
	default:
		return false
	}
}

// run takes the pod from unscheduled to deleted.
func (r *podRun) run(ctx context.Context) {
	defer r.cleanup()
	pod := r.latest()
	err := r.retry(ctx, func(ctx context.Context) error { return r.claimsReady(ctx, pod) }, func(err error) {
		if msg := err.Error(); msg != r.schedMsg {
			r.schedMsg = msg
			r.writeStatus(ctx)
		}
	})
	if err == nil {
		err = r.retry(ctx, func(ctx context.Context) error { return r.bind(ctx, pod) }, func(err error) {
			r.log.Warn("bind", "err", err)
		})
	}
	if err == nil {
		r.bound, r.schedMsg = true, ""
		r.startTime = metav1.Now()
		r.event(ctx, corev1.EventTypeNormal, "Scheduled", fmt.Sprintf("Successfully assigned %s/%s to %s", r.ns, r.name, r.k.opts.NodeName))
		r.writeStatus(ctx)
		err = r.retry(ctx, r.prepare, func(err error) {
			reason := "CreateContainerError"
			var ce *configError
			if errors.As(err, &ce) {
				reason = "CreateContainerConfigError"
			}
			for _, c := range r.ctrs {
				c.state = waiting(reason, err.Error())
			}
			if err.Error() != r.lastWait {
				r.lastWait = err.Error()
				r.event(ctx, corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
				r.writeStatus(ctx)
			}
		})
	}
	if err != nil { // deleted, gone or stopped before any container ran
		if r.isDeleting() && ctx.Err() == nil {
			r.k.finalize(ctx, r.latest())
		}
		return
	}
	r.prepared = true
	for i := range r.ctrs {
		r.start(ctx, i)
	}
	r.writeStatus(ctx)
	r.loop(ctx)
}

// retry calls try until it succeeds, calling failed after each failure
// and waiting RetryInterval; it returns errInterrupted when the pod is
// deleted or gone or the kubelet stops first.
func (r *podRun) retry(ctx context.Context, try func(context.Context) error, failed func(error)) error {
	for {
		select {
		case <-r.deleting:
			return errInterrupted
		case <-r.gone:
			return errInterrupted
		case <-ctx.Done():
			return errInterrupted
		default:
		}
		tctx, cancel := context.WithTimeout(ctx, apiTimeout)
		err := try(tctx)
		cancel()
		if err == nil {
			return nil
		}
		failed(err)
		t := time.NewTimer(r.k.opts.RetryInterval)
		select {
		case <-t.C:
		case <-r.deleting:
		case <-r.gone:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// bind assigns the pod to the kubelet's node, as a scheduler does.
func (r *podRun) bind(ctx context.Context, pod *corev1.Pod) error {
	if pod.Spec.NodeName != "" {
		return nil
	}
	err := r.k.cs.CoreV1().Pods(r.ns).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: r.name, UID: r.uid},
		Target:     corev1.ObjectReference{Kind: "Node", Name: r.k.opts.NodeName},
	}, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		r.markGone()
	}
	if err != nil {
		return fmt.Errorf("bind pod %s/%s: %w", r.ns, r.name, err)
	}
	return nil
}

// prepare makes the volumes and resolves each container's command,
// environment, working dir and mounts.
func (r *podRun) prepare(ctx context.Context) error {
	pod := r.latest()
	if err := os.MkdirAll(r.homeDir(), 0o777); err != nil {
		return err
	}
	vols, err := r.volumes(ctx, pod)
	if err != nil {
		return err
	}
	for _, c := range r.ctrs {
		env, err := r.containerEnv(ctx, pod, &c.c)
		if err != nil {
			return err
		}
		workDir := c.c.WorkingDir
		if workDir == "" {
			workDir = "/"
		}
		ms, err := mounts(&c.c, vols, filepath.Clean(workDir))
		if err != nil {
			return err
		}
		var argv []string
		for _, a := range append(slices.Clone(c.c.Command), c.c.Args...) {
			argv = append(argv, expand(a, env.value))
		}
		c.spec = containerSpec{argv: argv, env: env.list(), workDir: filepath.Clean(workDir), mounts: ms,
			hostname: hostname(pod.Name), log: filepath.Join(r.dir, "logs", c.c.Name+".log")}
	}
	return nil
}

// hostname is a pod's hostname: its name, cut to 63 characters.
func hostname(name string) string {
	if len(name) > 63 {
		return name[:63]
	}
	return name
}

// start starts container i (again), or records why it could not.
func (r *podRun) start(ctx context.Context, i int) {
	c := r.ctrs[i]
	pod := r.latest()
	c.restartAt = time.Time{}
	spec := c.spec
	code, fail := r.k.failing(pod, c.c.Name)
	if fail {
		spec.argv = []string{"/bin/sh", "-c", fmt.Sprintf("echo 'kubelettest: this start of %s fails on purpose' >&2; exit %d", c.c.Name, code)}
	} else if len(spec.argv) == 0 {
		r.startFailed(ctx, i, fmt.Sprintf("container %q has no command: kubelettest runs commands, not images' entrypoints", c.c.Name))
		return
	} else {
		bin, err := r.k.opts.Resolve(spec.argv[0])
		if err != nil {
			r.startFailed(ctx, i, err.Error())
			return
		}
		spec.argv = append([]string{bin}, spec.argv[1:]...)
	}
	run := &Run{Namespace: r.ns, Pod: r.name, UID: r.uid, Labels: pod.Labels, Container: c.c.Name,
		Argv: spec.argv, Env: spec.env, Restart: int(c.restarts), Failed: fail, Started: time.Now()}
	if c.restarts == 0 {
		r.event(ctx, corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine", c.c.Image))
	}
	p, err := r.k.startSandbox(spec)
	if err != nil {
		r.startFailed(ctx, i, err.Error())
		return
	}
	select {
	case <-p.started:
	case <-p.done:
	}
	c.proc, c.run = p, run
	c.id = fmt.Sprintf("kubelettest://%s-%s-%d", r.uid, c.c.Name, c.restarts)
	r.k.addRun(run)
	r.procs.Add(1)
	go func() {
		defer r.procs.Done()
		<-p.done
		r.exits <- exit{i: i, proc: p}
	}()
	if !p.running() {
		return // bwrap failed: its exit, with its message, comes through exits
	}
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(run.Started)}}
	r.event(ctx, corev1.EventTypeNormal, "Started", fmt.Sprintf("Started container %s", c.c.Name))
}

// startFailed records a container that could not start (exit 128, reason
// StartError, as a container runtime reports it).
func (r *podRun) startFailed(ctx context.Context, i int, msg string) {
	c := r.ctrs[i]
	now := metav1.Now()
	c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError",
		Message: msg, StartedAt: now, FinishedAt: now}}
	r.event(ctx, corev1.EventTypeWarning, "Failed", "Error: "+msg)
	r.log.Warn("container start failed", "container", c.c.Name, "err", msg)
	r.afterExit(i, 128)
}

// exited records the end of container i's process.
func (r *podRun) exited(ctx context.Context, e exit) {
	c := r.ctrs[e.i]
	if c.proc != e.proc {
		return
	}
	code := e.proc.exit()
	r.k.finishRun(c.run, code)
	if !e.proc.running() {
		msg := lastLines(c.spec.log, 3)
		c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError",
			Message: "bwrap: " + msg, StartedAt: metav1.NewTime(c.run.Started), FinishedAt: metav1.Now()}}
		r.event(ctx, corev1.EventTypeWarning, "Failed", "Error: "+msg)
		r.afterExit(e.i, 128)
		return
	}
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: reason,
		StartedAt: metav1.NewTime(c.run.Started), FinishedAt: metav1.NewTime(c.run.Finished), ContainerID: c.id}}
	r.log.Info("container exited", "container", c.c.Name, "code", code)
	r.afterExit(e.i, code)
}

// afterExit schedules a restart as the pod's restartPolicy says.
func (r *podRun) afterExit(i, code int) {
	c := r.ctrs[i]
	switch policy := r.latest().Spec.RestartPolicy; {
	case r.isDeleting():
	case policy == corev1.RestartPolicyAlways, policy == corev1.RestartPolicyOnFailure && code != 0:
		delay := min(50*time.Millisecond<<min(c.restarts, 10), maxRestartDelay)
		c.restartAt = time.Now().Add(delay)
	}
}

// loop follows the running pod until it is deleted, gone or the kubelet
// stops.
func (r *podRun) loop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Stop()
		var timerC <-chan time.Time
		if next := r.nextRestart(); !next.IsZero() {
			timer.Reset(time.Until(next))
			timerC = timer.C
		}
		select {
		case e := <-r.exits:
			r.exited(ctx, e)
			r.writeStatus(ctx)
		case <-timerC:
			for i, c := range r.ctrs {
				if !c.restartAt.IsZero() && !time.Now().Before(c.restartAt) {
					c.last, c.restarts = c.state, c.restarts+1
					r.start(ctx, i)
				}
			}
			r.writeStatus(ctx)
		case <-r.deleting:
			r.mu.Lock()
			grace := r.grace
			r.mu.Unlock()
			r.event(ctx, corev1.EventTypeNormal, "Killing", fmt.Sprintf("Stopping the pod's containers (grace period %s)", grace))
			r.stopAll(ctx, grace)
			r.writeStatus(ctx)
			r.k.finalize(ctx, r.latest())
			return
		case <-r.gone:
			r.stopAll(ctx, 0)
			return
		case <-ctx.Done():
			r.stopAll(ctx, 0)
			return
		}
	}
}

func (r *podRun) nextRestart() time.Time {
	var next time.Time
	for _, c := range r.ctrs {
		if !c.restartAt.IsZero() && (next.IsZero() || c.restartAt.Before(next)) {
			next = c.restartAt
		}
	}
	return next
}

// stopAll sends SIGTERM to every running container, SIGKILL after grace,
// and waits for all of them.
func (r *podRun) stopAll(ctx context.Context, grace time.Duration) {
	live := 0
	sig := syscall.SIGTERM
	if grace <= 0 {
		sig = syscall.SIGKILL
	}
	for _, c := range r.ctrs {
		c.restartAt = time.Time{}
		if c.proc != nil && c.state.Terminated == nil {
			live++
			c.proc.signal(sig)
		}
	}
	kill := time.NewTimer(grace)
	defer kill.Stop()
	for live > 0 {
		select {
		case e := <-r.exits:
			if r.ctrs[e.i].proc == e.proc {
				live--
				r.exited(ctx, e)
			}
		case <-kill.C:
			for _, c := range r.ctrs {
				if c.proc != nil && c.state.Terminated == nil {
					c.proc.signal(syscall.SIGKILL)
				}
			}
		}
	}
	for _, c := range r.ctrs {
		c.restartAt = time.Time{}
	}
}

// cleanup waits for the process watchers and removes the pod's volumes
// and home (its logs stay, for Logs).
func (r *podRun) cleanup() {
	for _, c := range r.ctrs {
		if c.proc != nil {
			c.proc.signal(syscall.SIGKILL)
		}
	}
	go func() {
		for range r.exits { // drain what stopAll did not
		}
	}()
	r.procs.Wait()
	close(r.exits)
	_ = os.RemoveAll(filepath.Join(r.dir, "volumes"))
	_ = os.RemoveAll(r.homeDir())
}

// phase is the pod's phase from its containers.
func (r *podRun) phase() corev1.PodPhase {
	if !r.prepared {
		return corev1.PodPending
	}
	failed := false
	for _, c := range r.ctrs {
		if c.state.Terminated == nil || !c.restartAt.IsZero() {
			return corev1.PodRunning
		}
		if c.state.Terminated.ExitCode != 0 {
			failed = true
		}
	}
	if failed {
		return corev1.PodFailed
	}
	return corev1.PodSucceeded
}

// status is the pod's status as the kubelet sees it now.
func (r *podRun) status(old corev1.PodStatus) corev1.PodStatus {
	st := old
	now := metav1.Now()
	phase := r.phase()
	st.Phase = phase
	setCond := func(t corev1.PodConditionType, ok bool, reason, msg string) {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		for i := range st.Conditions {
			if st.Conditions[i].Type == t {
				if st.Conditions[i].Status != s {
					st.Conditions[i].LastTransitionTime = now
				}
				st.Conditions[i].Status, st.Conditions[i].Reason, st.Conditions[i].Message = s, reason, msg
				return
			}
		}
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: now})
	}
	if !r.bound {
		setCond(corev1.PodScheduled, false, corev1.PodReasonUnschedulable, r.schedMsg)
		return st
	}
	setCond(corev1.PodScheduled, true, "", "")
	st.HostIP, st.HostIPs = podIP, []corev1.HostIP{{IP: podIP}}
	st.PodIP, st.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}
	st.StartTime = &r.startTime
	setCond(corev1.PodInitialized, true, "", "")
	setCond(corev1.PodReadyToStartContainers, r.prepared, "", "")
	ready := phase == corev1.PodRunning
	st.ContainerStatuses = nil
	for _, c := range r.ctrs {
		running := c.state.Running != nil
		ready = ready && running
		cs := corev1.ContainerStatus{Name: c.c.Name, State: c.state, LastTerminationState: c.last, Ready: running,
			RestartCount: c.restarts, Image: c.c.Image, Started: &running}
		if c.proc != nil || c.state.Terminated != nil {
			cs.ImageID = imageID(c.c.Image)
			cs.ContainerID = c.id
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	reason := "ContainersNotReady"
	if phase == corev1.PodSucceeded || phase == corev1.PodFailed {
		reason = "PodCompleted"
	}
	if ready {
		reason = ""
	}
	setCond(corev1.ContainersReady, ready, reason, "")
	setCond(corev1.PodReady, ready, reason, "")
	return st
}

// imageID is what a runtime would report as the pulled image's id.
func imageID(image string) string {
	sum := sha256.Sum256([]byte(image))
	return "kubelettest://" + image + "@sha256:" + hex.EncodeToString(sum[:])
}

// writeStatus writes the pod's status (UpdateStatus on the latest pod,
// again on a conflict). A pod found gone is marked so.
func (r *podRun) writeStatus(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	pods := r.k.cs.CoreV1().Pods(r.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := pods.Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != r.uid {
			return apierrors.NewNotFound(corev1.Resource("pods"), r.name)
		}
		cur.Status = r.status(cur.Status)
		_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		r.markGone()
	case err != nil && ctx.Err() == nil:
		r.log.Warn("write pod status", "err", err)
	}
}

// event records a Kubernetes Event about the pod, as a kubelet does
// (best effort).
func (r *podRun) event(ctx context.Context, typ, reason, msg string) {
	if ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: r.name + ".", Namespace: r.ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: r.ns, Name: r.name, UID: r.uid},
		Reason:         reason, Message: msg, Type: typ, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: "kubelet", Host: r.k.opts.NodeName},
	}
	if _, err := r.k.cs.CoreV1().Events(r.ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
		r.log.Debug("record an event", "reason", reason, "err", err)
	}
}

func waiting(reason, msg string) corev1.ContainerState {
	return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
}
