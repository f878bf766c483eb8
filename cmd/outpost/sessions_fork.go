package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
)

// SessionsForkOptions are the settings of `outpost sessions fork`.
type SessionsForkOptions struct {
	f *Factory
	// ID is the session to fork (the argument).
	ID string
	// Count is how many sessions to create.
	Count int
	// Prompt is a new user message the new sessions go on with.
	Prompt string
}

// NewCmdSessionsFork returns `outpost sessions fork`. runF replaces the
// run in tests.
func NewCmdSessionsFork(f *Factory, runF func(context.Context, *SessionsForkOptions) error) *cobra.Command {
	opts := &SessionsForkOptions{f: f}
	cmd := &cobra.Command{
		Use:   "fork ID",
		Short: "Start new sessions from a session's workspace and conversation as they are now",
		Long: fmt.Sprintf(`Fork running or suspended session ID into --count new sessions (1 to %d) on
the same outpost. A running session's machine copies its workspace between
two calls and the session goes on; a suspended one gives the snapshot it is
suspended with. Each new session restores that workspace, uncommitted files
included, before its first call, and goes on from the session's transcript:
an llm agent with the conversation so far, a script from its next step, an
outside agent with the same history to read. --prompt adds a new user
message to each. Prints the new sessions' ids, one a line.`, api.MaxForkCount),
		Example: `  outpost sessions fork ses_01J9Z4 --count 3 --prompt "Try a different approach"`,
		Args:    exactArgs(1, "a session id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsFork(cmd.Context(), opts)
		},
	}
	cmd.Flags().IntVar(&opts.Count, "count", 1, fmt.Sprintf("how many sessions to start, 1 to %d", api.MaxForkCount))
	cmd.Flags().StringVar(&opts.Prompt, "prompt", "", "a new user message each new session goes on with")
	return cmd
}

func runSessionsFork(ctx context.Context, opts *SessionsForkOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	list, err := c.Sessions.Fork(ctx, opts.ID, api.ForkRequest{Count: opts.Count, Prompt: opts.Prompt})
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, list)
	}
	for _, s := range list.Items {
		fmt.Fprintln(f.IO.Out, s.Metadata.SessionID)
	}
	return nil
}
