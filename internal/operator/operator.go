package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/outpost-sh/outpost/internal/egressproxy"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

const (
	// DefaultLeaderElectionID names the Lease of leader election.
	DefaultLeaderElectionID = "outpost-operator"
	// shutdownTimeout bounds how long a stopping operator waits for its
	// consumers (whose runners leave their pods at once).
	shutdownTimeout = 30 * time.Second
	// kubeTimeout bounds the first call to the Kubernetes API, which tells
	// an unreachable cluster.
	kubeTimeout = 30 * time.Second
)

// Options configure Run. Zero values are documented per field.
type Options struct {
	// Config is how to reach the Kubernetes API. Required.
	Config *rest.Config
	// Namespaces are the namespaces whose pools are served; none means
	// every namespace.
	Namespaces []string
	// MetricsListen is the address of the Prometheus metrics (/metrics);
	// "" or "0" serves none.
	MetricsListen string
	// EgressProxyListen is the address the egress proxy is served on
	// (by the leader only, which serves the sessions); "" or "0" serves
	// none, and pools' sessions with hostname rules are not claimed.
	EgressProxyListen string
	// HealthListen is the address of /healthz and /readyz; "" or "0"
	// serves none.
	HealthListen string
	// LeaderElect makes the operator claim only while it holds the Lease
	// LeaderElectionID (default DefaultLeaderElectionID) in
	// OperatorNamespace.
	LeaderElect      bool
	LeaderElectionID string
	// OperatorNamespace holds the Lease and the acceptor id's ConfigMap;
	// "" means OperatorNamespace("", os.Getenv).
	OperatorNamespace string
	// AllowedAPIURLs are the servers (origins or https://*.domain
	// wildcards) pools may name as their apiUrl, besides DefaultAPIURL.
	AllowedAPIURLs []string
	// DefaultAPIURL is the server of pools that name none; "" means pools
	// must name one.
	DefaultAPIURL string
	// AcceptorID is the operator's identity in claims; "" means the one
	// kept in the ConfigMap AcceptorConfigMap (made at the first start).
	AcceptorID string
	// WorkerImage is the session pods' image when a pool sets none.
	// Required.
	WorkerImage string
	// PodStartTimeout is how long a session's pod may stay without its
	// worker running before it counts as failed (RunnerConfig.StartTimeout);
	// zero means no deadline.
	PodStartTimeout time.Duration
	// CAFile, when set, is a PEM file of CA certificates trusted for the
	// Outpost servers besides the system's.
	CAFile string
	// Registry receives the metrics; nil means controller-runtime's
	// (which the metrics server serves).
	Registry prometheus.Registerer
	// Logger receives the log; nil discards it.
	Logger *slog.Logger

	// leaseDuration, renewDeadline and retryPeriod, when set, replace
	// controller-runtime's leader election timings (tests).
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

// Run runs the operator until ctx ends (nil) or it fails. When ctx ends
// every pool's consumer stops, its pods and claims left for the next
// operator, and the Lease is released.
func Run(ctx context.Context, o Options) error {
	if o.Config == nil {
		return errors.New("operator: Options.Config is required")
	}
	if o.WorkerImage == "" {
		return errors.New("operator: Options.WorkerImage is required")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	allowed := o.AllowedAPIURLs
	if o.DefaultAPIURL != "" {
		allowed = append(allowed[:len(allowed):len(allowed)], o.DefaultAPIURL)
	}
	allow, err := NewAllowList(allowed...)
	if err != nil {
		return err
	}
	hc, err := apiHTTPClient(o.CAFile)
	if err != nil {
		return err
	}
	ns := OperatorNamespace(o.OperatorNamespace, os.Getenv)
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := networkingv1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}

	// The acceptor id is read before the manager starts: a cluster that
	// cannot be reached fails here, with a plain error.
	direct, err := client.New(o.Config, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("connect to the Kubernetes API at %s: %w", o.Config.Host, err)
	}
	actx, cancel := context.WithTimeout(ctx, kubeTimeout)
	acceptor, err := ResolveAcceptorID(actx, direct, ns, o.AcceptorID)
	cancel()
	if err != nil {
		var status apierrors.APIStatus
		switch {
		case ctx.Err() != nil:
			return nil
		case !errors.As(err, &status):
			return fmt.Errorf("cannot reach the Kubernetes API server at %s (check --kubeconfig): %w", o.Config.Host, err)
		}
		return err
	}
	reg := o.Registry
	if reg == nil {
		reg = crmetrics.Registry
	}
	metrics, err := NewMetrics(reg)
	if err != nil {
		return err
	}

	mo := manager.Options{
		Scheme: scheme,
		Logger: logr.FromSlogHandler(log.Handler()),
		Client: client.Options{Cache: &client.CacheOptions{
			// Secrets are read when needed, never listed nor watched: the
			// operator needs no list or watch of Secrets anywhere.
			// NetworkPolicies are read by name and listed seldom (to
			// collect those of gone pods), not worth a watch.
			DisableFor: []client.Object{&corev1.Secret{}, &networkingv1.NetworkPolicy{}},
		}},
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       ns,
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: listenOrOff(o.MetricsListen)},
		HealthProbeBindAddress:        listenOrOff(o.HealthListen),
		GracefulShutdownTimeout:       ptrTo(shutdownTimeout),
	}
	if mo.LeaderElectionID == "" {
		mo.LeaderElectionID = DefaultLeaderElectionID
	}
	if o.leaseDuration > 0 {
		mo.LeaseDuration, mo.RenewDeadline, mo.RetryPeriod = &o.leaseDuration, &o.renewDeadline, &o.retryPeriod
	}
	// Only the operator's pods and volumes are cached: its labels are ones
	// a template cannot override (ownership is still checked by UID).
	managed := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy})
	mo.Cache.ByObject = map[client.Object]cache.ByObject{
		&corev1.Pod{}:                   {Label: managed},
		&corev1.PersistentVolumeClaim{}: {Label: managed},
	}
	if len(o.Namespaces) > 0 {
		mo.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, n := range o.Namespaces {
			mo.Cache.DefaultNamespaces[n] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(o.Config, mo)
	if err != nil {
		return fmt.Errorf("start the controller manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	warm := &cacheWarmer{cache: mgr.GetCache()}
	if err := mgr.AddReadyzCheck("cache", warm.check); err != nil {
		return err
	}
	if err := mgr.Add(warm); err != nil {
		return err
	}
	cons := newConsumers()
	if err := mgr.Add(cons); err != nil {
		return err
	}
	var egress *EgressSessions
	if addr := listenOrOff(o.EgressProxyListen); addr != "0" {
		egress = NewEgressSessions(log.With("component", "egress-proxy"))
		proxy := egressproxy.New(egressproxy.Options{Lookup: egress.Lookup, Report: egress.Report, Logger: log.With("component", "egress-proxy")})
		egress.SetProxy(proxy)
		// A Runnable that needs leader election: only the leader, which
		// serves the sessions, listens.
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("egress proxy: listen on %s: %w", addr, err)
			}
			log.Info("egress proxy listening", "addr", ln.Addr().String())
			var wg sync.WaitGroup
			wg.Go(func() { _ = egress.Run(ctx) })
			err = proxy.Serve(ctx, ln)
			wg.Wait()
			return err
		})); err != nil {
			return err
		}
	}
	r := &poolReconciler{egress: egress,
		kube: mgr.GetClient(), consumers: cons, allow: allow, defaultURL: o.DefaultAPIURL, acceptor: acceptor,
		workerImage: o.WorkerImage, startTimeout: o.PodStartTimeout, http: hc, metrics: metrics, log: log,
		events: make(chan event.GenericEvent, 1024), state: map[types.UID]*poolState{},
		recorder: mgr.GetEventRecorder(ManagedBy),
	}
	if err := r.setup(mgr); err != nil {
		return fmt.Errorf("set up the OutpostPool controller: %w", err)
	}
	log.Info("operator starting", "acceptor_id", acceptor, "operator_namespace", ns, "namespaces", o.Namespaces,
		"leader_elect", o.LeaderElect, "allowed_api_urls", allowed, "worker_image", o.WorkerImage)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	return nil
}

// apiHTTPClient is the client of the pools' servers: it trusts caFile's
// CAs too when set, and follows no redirect, so that a pool's token goes
// nowhere but the allowed server.
func apiHTTPClient(caFile string) (*http.Client, error) {
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if caFile != "" {
		tr, err := tlsconfig.Transport(caFile)
		if err != nil {
			return nil, err
		}
		hc.Transport = tr
	}
	return hc, nil
}

// cacheWarmer starts the informers the controller needs on every replica,
// leader or not, so that a new leader starts at once, and is ready when
// they have synced.
type cacheWarmer struct {
	cache  cache.Cache
	synced atomic.Bool
}

func (w *cacheWarmer) Start(ctx context.Context) error {
	for _, obj := range []client.Object{&v1alpha1.OutpostPool{}, &corev1.Pod{}, &corev1.PersistentVolumeClaim{}} {
		if _, err := w.cache.GetInformer(ctx, obj); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if apimeta.IsNoMatchError(err) {
				return fmt.Errorf("the cluster has no OutpostPool resource: install its CRD (kubectl apply -f deploy/crds/outpost.dev_outpostpools.yaml, or the outpost-operator chart): %w", err)
			}
			return fmt.Errorf("watch %T: %w", obj, err)
		}
	}
	if w.cache.WaitForCacheSync(ctx) {
		w.synced.Store(true)
	}
	return nil
}

// NeedLeaderElection: every replica warms its cache.
func (w *cacheWarmer) NeedLeaderElection() bool { return false }

func (w *cacheWarmer) check(*http.Request) error {
	if !w.synced.Load() {
		return errors.New("the cache of pools, pods and volumes has not synced yet")
	}
	return nil
}

func listenOrOff(addr string) string {
	if addr == "" {
		return "0"
	}
	return addr
}

func ptrTo[T any](v T) *T { return &v }
