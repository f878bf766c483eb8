//go:build !windows

package operator

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outpost-sh/outpost/api"
	outpost "github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
	"github.com/outpost-sh/outpost/internal/waitfor"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

const testWorkerImage = "ghcr.io/outpost-sh/outpost-worker:test"

// namespace creates a namespace of the test's own.
func namespace(t *testing.T, ctx context.Context) string {
	t.Helper()
	needKube(t)
	ns := "t-" + rand.String(8)
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns
}

// outpostEnv is a real Outpost server over loopback with an outpost "dev"
// and a token of the outposts.machine scope, behind a proxy that counts
// requests by kind.
type outpostEnv struct {
	t     *testing.T
	admin *outpost.Client
	url   string // the proxy's
	token string // outposts.machine
	mu    sync.Mutex
	hits  map[string]int
	// down makes the proxy answer every request 502.
	down atomic.Bool
}

func newOutpostEnv(t *testing.T) *outpostEnv {
	t.Helper()
	ctx := t.Context()
	srv := servertest.Start(t, server.Options{})
	e := &outpostEnv{t: t, hits: map[string]int{}}
	e.url = countingProxy(t, srv.URL(), e.count, &e.down)
	e.admin = srv.Client
	if _, err := e.admin.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "dev", Platform: api.PlatformLinux}); err != nil {
		t.Fatalf("create outpost: %v", err)
	}
	tok, err := e.admin.Tokens.Create(ctx, api.CreateTokenRequest{Name: "pool", Scopes: []string{api.ScopeMachine}})
	if err != nil {
		t.Fatalf("create token: %v", err)
	}
	e.token = tok.Secret
	return e
}

func (e *outpostEnv) count(r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hits["all"]++
	if strings.HasSuffix(r.URL.Path, "/release") {
		e.hits["release"]++
	}
}

func (e *outpostEnv) hitsOf(what string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hits[what]
}

// countingProxy serves target through a proxy that calls seen for every
// request, returning the proxy's URL.
func countingProxy(t *testing.T, target string, seen func(*http.Request), down *atomic.Bool) string {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen(r)
		if down != nil && down.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	return proxy.URL
}

// session creates a pending session on the outpost.
func (e *outpostEnv) session(ctx context.Context) string {
	e.t.Helper()
	s, err := e.admin.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: "dev", Prompt: "test",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}})
	if err != nil {
		e.t.Fatalf("create session: %v", err)
	}
	return s.Metadata.SessionID
}

// claims returns the sessions acceptor holds claims on.
func (e *outpostEnv) claims(ctx context.Context, acceptor string) []string {
	e.t.Helper()
	var ids []string
	err := eachEntry(ctx, e.admin, outpost.QueueFilter{Phase: api.PhaseClaimed, AcceptorID: acceptor, First: 200}, func(q api.QueueEntry) {
		ids = append(ids, q.Metadata.SessionID)
	})
	if err != nil {
		e.t.Fatalf("list claims: %v", err)
	}
	return ids
}

// testOperator is an operator run by a test.
type testOperator struct {
	opts Options
	reg  prometheus.Registerer
	m    *Metrics
	stop func() // cancels Run and waits for it
}

// startOperator runs the operator on the test's namespace ns until the
// test ends (or stop is called).
func startOperator(t *testing.T, opts Options) *testOperator {
	t.Helper()
	needKube(t)
	opts.Config = kubeConfig
	if opts.WorkerImage == "" {
		opts.WorkerImage = testWorkerImage
	}
	if opts.MetricsListen == "" {
		opts.MetricsListen = "0"
	}
	if opts.HealthListen == "" {
		opts.HealthListen = "0"
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	reg := opts.Registry
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	m, err := NewMetrics(reg) // the same collectors Run registers
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts) }()
	var once sync.Once
	to := &testOperator{opts: opts, reg: reg, m: m}
	to.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("operator: %v", err)
				}
			case <-time.After(testTimeout):
				t.Errorf("the operator did not stop within %s", testTimeout)
			}
		})
	}
	t.Cleanup(to.stop)
	return to
}

// count returns the value of a pool's counter.
func count(c *prometheus.CounterVec, pool string) int {
	return int(testutil.ToFloat64(c.WithLabelValues(pool)))
}

// newPool creates a pool of the outpost "dev" at apiURL with a token
// Secret holding token, and returns it.
func newPool(t *testing.T, ctx context.Context, ns, name, apiURL, token string, capacity int32) *v1alpha1.OutpostPool {
	t.Helper()
	needKube(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-token"},
		StringData: map[string]string{"token": token}}
	if err := kube.Create(ctx, secret); err != nil {
		t.Fatalf("create token Secret: %v", err)
	}
	p := &v1alpha1.OutpostPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.OutpostPoolSpec{Outpost: "dev", APIURL: apiURL, MaxConcurrentSessions: &capacity,
			TokenSecretRef: v1alpha1.SecretKeyRef{Name: secret.Name}}}
	if err := kube.Create(ctx, p); err != nil {
		t.Fatalf("create pool: %v", err)
	}
	return p
}

// getPool reads the pool through the uncached client.
func getPool(t *testing.T, ctx context.Context, key client.ObjectKey) *v1alpha1.OutpostPool {
	t.Helper()
	var p v1alpha1.OutpostPool
	if err := kube.Get(ctx, key, &p); err != nil {
		t.Fatalf("get pool: %v", err)
	}
	return &p
}

// waitPool waits until the pool satisfies cond, and returns it.
func waitPool(t *testing.T, ctx context.Context, key client.ObjectKey, what string, cond func(*v1alpha1.OutpostPool) bool) *v1alpha1.OutpostPool {
	t.Helper()
	var last *v1alpha1.OutpostPool
	waitFor(t, ctx, what, func() bool {
		last = getPool(t, ctx, key)
		return cond(last)
	}, func() string { s, _ := json.Marshal(last.Status); return string(s) })
	return last
}

// waitFor polls cond until it holds or ctx ends (failing the test with
// detail's text).
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool, detail func() string) {
	t.Helper()
	if waitfor.Poll(ctx, cond) {
		return
	}
	d := ""
	if detail != nil {
		d = ": " + detail()
	}
	t.Fatalf("timed out waiting for %s%s", what, d)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}
