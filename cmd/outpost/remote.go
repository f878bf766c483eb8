package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/procguard"
	"github.com/outpost-sh/outpost/internal/remote"
	"github.com/outpost-sh/outpost/internal/sockguard"
	"github.com/outpost-sh/outpost/internal/steptrace"
)

// NewCmdRemote returns `outpost remote`, whose `serve` is the per-session
// process a worker or orchestrator starts under the spawn contract.
func NewCmdRemote(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remote",
		Short: "Serve one session's tool calls on this machine",
	}
	cmd.AddCommand(withVersionFlag(NewCmdRemoteServe(f, nil)))
	return withVersionFlag(cmd)
}

// RemoteServeOptions are the settings of `outpost remote serve`; the
// session comes from the spawn contract's environment.
type RemoteServeOptions struct {
	f         *Factory
	LogLevel  string
	LogFormat string
	// SessionFromStdin makes the remote wait for the session's spawn
	// variables on standard input (remote.ReadSessionEnv): a worker
	// pre-starts its next remote this way. Hidden: not part of the spawn
	// contract.
	SessionFromStdin bool
	// ThenExec, with SessionFromStdin, is the command (its arguments after
	// `--`) that is executed with the session's variables in its
	// environment once they are read: a worker hands a session to another
	// remote build (a pin) this way, so the variables pass through no
	// sandbox's arguments. Hidden, like SessionFromStdin.
	ThenExec []string
}

// NewCmdRemoteServe returns `outpost remote serve`. runF replaces the run in
// tests.
func NewCmdRemoteServe(f *Factory, runF func(context.Context, *RemoteServeOptions) error) *cobra.Command {
	opts := &RemoteServeOptions{f: f}
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Dial the gateway and run one session's tool calls",
		Long: `Dial the gateway and run one session's tool calls in the current directory.
Workers start it for you. An orchestrator that claims sessions itself starts
it with a clean environment holding, from the claim, the gateway URL, the
connect token and the session id (all three required, set together), and a
state dir of its own per session, each under its Outpost name or the public
Outposts contract's name (the Outpost name wins when both are set):

` + envHelp(api.SpawnEnv) + `
A gateway URL without a path (wss://outpost.example.com) means its
/v1/gateway. OUTPOST_CA_FILE names CA certificates to trust when the
gateway's certificate is signed by a private CA. The agent's commands inherit the rest of the environment, but
never the connect token or gateway URL, and the remote is not dumpable, so
they cannot read the connect token from its /proc/PID/environ either. It
exits 0 when the session ends or sleeps, and 4 when the gateway keeps
refusing it (another remote serves the session, or the claim ended or
moved): its claimer must then leave the claim alone.`,
		Example: `  env -i PATH="$PATH" HOME="$HOME" \
    OUTPOST_GATEWAY_URL=ws://127.0.0.1:7420/v1/gateway OUTPOST_CONNECT_TOKEN=... \
    OUTPOST_SESSION_ID=sess_... OUTPOST_STATE_DIR=/var/lib/outpost/sess_... \
    outpost remote serve
  env -i PATH="$PATH" HOME="$HOME" \
    DEVIN_OUTPOST_GATEWAY_URL=ws://127.0.0.1:7420/v1/gateway DEVIN_OUTPOST_CONNECT_TOKEN=... \
    DEVIN_OUTPOST_SESSION_ID=sess_... DEVIN_REMOTE_STATE_DIR=/var/lib/outpost/sess_... \
    outpost remote serve`,
		Args: func(cmd *cobra.Command, args []string) error {
			if then, _ := cmd.Flags().GetBool("then-exec"); then {
				return nil
			}
			return exactArgs(0, "")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := resolveLog(cmd.Flags(), f.Getenv, &opts.LogLevel, &opts.LogFormat); err != nil {
				return err
			}
			if then, _ := cmd.Flags().GetBool("then-exec"); then {
				if !opts.SessionFromStdin || len(args) == 0 {
					return usageErrorf("--then-exec takes --session-from-stdin and a command after --")
				}
				opts.ThenExec = args
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runRemoteServe(cmd.Context(), opts)
		},
	}
	addLogFlags(serve.Flags(), &opts.LogLevel, &opts.LogFormat)
	serve.Flags().BoolVar(&opts.SessionFromStdin, "session-from-stdin", false,
		"wait for the session's spawn variables on standard input (KEY=VALUE lines until EOF), as a worker's pre-started remote")
	_ = serve.Flags().MarkHidden("session-from-stdin")
	serve.Flags().Bool("then-exec", false,
		"with --session-from-stdin: once the session is read, execute the command given after -- with it in the environment")
	_ = serve.Flags().MarkHidden("then-exec")
	return serve
}

func runRemoteServe(ctx context.Context, o *RemoteServeOptions) error {
	f := o.f
	logger := newLogger(f.IO.ErrOut, o.LogLevel, o.LogFormat)
	// The agent's commands run as this user: keep them out of this
	// process's environment, where the connect token is.
	if err := procguard.NotDumpable(); err != nil {
		logger.Warn("cannot mark the remote not dumpable", "err", err)
	}
	// In a restricted session's namespace, close the socket families no
	// namespace confines before any session code runs; a remote that
	// cannot starts nothing.
	if err := sockguard.Apply(); err != nil {
		return fmt.Errorf("restricted session: %w", err)
	}
	if o.SessionFromStdin {
		// Pre-started by a worker: start-up is done; wait for the session.
		got, err := remote.ReadSessionEnv(f.IO.In, os.Setenv)
		if err != nil {
			return err
		}
		if !got {
			return nil // the worker stopped before handing over a session
		}
		steptrace.Mark("remote.session_read", os.Getenv(api.EnvSessionID.Name))
		if len(o.ThenExec) > 0 {
			return execRemote(o.ThenExec)
		}
	}
	opts, err := remote.OptionsFromEnv()
	if err != nil {
		return err
	}
	if f.CAFile != "" { // else OUTPOST_CA_FILE, read by OptionsFromEnv
		if opts.HTTPClient, err = f.HTTPClient(); err != nil {
			return err
		}
	}
	opts.Logger = logger
	err = remote.Serve(ctx, opts)
	switch {
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("stopped by a signal before session %s ended", opts.SessionID)
	case errors.Is(err, remote.ErrRejected):
		return codeError{exitRejected, err}
	}
	return err
}
