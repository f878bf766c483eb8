package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

// SessionsRerunOptions are the settings of `outpost sessions rerun`.
type SessionsRerunOptions struct {
	f *Factory
	// ID is the session to run again (the argument).
	ID string
	// Follow prints the new session's transcript until it ends.
	Follow bool
}

// NewCmdSessionsRerun returns `outpost sessions rerun`. runF replaces the
// run in tests.
func NewCmdSessionsRerun(f *Factory, runF func(context.Context, *SessionsRerunOptions) error) *cobra.Command {
	opts := &SessionsRerunOptions{f: f}
	cmd := &cobra.Command{
		Use:   "rerun ID",
		Short: "Run a session again: a new session with its spec and secrets",
		Long: `Create a new session on the same outpost with the spec of session ID: its
title, prompt, repos, agent, env, limits, pins and own network policy, and
the same secrets, which the server copies without showing them. Prints the
new session's id; with --follow, its transcript until it ends.`,
		Example: `  outpost sessions rerun ses_01J9Z4 --follow`,
		Args:    exactArgs(1, "a session id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsRerun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Follow, "follow", false, "print the new session's transcript until it ends")
	return cmd
}

func runSessionsRerun(ctx context.Context, opts *SessionsRerunOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	s, err := c.Sessions.Rerun(ctx, opts.ID)
	if err != nil {
		return err
	}
	id := s.Metadata.SessionID
	switch {
	case f.JSON() && !opts.Follow:
		return printJSON(f.IO.Out, s)
	case !opts.Follow:
		fmt.Fprintln(f.IO.Out, id)
		return nil
	}
	fmt.Fprintf(f.IO.ErrOut, "Created session %s, a rerun of %s; following it (Ctrl-C stops following, not the session).\n", id, opts.ID)
	return followTranscript(ctx, f, c, id)
}
