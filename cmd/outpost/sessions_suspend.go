package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
)

// suspendTimeout bounds the wait for a suspend: the server's own bound on
// the remote's snapshot.
const suspendTimeout = 20 * time.Minute

// SessionsSuspendOptions are the settings of `outpost sessions suspend`.
type SessionsSuspendOptions struct {
	f *Factory
	// ID is the session (the argument).
	ID string
}

// NewCmdSessionsSuspend returns `outpost sessions suspend`. runF replaces
// the run in tests.
func NewCmdSessionsSuspend(f *Factory, runF func(context.Context, *SessionsSuspendOptions) error) *cobra.Command {
	opts := &SessionsSuspendOptions{f: f}
	return &cobra.Command{
		Use:   "suspend ID",
		Short: "Suspend a running session, keeping its workspace",
		Long: `Suspend a running session: its machine takes a snapshot of the workspace
(repositories with uncommitted and untracked changes, and every other file;
not processes or memory), uploads it to the server and is released. The
command returns once the session is suspended. Resume it with
'outpost sessions resume' (or, for an llm session, by sending it a message).`,
		Example: `  outpost sessions suspend devin-123`,
		Args:    exactArgs(1, "a session id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsSuspend(cmd.Context(), opts)
		},
	}
}

func runSessionsSuspend(ctx context.Context, opts *SessionsSuspendOptions) error {
	c, err := opts.f.Client()
	if err != nil {
		return err
	}
	// A large workspace takes a while to archive and upload.
	ctx, cancel := context.WithTimeout(ctx, suspendTimeout)
	defer cancel()
	s, err := c.Sessions.Suspend(ctx, opts.ID)
	if err != nil {
		return err
	}
	return printSessionState(opts.f, s)
}

// SessionsResumeOptions are the settings of `outpost sessions resume`.
type SessionsResumeOptions struct {
	f *Factory
	// ID is the session (the argument).
	ID string
}

// NewCmdSessionsResume returns `outpost sessions resume`. runF replaces the
// run in tests.
func NewCmdSessionsResume(f *Factory, runF func(context.Context, *SessionsResumeOptions) error) *cobra.Command {
	opts := &SessionsResumeOptions{f: f}
	return &cobra.Command{
		Use:   "resume ID",
		Short: "Resume a suspended session on the next free machine",
		Long: `Resume a suspended session: it goes back to its outpost's queue, and the
next machine restores its workspace snapshot before it runs any call.`,
		Example: `  outpost sessions resume devin-123`,
		Args:    exactArgs(1, "a session id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsResume(cmd.Context(), opts)
		},
	}
}

func runSessionsResume(ctx context.Context, opts *SessionsResumeOptions) error {
	c, err := opts.f.Client()
	if err != nil {
		return err
	}
	s, err := c.Sessions.Resume(ctx, opts.ID)
	if err != nil {
		return err
	}
	return printSessionState(opts.f, s)
}

// printSessionState prints a session's new state, or the session as JSON.
func printSessionState(f *Factory, s *api.Session) error {
	if f.JSON() {
		return printJSON(f.IO.Out, s)
	}
	fmt.Fprintf(f.IO.Out, "Session %s is %s.\n", s.Metadata.SessionID, statusText(s.Status.Status, s.Status.StatusDetail))
	return nil
}
