//go:build !windows

// Package kubelettest is a kubelet for tests: on a real API server with no
// node agent (envtest's kube-apiserver and etcd), it runs the Pods of the
// namespaces it is given as local processes, so that controllers under test
// see their Pods scheduled, started, finished and deleted as on a cluster.
//
// For each new Pod it creates its Node (once), binds the Pod to it through
// the pods/binding subresource, resolves every container's environment
// (value, valueFrom secretKeyRef, configMapKeyRef and fieldRef, envFrom) and
// volumes (emptyDir: a fresh host directory per pod; persistentVolumeClaim:
// a host directory per claim, kept across pods; secret, configMap and
// hostPath), and runs each container's command and args in a bubblewrap
// sandbox: the host's root as it is, with the volumes bound at their mount
// paths, the container's working directory, a pid namespace of its own
// (the command is its pid 1, as in a container: when it exits, whatever it
// left running dies with it) and its own hostname. Status is written as a
// kubelet writes it: PodScheduled, containers waiting (ContainerCreating,
// or CreateContainerConfigError while a Secret or key is missing), running
// (startedAt, imageID), terminated (exitCode, reason Completed or Error),
// the pod's phase Pending, Running, Succeeded or Failed, with restarts in
// place for restartPolicy OnFailure and Always.
//
// A Pod given a deletionTimestamp gets SIGTERM on each container's pid 1,
// SIGKILL after the grace period, and is then deleted with grace 0 — without
// a kubelet a bound Pod never goes away.
//
// What it does not do: images (a container's command runs on the host; the
// image only names it in the status), users and security contexts (every
// process runs as the test's user), resources, probes, lifecycle hooks,
// init containers, networking (pods share the host's network) and a private
// /tmp (the host's /tmp is shared, so binaries built into it run).
//
// Of the controller-manager, which envtest does not run either, it plays
// the part tests of pods with volumes need: a PersistentVolumeClaim is
// marked Bound when a pod uses it, and a deleted one loses its
// kubernetes.io/pvc-protection finalizer once no scheduled pod refers to it
// (so it goes, as on a cluster). Owner references are not garbage
// collected.
//
// It is not built for Windows, where controller-runtime's envtest does not
// compile; the tests that use it are constrained the same way.
package kubelettest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// DefaultNodeName is the Node pods are bound to when Options.NodeName is
// empty.
const DefaultNodeName = "kubelettest"

// Options configure a Kubelet.
type Options struct {
	// Config reaches the API server. Required.
	Config *rest.Config
	// Namespaces are the namespaces whose Pods the kubelet runs; none
	// means every namespace.
	Namespaces []string
	// NodeName is the Node the kubelet creates and binds Pods to; empty
	// means DefaultNodeName. Pods bound to another node are left alone.
	NodeName string
	// Dir holds the pods' volumes, homes and logs (a test's TempDir).
	// Required.
	Dir string
	// Resolve maps a container's argv[0] to the host program to run; nil
	// means Commands(nil): an absolute path as it is, a bare name from
	// PATH.
	Resolve func(argv0 string) (string, error)
	// Env is every container's environment before its own variables
	// (which win), after the defaults: PATH, HOSTNAME (the pod's name) and
	// HOME (a private directory of the pod).
	Env []string
	// Bwrap is the bubblewrap executable; empty means bwrap from PATH.
	Bwrap string
	// MaxGracePeriod caps a deleted Pod's grace period; zero means the
	// Pod's own (its deletionGracePeriodSeconds).
	MaxGracePeriod time.Duration
	// RetryInterval is how often a Pod waiting for a Secret, ConfigMap or
	// PersistentVolumeClaim looks again; zero means 200ms.
	RetryInterval time.Duration
	// Logger receives the kubelet's log; nil discards it.
	Logger *slog.Logger
}

// Commands returns a resolver (Options.Resolve) that maps the argv[0]s in
// m to host programs and finds any other in PATH (an absolute path is
// taken as it is).
func Commands(m map[string]string) func(string) (string, error) {
	return func(argv0 string) (string, error) {
		if p, ok := m[argv0]; ok {
			return p, nil
		}
		if filepath.IsAbs(argv0) {
			if _, err := os.Stat(argv0); err != nil {
				return "", fmt.Errorf("executable %s not found: %w", argv0, err)
			}
			return argv0, nil
		}
		p, err := exec.LookPath(argv0)
		if err != nil {
			return "", fmt.Errorf("executable %q not found in $PATH: %w", argv0, err)
		}
		return p, nil
	}
}

// Run is one start of one container, as the kubelet ran it.
type Run struct {
	Namespace string
	Pod       string
	UID       types.UID
	Labels    map[string]string
	Container string
	// Argv is the command run: argv[0] resolved to the host program,
	// $(VAR) references expanded.
	Argv []string
	// Env is the container's whole environment, resolved.
	Env []string
	// Restart is the container's restart count at this start.
	Restart int
	// Failed says the start was failed on purpose (FailStarts).
	Failed   bool
	Started  time.Time
	Finished time.Time // zero while running
	ExitCode int
}

// Kubelet runs Pods as local processes. Start makes one; Stop ends it.
type Kubelet struct {
	opts   Options
	cs     kubernetes.Interface
	log    *slog.Logger
	bwrap  string
	root   []string // bwrap arguments that show the host's root
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the kubelet starts
	stopCh chan struct{}

	stopOnce sync.Once

	mu       sync.Mutex // guards the following
	pods     map[types.UID]*podRun
	runs     []*Run
	failures []*failRule
	stopped  bool
}

type failRule struct {
	match func(*corev1.Pod, string) bool
	left  int
	code  int
}

// Start creates the Node, starts watching Pods and returns once the watch
// has its first list. The Kubelet runs until Stop (ctx only bounds Start).
func Start(ctx context.Context, opts Options) (*Kubelet, error) {
	if opts.Config == nil || opts.Dir == "" {
		return nil, errors.New("kubelettest: Options.Config and Options.Dir are required")
	}
	if opts.NodeName == "" {
		opts.NodeName = DefaultNodeName
	}
	if opts.Resolve == nil {
		opts.Resolve = Commands(nil)
	}
	if opts.RetryInterval == 0 {
		opts.RetryInterval = 200 * time.Millisecond
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	bw := opts.Bwrap
	if bw == "" {
		bw = "bwrap"
	}
	bwrap, err := exec.LookPath(bw)
	if err != nil {
		return nil, fmt.Errorf("kubelettest runs containers with bubblewrap (apt-get install bubblewrap): %w", err)
	}
	root, err := rootArgs()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	opts.Dir = dir
	cfg := rest.CopyConfig(opts.Config)
	cfg.QPS, cfg.Burst = -1, 0 // a test's kubelet is not rate limited
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubelettest: client: %w", err)
	}
	k := &Kubelet{opts: opts, cs: cs, log: log.With("node", opts.NodeName), bwrap: bwrap, root: root,
		pods: map[types.UID]*podRun{}, stopCh: make(chan struct{})}
	if err := k.ensureNode(ctx); err != nil {
		return nil, err
	}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	namespaces := opts.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var synced []cache.InformerSynced
	var podCaches, claimCaches []cache.Indexer
	kick := make(chan struct{}, 1)
	kickProtection := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	for _, ns := range namespaces {
		f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
		inf := f.Core().V1().Pods().Informer()
		claims := f.Core().V1().PersistentVolumeClaims().Informer()
		_, err1 := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { k.observe(obj); kickProtection() },
			UpdateFunc: func(_, obj any) { k.observe(obj); kickProtection() },
			DeleteFunc: func(obj any) { k.forgetPod(obj); kickProtection() },
		})
		_, err2 := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { kickProtection() },
			UpdateFunc: func(_, _ any) { kickProtection() },
		})
		if err := errors.Join(err1, err2); err != nil {
			k.Stop()
			return nil, fmt.Errorf("kubelettest: watch pods: %w", err)
		}
		synced = append(synced, inf.HasSynced, claims.HasSynced)
		podCaches, claimCaches = append(podCaches, inf.GetIndexer()), append(claimCaches, claims.GetIndexer())
		for _, i := range []cache.SharedIndexInformer{inf, claims} {
			k.wg.Add(1)
			go func() {
				defer k.wg.Done()
				i.Run(k.stopCh)
			}()
		}
	}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		k.protect(k.stopCh, kick, podCaches, claimCaches)
	}()
	syncCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-syncCtx.Done():
		case <-k.stopCh:
			cancel()
		}
	}()
	if !cache.WaitForCacheSync(syncCtx.Done(), synced...) {
		k.Stop()
		return nil, fmt.Errorf("kubelettest: the first list of pods: %w", context.Cause(syncCtx))
	}
	k.log.Info("kubelet started", "namespaces", opts.Namespaces, "dir", opts.Dir)
	return k, nil
}

// Stop kills every container the kubelet started, stops watching and
// waits for all of it. Pods stay in the API server as they are.
func (k *Kubelet) Stop() {
	k.stopOnce.Do(func() {
		k.mu.Lock()
		k.stopped = true
		k.mu.Unlock()
		if k.cancel != nil {
			k.cancel()
		}
		close(k.stopCh)
		k.wg.Wait()
	})
}

// NodeName is the Node the kubelet binds Pods to.
func (k *Kubelet) NodeName() string { return k.opts.NodeName }

// FailStarts makes the next n starts of a container for which match
// returns true exit with code (a nonzero exit; 1 when code is 0) at once
// instead of running its command: a container that crashes on start.
func (k *Kubelet) FailStarts(match func(pod *corev1.Pod, container string) bool, n, code int) {
	if code == 0 {
		code = 1
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.failures = append(k.failures, &failRule{match: match, left: n, code: code})
}

// failing reports whether this start is to fail on purpose, and its code.
func (k *Kubelet) failing(pod *corev1.Pod, container string) (int, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.failures {
		if r.left > 0 && r.match(pod, container) {
			r.left--
			return r.code, true
		}
	}
	return 0, false
}

// Runs returns a copy of every container start so far, in order.
func (k *Kubelet) Runs() []Run {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]Run, len(k.runs))
	for i, r := range k.runs {
		out[i] = *r
		out[i].Argv = slices.Clone(r.Argv)
		out[i].Env = slices.Clone(r.Env)
	}
	return out
}

// Running is how many containers run right now.
func (k *Kubelet) Running() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, r := range k.runs {
		if r.Finished.IsZero() {
			n++
		}
	}
	return n
}

func (k *Kubelet) addRun(r *Run) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.runs = append(k.runs, r)
}

func (k *Kubelet) finishRun(r *Run, code int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r.Finished, r.ExitCode = time.Now(), code
}

// Logs returns what the containers of the pod ns/name wrote (every pod
// of that name, every start), each line prefixed with its container.
func (k *Kubelet) Logs(ns, name string) string {
	files, _ := filepath.Glob(filepath.Join(k.opts.Dir, "pods", ns+"_"+name+"_*", "logs", "*.log"))
	var out []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		out = append(out, fmt.Sprintf("==> %s <==\n", filepath.Base(f))...)
		out = append(out, b...)
	}
	return string(out)
}

// ClaimDir is the host directory that holds the PersistentVolumeClaim
// ns/name with the given uid: it outlives every pod that mounts it, and
// a claim deleted and made again (a new uid) starts empty, as a new
// volume would.
func (k *Kubelet) ClaimDir(ns, name string, uid types.UID) string {
	return filepath.Join(k.opts.Dir, "claims", ns, name+"_"+string(uid))
}

// ensureNode creates the kubelet's Node, Ready, unless it exists.
func (k *Kubelet) ensureNode(ctx context.Context) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.opts.NodeName,
		Labels: map[string]string{corev1.LabelHostname: k.opts.NodeName, corev1.LabelOSStable: "linux"}}}
	created, err := k.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubelettest: create node %s: %w", k.opts.NodeName, err)
	}
	now := metav1.Now()
	created.Status = corev1.NodeStatus{
		Phase: corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", Message: "kubelettest is ready", LastHeartbeatTime: now, LastTransitionTime: now}},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: k.opts.NodeName}},
		Capacity:  corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1000"), corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi")},
	}
	created.Status.Allocatable = created.Status.Capacity
	if _, err := k.cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("kubelettest: node %s status: %w", k.opts.NodeName, err)
	}
	return nil
}

// observe handles a Pod added or changed: a new one gets a podRun, a
// deleted one (deletionTimestamp set) is told so.
func (k *Kubelet) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != k.opts.NodeName {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	r := k.pods[pod.UID]
	if r == nil {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			// Not ours to run (a kubelet before this one finished it); a
			// deleted one is finalized.
			if pod.DeletionTimestamp != nil {
				k.wg.Add(1)
				go func() {
					defer k.wg.Done()
					k.finalize(k.ctx, pod)
				}()
			}
			return
		}
		r = newPodRun(k, pod)
		k.pods[pod.UID] = r
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			r.run(k.ctx)
			k.mu.Lock()
			delete(k.pods, pod.UID)
			k.mu.Unlock()
		}()
	}
	if pod.DeletionTimestamp != nil {
		r.markDeleting(pod)
	}
}

// forgetPod handles a Pod gone from the API server.
func (k *Kubelet) forgetPod(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	k.mu.Lock()
	r := k.pods[pod.UID]
	k.mu.Unlock()
	if r != nil {
		r.markGone()
	}
}

// finalize deletes a Pod whose containers are all gone, with grace 0 and
// its uid as the precondition.
func (k *Kubelet) finalize(ctx context.Context, pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	err := k.cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		k.log.Warn("delete a finished pod", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}
