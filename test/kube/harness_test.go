//go:build !windows

package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/kubelettest"
	"github.com/outpost-sh/outpost/internal/waitfor"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// The operator's contract as the design spells it (internal/operator's
// names.go holds the same constants): the tests check it from outside.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "outpost-operator"
	labelPool      = "outpost.dev/pool"
	labelSession   = "outpost.dev/session-id"
	annotRestarts  = "outpost.dev/restarts"
	envConnect     = "OUTPOST_CONNECT_TOKEN"
	workerImage    = "test/outpost:dev"
	adminToken     = "opt_kube-admin-token-0123456789"
)

// scheme knows the built-in kinds and OutpostPool.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// addUserMu serializes envtest's AddUser (it signs with one CA).
var addUserMu sync.Mutex

// fixture is one test's world: a namespace, an outpost server, the test
// kubelet for the namespace and a kubeconfig for operators.
type fixture struct {
	t          testing.TB
	ns         string
	cs         kubernetes.Interface
	kc         ctrlclient.Client
	kubeconfig string
	url        string // the outpost server
	admin      *client.Client
	kubelet    *kubelettest.Kubelet
	server     *proc
	dataDir    string
	addr       string
}

// newFixture starts a test's world.
func newFixture(t testing.TB) *fixture {
	t.Helper()
	requireCluster(t)
	f := &fixture{t: t, dataDir: t.TempDir(), addr: freeAddr(t)}
	f.url = "http://" + f.addr
	var err error
	f.cs, err = kubernetes.NewForConfig(apiCfg)
	if err != nil {
		t.Fatal(err)
	}
	f.kc, err = ctrlclient.New(apiCfg, ctrlclient.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	f.ns = namespaceFor(t)
	if _, err := f.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	f.startServer()
	if f.admin, err = client.New(f.url, adminToken); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	klog := &syncBuffer{}
	f.kubelet, err = kubelettest.Start(ctx, kubelettest.Options{
		Config: apiCfg, Namespaces: []string{f.ns}, Dir: t.TempDir(),
		Resolve:        kubelettest.Commands(map[string]string{"outpost": binary}),
		MaxGracePeriod: 20 * time.Second,
		Logger:         slog.New(slog.NewTextHandler(klog, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.kubelet.Stop()
		if t.Failed() {
			t.Logf("--- kubelet ---\n%s", klog.String())
			f.dumpPods()
		}
	})

	addUserMu.Lock()
	user, err := apiEnv.AddUser(envtest.User{Name: "operator-" + f.ns, Groups: []string{"system:masters"}}, nil)
	addUserMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	f.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(f.kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// namespaceFor is a namespace name of the test's.
func namespaceFor(t testing.TB) string {
	ns := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	ns = strings.TrimPrefix(ns, "test")
	if len(ns) > 40 {
		ns = ns[:40]
	}
	return strings.Trim(ns, "-") + fmt.Sprintf("-%05d", time.Now().UnixNano()%100000)
}

func (f *fixture) startServer() {
	f.t.Helper()
	f.server = start(f.t, "server", []string{"OUTPOST_ADMIN_TOKEN=" + adminToken},
		"server", "--listen", f.addr, "--data-dir", f.dataDir)
	f.waitFor(30*time.Second, "the server to be ready", func() bool {
		resp, err := http.Get(f.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// outpost creates an outpost and a token of the outposts.machine scope
// for it, and returns the token.
func (f *fixture) outpost(name string) string {
	f.t.Helper()
	ctx := f.t.Context()
	if _, err := f.admin.Outposts.Create(ctx, api.CreateOutpostRequest{Name: name, Platform: api.PlatformLinux}); err != nil {
		f.t.Fatal(err)
	}
	tok, err := f.admin.Tokens.Create(ctx, api.CreateTokenRequest{Name: name + "-pool", Scopes: []string{api.ScopeMachine}, Outpost: name})
	if err != nil {
		f.t.Fatal(err)
	}
	return tok.Secret
}

// pool creates the Secret holding token and an OutpostPool serving
// outpost from this test's server; edit changes the pool before it is
// created.
func (f *fixture) pool(name, outpost, token string, edit func(*v1alpha1.OutpostPool)) *v1alpha1.OutpostPool {
	f.t.Helper()
	ctx := f.t.Context()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name + "-api-token"},
		StringData: map[string]string{"token": token}}
	if err := f.kc.Create(ctx, secret); err != nil {
		f.t.Fatal(err)
	}
	p := &v1alpha1.OutpostPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: v1alpha1.OutpostPoolSpec{
			Outpost:        outpost,
			APIURL:         f.url,
			TokenSecretRef: v1alpha1.SecretKeyRef{Name: secret.Name, Key: "token"},
		},
	}
	if edit != nil {
		edit(p)
	}
	if err := f.kc.Create(ctx, p); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// operator is a running `outpost operator`.
type operator struct {
	*proc
	health, metrics string
}

// operator starts `outpost operator` for the test's namespace, allowed to
// reach the test's server, and waits until it is ready.
func (f *fixture) operator(extra ...string) *operator {
	f.t.Helper()
	o := &operator{health: freeAddr(f.t), metrics: freeAddr(f.t)}
	args := append([]string{"operator", "--kubeconfig", f.kubeconfig, "--namespace", f.ns, "--operator-namespace", f.ns,
		"--metrics-listen", o.metrics, "--health-listen", o.health,
		"--default-api-url", f.url, "--allowed-api-url", f.url, "--worker-image", workerImage}, extra...)
	o.proc = start(f.t, "operator", []string{"KUBECONFIG=/nonexistent"}, args...)
	f.waitFor(30*time.Second, "the operator to be ready", func() bool {
		select {
		case <-o.done:
			f.t.Fatalf("the operator exited: %v\n%s", o.err, o.out.String())
		default:
		}
		resp, err := http.Get("http://" + o.health + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return o
}

// scriptSession creates a script session whose steps run commands.
func (f *fixture) scriptSession(outpost, title string, commands ...string) string {
	f.t.Helper()
	var steps []api.Step
	for _, c := range commands {
		b, _ := json.Marshal(api.ExecArgs{Command: c, TimeoutS: 120})
		steps = append(steps, api.Step{Tool: api.ToolExec, Args: b})
	}
	return f.createSession(api.CreateSessionRequest{Outpost: outpost, Title: title,
		Agent: api.Agent{Kind: api.AgentScript, Steps: steps}})
}

func (f *fixture) createSession(req api.CreateSessionRequest) string {
	f.t.Helper()
	s, err := f.admin.Sessions.Create(f.t.Context(), req)
	if err != nil {
		f.t.Fatal(err)
	}
	return s.Metadata.SessionID
}

func (f *fixture) session(id string) *api.Session {
	f.t.Helper()
	s, err := f.admin.Sessions.Get(f.t.Context(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func (f *fixture) events(id string) []api.Event {
	f.t.Helper()
	var all []api.Event
	after := int64(0)
	for {
		list, err := f.admin.Sessions.Events(f.t.Context(), id, after, 1000)
		if err != nil {
			f.t.Fatal(err)
		}
		all = append(all, list.Items...)
		after = list.Next
		if !list.HasNextPage {
			return all
		}
	}
}

func (f *fixture) transcript(id string) string {
	f.t.Helper()
	b, _ := json.Marshal(f.events(id))
	return string(b)
}

func (f *fixture) queueEntry(id string) *api.QueueEntry {
	f.t.Helper()
	e, err := f.admin.Queue.Get(f.t.Context(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return e
}

// waitFinal waits until the session ends and checks that it finished.
func (f *fixture) waitFinished(id string, within time.Duration) *api.Session {
	f.t.Helper()
	var s *api.Session
	f.waitFor(within, "session "+id+" to end", func() bool {
		s = f.session(id)
		return api.IsFinal(s.Status.Status)
	})
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		f.t.Fatalf("session %s ended %s/%s: %s\n%s", id, s.Status.Status, s.Status.StatusDetail, s.Status.Reason, f.transcript(id))
	}
	return s
}

// waitFor polls cond until it holds or within passes.
func (f *fixture) waitFor(within time.Duration, what string, cond func() bool) {
	f.t.Helper()
	waitfor.Within(f.t, within, what, cond)
}

// managed lists what the operator made in the namespace (its label).
func (f *fixture) managed() (pods []corev1.Pod, secrets []corev1.Secret, claims []corev1.PersistentVolumeClaim) {
	f.t.Helper()
	sel := metav1.ListOptions{LabelSelector: labelManagedBy + "=" + managedBy}
	ctx := f.t.Context()
	pl, err := f.cs.CoreV1().Pods(f.ns).List(ctx, sel)
	if err != nil {
		f.t.Fatal(err)
	}
	sl, err := f.cs.CoreV1().Secrets(f.ns).List(ctx, sel)
	if err != nil {
		f.t.Fatal(err)
	}
	cl, err := f.cs.CoreV1().PersistentVolumeClaims(f.ns).List(ctx, sel)
	if err != nil {
		f.t.Fatal(err)
	}
	return pl.Items, sl.Items, cl.Items
}

// waitNothingLeft waits until the operator's pods, Secrets and claims
// are all gone (keep: claims to keep, by name).
func (f *fixture) waitNothingLeft(within time.Duration, keepClaims ...string) {
	f.t.Helper()
	deadline := time.Now().Add(within)
	for {
		pods, secrets, claims := f.managed()
		var left []string
		for _, p := range pods {
			left = append(left, "pod/"+p.Name)
		}
		for _, s := range secrets {
			left = append(left, "secret/"+s.Name)
		}
		for _, c := range claims {
			if !contains(keepClaims, c.Name) {
				left = append(left, fmt.Sprintf("pvc/%s (finalizers %v)", c.Name, c.Finalizers))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("after %s the operator's objects are still there: %s", within, strings.Join(left, ", "))
		}
		select {
		case <-f.t.Context().Done():
			f.t.Fatal(f.t.Context().Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// dumpPods logs the namespace's pods and the output of their containers.
func (f *fixture) dumpPods() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pl, err := f.cs.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pl.Items {
		var states []string
		for _, c := range p.Status.ContainerStatuses {
			switch st := c.State; {
			case st.Waiting != nil:
				states = append(states, fmt.Sprintf("%s waiting %s %s", c.Name, st.Waiting.Reason, st.Waiting.Message))
			case st.Running != nil:
				states = append(states, c.Name+" running")
			case st.Terminated != nil:
				states = append(states, fmt.Sprintf("%s exited %d %s", c.Name, st.Terminated.ExitCode, st.Terminated.Message))
			}
		}
		f.t.Logf("pod %s (session %s): %s, deleting %v: %s", p.Name, p.Labels[labelSession], p.Status.Phase, p.DeletionTimestamp != nil, strings.Join(states, "; "))
	}
	for _, r := range f.kubelet.Runs() {
		f.t.Logf("--- pod %s container %s (exit %d) ---\n%s", r.Pod, r.Container, r.ExitCode, f.kubelet.Logs(r.Namespace, r.Pod))
	}
}

// watcher records what the namespace holds over a test: the most pods of
// the operator's alive at once (not being deleted) and every version of
// every pod and Secret of the operator's it saw.
type watcher struct {
	mu          sync.Mutex
	live        map[string]bool // pod names, not being deleted
	maxLive     int
	existing    map[string]bool // pod names, deleting or not
	maxExisting int
	pods        map[string][]corev1.Pod // by session id, every version
	podUIDs     map[string]map[string]bool
	secrets     []corev1.Secret
	stop        func()
	done        chan struct{}
}

// watch starts a watcher (informers: a list, then a watch resumed on
// errors); it stops when the test ends.
func (f *fixture) watch() *watcher {
	f.t.Helper()
	w := &watcher{live: map[string]bool{}, existing: map[string]bool{}, pods: map[string][]corev1.Pod{},
		podUIDs: map[string]map[string]bool{}, done: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(f.cs, 0, informers.WithNamespace(f.ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = labelManagedBy + "=" + managedBy }))
	pods := factory.Core().V1().Pods().Informer()
	secrets := factory.Core().V1().Secrets().Informer()
	onPod := func(typ watch.EventType) func(any) {
		return func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				w.pod(typ, p)
			}
		}
	}
	onSecret := func(obj any) {
		if s, ok := obj.(*corev1.Secret); ok {
			w.mu.Lock()
			w.secrets = append(w.secrets, *s)
			w.mu.Unlock()
		}
	}
	_, err1 := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod(watch.Added),
		UpdateFunc: func(_, obj any) { onPod(watch.Modified)(obj) }, DeleteFunc: onPod(watch.Deleted)})
	_, err2 := secrets.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onSecret, UpdateFunc: func(_, obj any) { onSecret(obj) }})
	if err1 != nil || err2 != nil {
		f.t.Fatal(err1, err2)
	}
	stop := make(chan struct{})
	w.stop = func() { close(stop) }
	var wg sync.WaitGroup
	for _, inf := range []cache.SharedIndexInformer{pods, secrets} {
		wg.Add(1)
		go func() { defer wg.Done(); inf.Run(stop) }()
	}
	go func() { wg.Wait(); close(w.done) }()
	f.t.Cleanup(func() { w.stop(); <-w.done })
	if !cache.WaitForCacheSync(f.t.Context().Done(), pods.HasSynced, secrets.HasSynced) {
		f.t.Fatal("the watcher's first list")
	}
	return w
}

func (w *watcher) pod(typ watch.EventType, p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	id := p.Labels[labelSession]
	w.pods[id] = append(w.pods[id], *p)
	if w.podUIDs[id] == nil {
		w.podUIDs[id] = map[string]bool{}
	}
	w.podUIDs[id][string(p.UID)] = true
	if typ == watch.Deleted {
		delete(w.live, p.Name)
		delete(w.existing, p.Name)
		return
	}
	w.existing[p.Name] = true
	if p.DeletionTimestamp == nil {
		w.live[p.Name] = true
	} else {
		delete(w.live, p.Name)
	}
	w.maxLive = max(w.maxLive, len(w.live))
	w.maxExisting = max(w.maxExisting, len(w.existing))
}

// snapshot returns the most pods seen alive and existing at once, every
// pod version and every Secret version seen.
func (w *watcher) snapshot() (maxLive, maxExisting int, pods []corev1.Pod, secrets []corev1.Secret) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ps := range w.pods {
		pods = append(pods, ps...)
	}
	return w.maxLive, w.maxExisting, pods, append([]corev1.Secret(nil), w.secrets...)
}

// podsOf is how many distinct pods (uids) the session had.
func (w *watcher) podsOf(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.podUIDs[id])
}
