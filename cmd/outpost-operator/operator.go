package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

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
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// workerImageRepo is the image of session pods, tagged with this build's
// version by default (the Dockerfile's worker target).
const workerImageRepo = "ghcr.io/outpost-sh/outpost-worker"

// Options are the settings of `outpost-operator`: those of the command
// itself, and the operator's own, which its flags fill in place.
type Options struct {
	// Getenv reads the environment (os.Getenv outside tests).
	Getenv     func(string) string
	ErrOut     io.Writer
	Kubeconfig string
	LogLevel   string
	LogFormat  string
	// Options are the operator's settings; runOperator adds the Kubernetes
	// configuration and the logger.
	operator.Options
}

// newCmd returns the outpost-operator command. runF replaces the run in
// tests.
func newCmd(getenv func(string) string, errOut io.Writer, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{Getenv: getenv, ErrOut: errOut}
	cmd := &cobra.Command{
		Use:   "outpost-operator [--namespace NS]... --default-api-url URL",
		Short: "Serve OutpostPools in a Kubernetes cluster, a pod per session",
		Long: `Run the Kubernetes operator (also started as ` + "`outpost operator`" + `, which runs this
program): for each OutpostPool (outpost.dev/v1alpha1,
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
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("%s takes no arguments", cmd.CommandPath())
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.resolve(cmd.Flags()); err != nil {
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
	fl.StringVar(&opts.EgressProxyListen, "egress-proxy-listen", "", `address to serve the egress proxy on, e.g. :3128, which enforces restricted sessions' hostname rules for pools that name it (spec.network.egressProxy); "" serves none`)
	fl.BoolVar(&opts.LeaderElect, "leader-elect", false, "claim only while holding the leader election Lease (for more than one replica)")
	fl.StringVar(&opts.LeaderElectionID, "leader-election-id", operator.DefaultLeaderElectionID, "name of the leader election Lease")
	fl.StringVar(&opts.OperatorNamespace, "operator-namespace", "", "namespace of the Lease and the acceptor id's ConfigMap (default $POD_NAMESPACE, else the service account's, else default)")
	fl.StringArrayVar(&opts.AllowedAPIURLs, "allowed-api-url", nil, "server origin pools may name as apiUrl, e.g. https://outpost.example.com or https://*.example.com, repeatable (default only --default-api-url)")
	fl.StringVar(&opts.DefaultAPIURL, "default-api-url", "", "Outpost server of pools that name no apiUrl")
	fl.StringVar(&opts.AcceptorID, "acceptor-id", "", "identity in claims (default: generated once and kept in ConfigMap "+operator.AcceptorConfigMap+")")
	fl.StringVar(&opts.WorkerImage, "worker-image", workerImageRepo+":"+version, "image of session pods whose pool sets none")
	fl.DurationVar(&opts.PodStartTimeout, "pod-start-timeout", 10*time.Minute, "how long a session's pod may stay without its worker running (unschedulable, an image that cannot be pulled) before it counts as failed toward the pool's restartLimit; 0 for no deadline")
	fl.StringVar(&opts.CAFile, "ca-file", "", "PEM file of CA certificates to trust for the Outpost API besides the system's (env "+tlsconfig.EnvCAFile+")")
	fl.StringVar(&opts.LogLevel, "log-level", "info", "log level: debug, info, warn or error (env "+api.EnvLogLevel.Name+")")
	fl.StringVar(&opts.LogFormat, "log-format", "text", "log format: text (key=value lines) or json (one JSON object a line) (env "+api.EnvLogFormat.Name+")")
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	return cmd
}

func (o *Options) resolve(fl *pflag.FlagSet) error {
	for flag, env := range map[string]struct {
		name string
		dst  *string
	}{"ca-file": {tlsconfig.EnvCAFile, &o.CAFile}, "log-level": {api.EnvLogLevel.Name, &o.LogLevel}, "log-format": {api.EnvLogFormat.Name, &o.LogFormat}} {
		if v := o.Getenv(env.name); v != "" && !fl.Changed(flag) {
			*env.dst = v
		}
	}
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
	for name, addr := range map[string]string{"--metrics-listen": o.MetricsListen, "--health-listen": o.HealthListen, "--egress-proxy-listen": o.EgressProxyListen} {
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
	if o.PodStartTimeout < 0 {
		return usageErrorf("--pod-start-timeout must not be negative (0 for no deadline)")
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToLower(o.LogLevel))); err != nil {
		return usageErrorf("--log-level must be debug, info, warn or error, not %q", o.LogLevel)
	}
	if f := strings.ToLower(o.LogFormat); f != "text" && f != "json" {
		return usageErrorf("--log-format must be text or json, not %q", o.LogFormat)
	}
	if o.CAFile != "" {
		abs, err := filepath.Abs(o.CAFile)
		if err != nil {
			return fmt.Errorf("CA file %s: %w", o.CAFile, err)
		}
		o.CAFile = abs
	}
	return nil
}

// logger is the operator's log, on ErrOut at the resolved level and format.
func (o *Options) logger() *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(strings.ToLower(o.LogLevel)))
	h := &slog.HandlerOptions{Level: l}
	if strings.EqualFold(o.LogFormat, "json") {
		return slog.New(slog.NewJSONHandler(o.ErrOut, h))
	}
	return slog.New(slog.NewTextHandler(o.ErrOut, h))
}

func runOperator(ctx context.Context, o *Options) error {
	log := o.logger()
	// controller-runtime and client-go log through globals of their own.
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
	klog.SetSlogLogger(log)
	cfg, err := kubeConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	run := o.Options
	run.Config, run.Logger = cfg, log
	return operator.Run(ctx, run)
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
