//go:build !windows

package operator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/outpost-sh/outpost/api"
	outpost "github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
	"github.com/outpost-sh/outpost/internal/waitfor"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

const testTimeout = 60 * time.Second

// kube is a client of the package's kube-apiserver (envtest), shared by
// its tests, and kubeConfig its configuration (the operator's manager
// runs on it); nil when KUBEBUILDER_ASSETS is unset.
var (
	kube       client.Client
	kubeConfig *rest.Config
)

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard()) // the operator's manager logs through its own logger
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return m.Run()
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "deploy", "crds")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start envtest:", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop envtest:", err)
		}
	}()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if kube, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, "kube client:", err)
		return 1
	}
	kubeConfig = cfg
	return m.Run()
}

// needKube skips a test without a kube-apiserver, and fails it instead in
// CI.
func needKube(t *testing.T) {
	t.Helper()
	if kube != nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("KUBEBUILDER_ASSETS is unset in CI: export KUBEBUILDER_ASSETS=$(bash scripts/envtest-assets.sh)")
	}
	t.Skip("KUBEBUILDER_ASSETS is unset: export KUBEBUILDER_ASSETS=$(bash scripts/envtest-assets.sh)")
}

// kenv is one test's world: a namespace with a pool in the shared
// kube-apiserver, and an Outpost server of its own with an outpost and a
// machine token (the pool's token).
type kenv struct {
	t         *testing.T
	ctx       context.Context
	ns        string
	admin     *outpost.Client
	machine   *outpost.Client
	poolToken string
	outpost   api.Outpost
	acceptor  string

	mu   sync.Mutex // guards pool
	pool *v1alpha1.OutpostPool

	givenUp     prometheus.Counter
	active      prometheus.Gauge
	provisioned prometheus.Histogram
}

func newKenv(t *testing.T, spec v1alpha1.OutpostPoolSpec) *kenv {
	t.Helper()
	needKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	e := &kenv{t: t, ctx: ctx, ns: "t-" + randHex(4)}
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}

	srv := servertest.Start(t, server.Options{})
	e.admin = srv.Client
	o, err := e.admin.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "dev", Platform: api.PlatformLinux})
	if err != nil {
		t.Fatalf("create outpost: %v", err)
	}
	e.outpost = *o
	tok, err := e.admin.Tokens.Create(ctx, api.CreateTokenRequest{Name: "pool", Scopes: []string{api.ScopeMachine}, Outpost: "dev"})
	if err != nil {
		t.Fatalf("create token: %v", err)
	}
	e.poolToken = tok.Secret
	if e.machine, err = outpost.New(srv.URL(), tok.Secret); err != nil {
		t.Fatal(err)
	}

	// The pool's token Secret, as a user makes it: the runner must never
	// copy it anywhere.
	if err := kube.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pool-token", Namespace: e.ns},
		StringData: map[string]string{"token": e.poolToken}}); err != nil {
		t.Fatalf("create pool token secret: %v", err)
	}
	spec.Outpost = "dev"
	spec.TokenSecretRef = v1alpha1.SecretKeyRef{Name: "pool-token", Key: "token"}
	pool := &v1alpha1.OutpostPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: e.ns}, Spec: spec}
	if err := kube.Create(ctx, pool); err != nil {
		t.Fatalf("create pool: %v", err)
	}
	e.pool = pool
	e.acceptor = "k8s-test-" + randHex(4) + ":" + e.ns + ".pool"
	e.givenUp = prometheus.NewCounter(prometheus.CounterOpts{Name: "given_up"})
	e.active = prometheus.NewGauge(prometheus.GaugeOpts{Name: "active"})
	e.provisioned = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "provision"})
	return e
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// getPool is the pool's latest object (RunnerConfig.Pool).
func (e *kenv) getPool() *v1alpha1.OutpostPool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pool
}

// editPool replaces the runner's pool with an edited copy.
func (e *kenv) editPool(edit func(spec *v1alpha1.OutpostPoolSpec)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.pool.DeepCopy()
	edit(&p.Spec)
	e.pool = p
}

func (e *kenv) runner() *Runner {
	return NewRunner(RunnerConfig{Kube: kube, Pool: e.getPool, API: e.machine, AcceptorID: e.acceptor,
		OutpostID: e.outpost.Metadata.OutpostID, WorkerImage: testImage,
		Metrics:      RunnerMetrics{PodsActive: e.active, PodsGivenUp: e.givenUp, ProvisionSeconds: e.provisioned},
		PollInterval: time.Minute, // the tests notify; a backstop would hide a missed Notify
		Logger:       testLogger(e.t)})
}

// consumer is a fleet consumer of the outpost with the pool's token.
func (e *kenv) consumer(r *Runner, capacity int) *fleet.Consumer {
	return &fleet.Consumer{Client: e.machine, Outpost: e.outpost,
		Identity: &fleet.Identity{AcceptorID: e.acceptor, Kind: api.WorkerKindOrchestrator},
		Capacity: capacity, Runner: r, PollInterval: 50 * time.Millisecond, RetryAfter: time.Hour,
		Logger: testLogger(e.t)}
}

// startConsumer runs c until stop is called, which waits for Run.
func (e *kenv) startConsumer(c *fleet.Consumer) (stop func()) {
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("consumer: %v", err)
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// session creates a pending session on the outpost.
func (e *kenv) session() string {
	e.t.Helper()
	s, err := e.admin.Sessions.Create(e.ctx, api.CreateSessionRequest{Outpost: "dev", Prompt: "test",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}})
	if err != nil {
		e.t.Fatalf("create session: %v", err)
	}
	return s.Metadata.SessionID
}

// claim claims the session as the pool and returns it as a consumer hands
// it to its runner.
func (e *kenv) claim(id string) *fleet.Session {
	e.t.Helper()
	c, err := e.machine.Queue.Claim(e.ctx, id, e.acceptor)
	if err != nil {
		e.t.Fatalf("claim %s: %v", id, err)
	}
	return &fleet.Session{ID: id, Claim: *c}
}

// goRun runs r.Run in the background; the channel gets its outcome.
func (e *kenv) goRun(ctx context.Context, r *Runner, s *fleet.Session) <-chan fleet.Outcome {
	ch := make(chan fleet.Outcome, 1)
	go func() { ch <- r.Run(ctx, s) }()
	return ch
}

func (e *kenv) terminate(id string) {
	e.t.Helper()
	if _, err := e.admin.Sessions.Terminate(e.ctx, id, "done"); err != nil {
		e.t.Fatalf("terminate %s: %v", id, err)
	}
}

// waitFor polls cond until it holds or the test's deadline passes.
func (e *kenv) waitFor(what string, cond func() bool) {
	e.t.Helper()
	waitfor.Until(e.ctx, e.t, what, cond)
}

func (e *kenv) outcome(ch <-chan fleet.Outcome) fleet.Outcome {
	e.t.Helper()
	select {
	case out := <-ch:
		return out
	case <-e.ctx.Done():
		e.t.Fatal("timed out waiting for Run to return")
	}
	return fleet.Outcome{}
}

// get reads an object of the test's namespace; false when it is gone.
func (e *kenv) get(name string, obj client.Object) bool {
	e.t.Helper()
	err := kube.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		e.t.Fatalf("get %s: %v", name, err)
	}
	return true
}

// waitPod waits for the session's pod to satisfy cond (nil: to exist).
func (e *kenv) waitPod(id string, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	e.t.Helper()
	var p corev1.Pod
	e.waitFor(what, func() bool {
		p = corev1.Pod{}
		return e.get(PodName(id), &p) && p.DeletionTimestamp == nil && (cond == nil || cond(&p))
	})
	return &p
}

// waitGone waits until the object is deleted (gone, or terminating: no
// kubelet finishes a graceful deletion here).
func (e *kenv) waitGone(name string, obj client.Object) {
	e.t.Helper()
	e.waitFor(name+" deleted", func() bool { return !e.get(name, obj) || obj.GetDeletionTimestamp() != nil })
}

// kubelet plays the kubelet for the session's pod: it sets the pod's
// phase and its worker container's state, then notifies the runner as
// the operator's pod watch would.
func (e *kenv) kubelet(r *Runner, p *corev1.Pod, phase corev1.PodPhase, state corev1.ContainerState) {
	e.t.Helper()
	p.Status.Phase = phase
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName(e.getPool()), Image: p.Spec.Containers[0].Image,
		State: state, Ready: state.Running != nil}}
	if err := kube.Status().Update(e.ctx, p); err != nil {
		e.t.Fatalf("update pod status: %v", err)
	}
	r.Notify(p.Labels[LabelSessionID])
}

func running() corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
}

func exited(code int32, reason string) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}
}

// events returns the session's transcript.
func (e *kenv) events(id string) []api.Event {
	e.t.Helper()
	l, err := e.admin.Sessions.Events(e.ctx, id, 0, 1000)
	if err != nil {
		e.t.Fatalf("events of %s: %v", id, err)
	}
	return l.Items
}

// waitEvent waits for an event of the session's transcript of type typ
// (and machine step, when set) whose reason contains text.
func (e *kenv) waitEvent(id, typ, step, text string) api.Event {
	e.t.Helper()
	var found api.Event
	e.waitFor(fmt.Sprintf("a %s %s event saying %q", typ, step, text), func() bool {
		for _, ev := range e.events(id) {
			if ev.Type == typ && (step == "" || ev.Step == step) && strings.Contains(ev.Reason, text) {
				found = ev
				return true
			}
		}
		return false
	})
	return found
}

func (e *kenv) hasEvent(id, typ, step, text string) bool {
	for _, ev := range e.events(id) {
		if ev.Type == typ && (step == "" || ev.Step == step) && strings.Contains(ev.Reason, text) {
			return true
		}
	}
	return false
}

// entry is the session's queue entry.
func (e *kenv) entry(id string) *api.QueueEntry {
	e.t.Helper()
	q, err := e.admin.Queue.Get(e.ctx, id)
	if err != nil {
		e.t.Fatalf("queue entry %s: %v", id, err)
	}
	return q
}

// pods lists the pool's pods not being deleted.
func (e *kenv) pods() []corev1.Pod {
	e.t.Helper()
	var l corev1.PodList
	if err := kube.List(e.ctx, &l, client.InNamespace(e.ns), client.MatchingLabels{LabelPool: "pool"}); err != nil {
		e.t.Fatalf("list pods: %v", err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
