package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
)

// SessionsNetworkAnswerOptions are the settings of `outpost sessions
// network grant` and `deny`.
type SessionsNetworkAnswerOptions struct {
	f *Factory
	// ID is the session and RequestID its request (the arguments).
	ID, RequestID string
	// Grant answers yes; Scope is then where (session or outpost).
	Grant bool
	Scope string
	// Reason is a denial's, for the agent.
	Reason string
}

// NewCmdSessionsNetworkGrant returns `outpost sessions network grant`.
// runF replaces the run in tests.
func NewCmdSessionsNetworkGrant(f *Factory, runF func(context.Context, *SessionsNetworkAnswerOptions) error) *cobra.Command {
	opts := &SessionsNetworkAnswerOptions{f: f, Grant: true}
	cmd := &cobra.Command{
		Use:   "grant ID REQUEST_ID",
		Short: "Grant a session's network access request",
		Long: `Grant the agent's network access request REQUEST_ID (the number the transcript
shows on its network_request line): its domains are added to the session's own
policy (a copy of its outpost's when it follows it), or with --scope outpost to
the outpost's, which every session that follows it sees at once. The agent gets
the answer as its tool's result.

A grant for the session that widens the outpost's policy needs the network.admin
scope; a grant for the outpost needs network.admin, or outposts.orchestrator on a
token not limited to one outpost.`,
		Example: `  outpost sessions network grant devin-123 4
  outpost sessions network grant devin-123 4 --scope outpost`,
		Args: exactArgs(2, "a session id and a request id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID, opts.RequestID = args[0], args[1]
			switch opts.Scope {
			case api.NetworkGrantSession, api.NetworkGrantOutpost:
			default:
				return usageErrorf("--scope must be %s or %s, not %q", api.NetworkGrantSession, api.NetworkGrantOutpost, opts.Scope)
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsNetworkAnswer(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Scope, "scope", api.NetworkGrantSession, "where the grant is written: session or outpost")
	return cmd
}

// NewCmdSessionsNetworkDeny returns `outpost sessions network deny`.
// runF replaces the run in tests.
func NewCmdSessionsNetworkDeny(f *Factory, runF func(context.Context, *SessionsNetworkAnswerOptions) error) *cobra.Command {
	opts := &SessionsNetworkAnswerOptions{f: f}
	cmd := &cobra.Command{
		Use:   "deny ID REQUEST_ID",
		Short: "Deny a session's network access request",
		Long: `Deny the agent's network access request REQUEST_ID. The agent gets the denial,
with --reason when given, as its tool's result; nothing else changes.`,
		Example: `  outpost sessions network deny devin-123 4 --reason 'use the internal mirror'`,
		Args:    exactArgs(2, "a session id and a request id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID, opts.RequestID = args[0], args[1]
			if len(opts.Reason) > api.MaxNetworkRequestReason {
				return usageErrorf("--reason is %d bytes long; at most %d are allowed", len(opts.Reason), api.MaxNetworkRequestReason)
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsNetworkAnswer(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why, for the agent")
	return cmd
}

func runSessionsNetworkAnswer(ctx context.Context, opts *SessionsNetworkAnswerOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	var req *api.NetworkRequest
	if opts.Grant {
		req, err = c.Sessions.GrantNetworkRequest(ctx, opts.ID, opts.RequestID, opts.Scope)
	} else {
		req, err = c.Sessions.DenyNetworkRequest(ctx, opts.ID, opts.RequestID, opts.Reason)
	}
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, req)
	}
	what := "Denied"
	if opts.Grant {
		what = "Granted"
	}
	fmt.Fprintf(f.IO.Out, "%s network request %s of session %s: %s", what, req.ID, opts.ID, strings.Join(req.Domains, ", "))
	if opts.Grant {
		fmt.Fprintf(f.IO.Out, " (for the %s)", req.Scope)
	}
	fmt.Fprintln(f.IO.Out, ".")
	return nil
}

// SessionsNetworkListOptions are the settings of `outpost sessions network
// list`.
type SessionsNetworkListOptions struct {
	f *Factory
	// ID is the session (the argument).
	ID string
}

// NewCmdSessionsNetworkList returns `outpost sessions network list`. runF
// replaces the run in tests.
func NewCmdSessionsNetworkList(f *Factory, runF func(context.Context, *SessionsNetworkListOptions) error) *cobra.Command {
	opts := &SessionsNetworkListOptions{f: f}
	return &cobra.Command{
		Use:   "list ID",
		Short: "List a session's network access requests that wait for an answer",
		Long: `List the agent's network access requests that no one has answered yet, oldest
first, with the ids that grant and deny take. An ended session has none: its
requests can no longer be answered.`,
		Example: `  outpost sessions network list devin-123`,
		Args:    exactArgs(1, "a session id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsNetworkList(cmd.Context(), opts)
		},
	}
}

func runSessionsNetworkList(ctx context.Context, opts *SessionsNetworkListOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	items, err := c.Sessions.NetworkRequests(ctx, opts.ID)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, api.NetworkRequestList{Items: items})
	}
	if len(items) == 0 {
		fmt.Fprintf(f.IO.Out, "Session %s has no network request waiting for an answer.\n", opts.ID)
		return nil
	}
	t := newTable(f.IO.Out, "REQUEST", "DOMAINS", "REASON")
	for _, r := range items {
		t.row(r.ID, strings.Join(r.Domains, ", "), truncate(r.Reason, 60))
	}
	return t.flush()
}
