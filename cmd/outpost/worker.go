package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/internal/api"
	"github.com/outpost-sh/outpost/internal/worker"
)

// WorkerStartOptions are the settings of `outpost worker start`.
type WorkerStartOptions struct {
	Outpost      string
	SessionID    string
	AcceptorID   string
	Once         bool
	Dir          string
	DataDir      string
	PollInterval time.Duration
	GracePeriod  time.Duration
	LogLevel     string
}

// NewCmdWorker returns `outpost worker`. runF replaces the run of `worker
// start` in tests.
func NewCmdWorker(f *Factory, runF func(context.Context, *WorkerStartOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Serve an outpost's sessions on this machine",
	}
	cmd.AddCommand(newCmdWorkerStart(f, runF), newCmdWorkerOutpost(f))
	return cmd
}

func newCmdWorkerStart(f *Factory, runF func(context.Context, *WorkerStartOptions) error) *cobra.Command {
	opts := &WorkerStartOptions{}
	cmd := &cobra.Command{
		Use:   "start --outpost NAME-OR-ID",
		Short: "Claim and serve sessions from an outpost's queue",
		Long: `Watch an outpost's queue, claim one pending session at a time and serve it
with 'outpost remote serve' started in the workspace directory (--dir; session
repositories live in its repos/ subdirectory). The remote gets only the
session's connect token, never the worker's API token.

The token needs the outposts.machine scope. On SIGINT or SIGTERM the worker
stops claiming, gives the running session --grace-period to finish, then
releases its claim so the session goes back to the queue.`,
		Example: `  outpost worker start --outpost dev
  cd ~/work && OUTPOST_TOKEN=... outpost worker start --outpost gpu-h200 --server https://outpost.example.com
  outpost worker start --outpost dev --session ses_123 --acceptor-id orchestrator-7`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.resolve(cmd.Flags(), f); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runWorkerStart(cmd.Context(), f, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Outpost, "outpost", "", "outpost name or id to serve")
	fl.StringVar(&opts.SessionID, "session", "", "serve just this session, then exit (alias --session-id)")
	fl.StringVar(&opts.AcceptorID, "acceptor-id", "", "identity in claims (env OUTPOST_WORKER_ACCEPTOR_ID; default: generated once and saved in the data dir)")
	fl.BoolVar(&opts.Once, "once", false, "exit after serving one session")
	fl.StringVar(&opts.Dir, "dir", "", "workspace directory the remote runs in (default: the current directory)")
	fl.StringVar(&opts.DataDir, "data-dir", "", "worker data directory (env OUTPOST_WORKER_DATA_DIR; default ~/.outpost/worker)")
	fl.DurationVar(&opts.PollInterval, "poll-interval", worker.DefaultPollInterval, "how often to list the queue when watching it fails")
	fl.DurationVar(&opts.GracePeriod, "grace-period", worker.DefaultGracePeriod, "how long a running session may finish after SIGTERM before its remote is killed")
	fl.StringVar(&opts.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "session-id" {
			name = "session"
		}
		return pflag.NormalizedName(name)
	})
	return cmd
}

// resolve applies environment fallbacks and defaults.
func (o *WorkerStartOptions) resolve(fl *pflag.FlagSet, f *Factory) error {
	if v := f.Getenv("OUTPOST_WORKER_ACCEPTOR_ID"); !fl.Changed("acceptor-id") && v != "" {
		o.AcceptorID = v
	}
	if v := f.Getenv("OUTPOST_WORKER_DATA_DIR"); !fl.Changed("data-dir") && v != "" {
		o.DataDir = v
	}
	if o.DataDir == "" {
		home, err := f.UserHomeDir()
		if err != nil {
			return fmt.Errorf("find the home directory for the worker data dir (set --data-dir): %w", err)
		}
		o.DataDir = filepath.Join(home, ".outpost", "worker")
	}
	if o.Dir == "" {
		wd, err := f.Getwd()
		if err != nil {
			return fmt.Errorf("find the current directory (set --dir): %w", err)
		}
		o.Dir = wd
	}
	if o.Outpost == "" && o.SessionID == "" {
		return usageErrorf("worker start needs --outpost NAME-OR-ID")
	}
	if o.PollInterval <= 0 || o.GracePeriod <= 0 {
		return usageErrorf("--poll-interval and --grace-period must be positive")
	}
	_, err := parseLogLevel(o.LogLevel)
	return err
}

func runWorkerStart(ctx context.Context, f *Factory, o *WorkerStartOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	// The remote and the agent's commands run as this user: keep them out
	// of this process's environment, where the API token is.
	if err := worker.ProtectSecrets(); err != nil {
		slog.Warn("cannot mark the worker not dumpable", "err", err)
	}
	level, _ := parseLogLevel(o.LogLevel)
	// TLS: the global --ca-file (or OUTPOST_CA_FILE) reaches the remotes.
	caFile, err := f.TrustedCAFile()
	if err != nil {
		return err
	}
	return worker.Run(ctx, worker.Options{
		CAFile:       caFile,
		Client:       c,
		Outpost:      o.Outpost,
		SessionID:    o.SessionID,
		AcceptorID:   o.AcceptorID,
		Dir:          o.Dir,
		DataDir:      o.DataDir,
		Once:         o.Once,
		PollInterval: o.PollInterval,
		GracePeriod:  o.GracePeriod,
		Logger:       slog.New(slog.NewTextHandler(f.IO.ErrOut, &slog.HandlerOptions{Level: level})),
		Stdout:       f.IO.Out,
	})
}

// newCmdWorkerOutpost returns `outpost worker outpost`, the fleet-style
// spelling of outpost create and delete.
func newCmdWorkerOutpost(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outpost",
		Short: "Create or delete an outpost (orchestrator scope)",
	}
	create := newCmdOutpostCreate(f)
	create.Example = `  outpost worker outpost create gpu-h200 --platform linux --description "H200 boxes"`
	del := newCmdOutpostDelete(f)
	del.Example = `  outpost worker outpost delete gpu-h200
  outpost worker outpost delete outpost_env-123 --force`
	cmd.AddCommand(create, del)
	return cmd
}

// platformHelp lists the platforms for flag help.
var platformHelp = fmt.Sprintf("%s, %s or %s (default %s)", api.PlatformLinux, api.PlatformMacOS, api.PlatformWindows, api.PlatformLinux)
