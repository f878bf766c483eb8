package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/internal/orchestrator"
)

// OrchestrateOptions are the settings of `outpost orchestrate`.
type OrchestrateOptions struct {
	Outpost       string
	Backend       string
	MaxConcurrent int
	StateDir      string
	AcceptorID    string
	ProvisionCmd  string
	TeardownCmd   string
	StatusCmd     string
	MetricsListen string
	PollInterval  time.Duration
	RetryAfter    time.Duration
	LogLevel      string
}

// NewCmdOrchestrate returns `outpost orchestrate`.
func NewCmdOrchestrate(f *Factory) *cobra.Command {
	opts := &OrchestrateOptions{}
	cmd := &cobra.Command{
		Use:   "orchestrate --outpost NAME --backend process|exec --max-concurrent N",
		Short: "Provision a machine per session of an outpost's queue",
		Long: `Watch an outpost's queue and serve up to --max-concurrent sessions at once,
each on a machine of its own: claim the session, provision the machine, start
'outpost remote serve' in it with only the session's connect token, renew the
claim, and tear the machine down and release the claim when the session or
its remote ends. On SIGTERM every machine is torn down and every claim
released. Machines are named outpost-<session id>; a restarted orchestrator
adopts or removes the ones a crashed run left in --state-dir.

Backends: process (a child process in a fresh workspace under the state dir)
and exec (--provision-cmd, --teardown-cmd and optional --status-cmd, run with
sh -c; see docs/orchestration.md). The token needs the outposts.machine scope.`,
		Example: `  outpost orchestrate --outpost dev --backend process --max-concurrent 4
  outpost orchestrate --outpost gpu --backend exec --max-concurrent 8 \
    --provision-cmd ./provision.sh --teardown-cmd ./teardown.sh --metrics-listen 127.0.0.1:9464`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.resolve(f); err != nil {
				return err
			}
			return runOrchestrate(cmd.Context(), f, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Outpost, "outpost", "", "outpost name or id to serve")
	fl.StringVar(&opts.Backend, "backend", "process", "machine backend: process or exec")
	fl.IntVar(&opts.MaxConcurrent, "max-concurrent", 1, "most sessions served at once")
	fl.StringVar(&opts.StateDir, "state-dir", "", "state directory: acceptor id, cursor, machine workspaces (default ~/.outpost/orchestrator)")
	fl.StringVar(&opts.AcceptorID, "acceptor-id", "", "identity in claims (default: generated once and saved in the state dir)")
	fl.StringVar(&opts.ProvisionCmd, "provision-cmd", "", "exec backend: command that creates the machine and starts the remote")
	fl.StringVar(&opts.TeardownCmd, "teardown-cmd", "", "exec backend: command that removes the machine")
	fl.StringVar(&opts.StatusCmd, "status-cmd", "", "exec backend: command that exits 0 while the machine runs (optional)")
	fl.StringVar(&opts.MetricsListen, "metrics-listen", "", "address to serve Prometheus metrics on (/metrics)")
	fl.DurationVar(&opts.PollInterval, "poll-interval", orchestrator.DefaultPollInterval, "how often to list the whole queue")
	fl.DurationVar(&opts.RetryAfter, "retry-after", orchestrator.DefaultRetryAfter, "how long to leave a session whose provisioning failed before trying it again")
	fl.StringVar(&opts.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

func (o *OrchestrateOptions) resolve(f *Factory) error {
	if o.Outpost == "" {
		return usageErrorf("orchestrate needs --outpost NAME-OR-ID")
	}
	if o.MaxConcurrent < 1 {
		return usageErrorf("--max-concurrent must be at least 1")
	}
	switch o.Backend {
	case "process":
	case "exec":
		if o.ProvisionCmd == "" || o.TeardownCmd == "" {
			return usageErrorf("the exec backend needs --provision-cmd and --teardown-cmd")
		}
	default:
		return usageErrorf("--backend must be process or exec, not %q", o.Backend)
	}
	if o.StateDir == "" {
		home, err := f.UserHomeDir()
		if err != nil {
			return fmt.Errorf("find the home directory (set --state-dir): %w", err)
		}
		o.StateDir = filepath.Join(home, ".outpost", "orchestrator")
	}
	_, err := parseLogLevel(o.LogLevel)
	return err
}

func runOrchestrate(ctx context.Context, f *Factory, o *OrchestrateOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	level, _ := parseLogLevel(o.LogLevel)
	log := slog.New(slog.NewTextHandler(f.IO.ErrOut, &slog.HandlerOptions{Level: level}))
	var backend orchestrator.Backend = orchestrator.ProcessBackend{}
	if o.Backend == "exec" {
		backend = orchestrator.ExecBackend{ProvisionCmd: o.ProvisionCmd, TeardownCmd: o.TeardownCmd, StatusCmd: o.StatusCmd}
	}
	metrics := orchestrator.NewMetrics()
	if o.MetricsListen != "" {
		ln, err := net.Listen("tcp", o.MetricsListen)
		if err != nil {
			return fmt.Errorf("listen for metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.Handler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Warn("metrics server", "err", err)
			}
		}()
		defer srv.Close()
		log.Info("serving metrics", "addr", ln.Addr().String())
	}
	return orchestrator.Run(ctx, orchestrator.Options{
		Client: c, Outpost: o.Outpost, StateDir: o.StateDir, Backend: backend, MaxConcurrent: o.MaxConcurrent,
		AcceptorID: o.AcceptorID, PollInterval: o.PollInterval, RetryAfter: o.RetryAfter, Logger: log, Metrics: metrics,
	})
}
