package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/operator"
)

// workerImageRepo is the image of session pods, tagged with this build's
// version by default (the Dockerfile's worker target).
const workerImageRepo = "ghcr.io/outpost-sh/outpost-worker"

// OperatorOptions are the settings of `outpost operator`.
type OperatorOptions struct {
	f                 *Factory
	Kubeconfig        string
	Namespaces        []string
	MetricsListen     string
	HealthListen      string
	LeaderElect       bool
	LeaderElectionID  string
	OperatorNamespace string
	AllowedAPIURLs    []string
	DefaultAPIURL     string
	AcceptorID        string
	WorkerImage       string
	LogLevel          string
	LogFormat         string
}

// NewCmdOperator returns `outpost operator`. runF replaces the run in
// tests.
func NewCmdOperator(f *Factory, runF func(context.Context, *OperatorOptions) error) *cobra.Command {
	opts := &OperatorOptions{f: f}
	cmd := &cobra.Command{
		Use:   "operator [--namespace NS]... --default-api-url URL",
		Short: "Serve OutpostPools in a Kubernetes cluster, a pod per session",
		Long: `Run the Kubernetes operator: for each OutpostPool (outpost.dev/v1alpha1,
deploy/crds) it watches the pool's outpost queue and claims up to
maxConcurrentSessions sessions, giving each a Pod of its own and a Secret that
holds only the session's connect token. The pool's token, read from its
tokenSecretRef, stays with the operator, and is sent only to a server the
operator allows: a pool's apiUrl must be --default-api-url or one of the
--allowed-api-url origins (scheme, host and port; https://*.example.com
matches one label), else the pool is Degraded and nothing is sent.

The Kubernetes API is found as kubectl does: --kubeconfig, else $KUBECONFIG,
else the in-cluster service account, else ~/.kube/config. With --leader-elect
only the holder of the Lease --leader-election-id in --operator-namespace
(default $POD_NAMESPACE) claims. On SIGTERM the session pods keep running and
their claims are kept; the next operator adopts them. The acceptor id is
--acceptor-id, else the one in ConfigMap outpost-operator-acceptor-id of the
operator namespace, made at the first start.

Serves /healthz and /readyz on --health-listen and Prometheus metrics
(outpost_operator_*) on --metrics-listen; "0" turns either off.`,
		Example: `  outpost operator --default-api-url https://outpost.example.com
  outpost operator --namespace team-a --namespace team-b --leader-elect \
    --default-api-url http://outpost.outpost.svc:7420 --allowed-api-url 'https://*.outposts.example.com'
  outpost operator --kubeconfig ~/.kube/dev --default-api-url http://127.0.0.1:7420 --metrics-listen 0`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.resolve(cmd.Flags(), f); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runOperator(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Kubeconfig, "kubeconfig", "", "kubeconfig file of the cluster (default $KUBECONFIG, else in-cluster, else ~/.kube/config)")
	fl.StringArrayVar(&opts.Namespaces, "namespace", nil, "namespace whose pools to serve, repeatable (default every namespace)")
	fl.StringVar(&opts.MetricsListen, "metrics-listen", ":8080", `address to serve Prometheus metrics on (/metrics); "0" serves none`)
	fl.StringVar(&opts.HealthListen, "health-listen", ":8081", `address to serve /healthz and /readyz on; "0" serves none`)
	fl.BoolVar(&opts.LeaderElect, "leader-elect", false, "claim only while holding the leader election Lease (for more than one replica)")
	fl.StringVar(&opts.LeaderElectionID, "leader-election-id", operator.DefaultLeaderElectionID, "name of the leader election Lease")
	fl.StringVar(&opts.OperatorNamespace, "operator-namespace", "", "namespace of the Lease and the acceptor id's ConfigMap (default $POD_NAMESPACE, else the service account's, else default)")
	fl.StringArrayVar(&opts.AllowedAPIURLs, "allowed-api-url", nil, "server origin pools may name as apiUrl, e.g. https://outpost.example.com or https://*.example.com, repeatable (default only --default-api-url)")
	fl.StringVar(&opts.DefaultAPIURL, "default-api-url", "", "Outpost server of pools that name no apiUrl")
	fl.StringVar(&opts.AcceptorID, "acceptor-id", "", "identity in claims (default: generated once and kept in ConfigMap "+operator.AcceptorConfigMap+")")
	fl.StringVar(&opts.WorkerImage, "worker-image", workerImageRepo+":"+version, "image of session pods whose pool sets none")
	addLogFlags(fl, &opts.LogLevel, &opts.LogFormat)
	return cmd
}

func (o *OperatorOptions) resolve(fl *pflag.FlagSet, f *Factory) error {
	env := envFallback{fl: fl, getenv: f.Getenv}
	env.string("ca-file", envCAFile, &f.CAFile)
	if o.DefaultAPIURL == "" && len(o.AllowedAPIURLs) == 0 {
		return usageErrorf("operator needs --default-api-url or --allowed-api-url: without one no pool may send its token anywhere")
	}
	for _, u := range o.AllowedAPIURLs {
		if _, err := operator.NewAllowList(u); err != nil {
			return usageErrorf("--allowed-api-url: %v", err)
		}
	}
	if o.DefaultAPIURL != "" {
		if _, err := operator.NewAllowList(o.DefaultAPIURL); err != nil || strings.Contains(o.DefaultAPIURL, "*") {
			if err == nil {
				err = fmt.Errorf("%q is a wildcard, not a server", o.DefaultAPIURL)
			}
			return usageErrorf("--default-api-url: %v", err)
		}
	}
	for _, ns := range append([]string{o.OperatorNamespace}, o.Namespaces...) {
		if errs := validation.IsDNS1123Label(ns); ns != "" && len(errs) > 0 {
			return usageErrorf("namespace %q is not valid: %s", ns, strings.Join(errs, "; "))
		}
	}
	if o.AcceptorID != "" {
		if err := api.ValidateAcceptorID(o.AcceptorID); err != nil {
			return usageErrorf("--acceptor-id: %v", err)
		}
	}
	if errs := validation.IsDNS1123Subdomain(o.LeaderElectionID); len(errs) > 0 {
		return usageErrorf("--leader-election-id %q is not a valid Lease name: %s", o.LeaderElectionID, strings.Join(errs, "; "))
	}
	for name, addr := range map[string]string{"--metrics-listen": o.MetricsListen, "--health-listen": o.HealthListen} {
		if addr == "0" || addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return usageErrorf("%s %q is not an address (HOST:PORT or :PORT; 0 for none)", name, addr)
		}
	}
	if o.WorkerImage == "" {
		return usageErrorf("--worker-image must not be empty")
	}
	return resolveLog(fl, f.Getenv, &o.LogLevel, &o.LogFormat)
}

func runOperator(ctx context.Context, o *OperatorOptions) error {
	f := o.f
	log := newLogger(f.IO.ErrOut, o.LogLevel, o.LogFormat)
	// controller-runtime and client-go log through globals of their own.
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
	klog.SetSlogLogger(log)
	cfg, err := kubeConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	caFile, err := f.TrustedCAFile()
	if err != nil {
		return err
	}
	return operator.Run(ctx, operator.Options{
		Config: cfg, Namespaces: o.Namespaces, MetricsListen: o.MetricsListen, HealthListen: o.HealthListen,
		LeaderElect: o.LeaderElect, LeaderElectionID: o.LeaderElectionID, OperatorNamespace: o.OperatorNamespace,
		AllowedAPIURLs: o.AllowedAPIURLs, DefaultAPIURL: o.DefaultAPIURL, AcceptorID: o.AcceptorID,
		WorkerImage: o.WorkerImage, CAFile: caFile, Logger: log,
	})
}

// The operator's client-side rate limit on the Kubernetes API. client-go's
// default (5 requests/s, bursts of 10) made a claimed session wait about a
// second for its Secret and Pod (docs/benchmarks.md); each session costs a
// handful of writes, and reads come from the cache.
const (
	kubeQPS   = 50
	kubeBurst = 100
)

// kubeConfig loads the Kubernetes API's configuration: the kubeconfig
// file when given, else as controller-runtime finds it.
func kubeConfig(path string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("read kubeconfig: %w", err)
		}
		if cfg, err = clientcmd.BuildConfigFromFlags("", path); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
		}
	} else if cfg, err = ctrlconfig.GetConfig(); err != nil {
		return nil, fmt.Errorf("find the Kubernetes API (pass --kubeconfig, set KUBECONFIG, or run in a cluster): %w", err)
	}
	cfg.QPS, cfg.Burst = kubeQPS, kubeBurst
	return cfg, nil
}
