package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/approval"
)

// SessionsDecideOptions are the settings of `outpost sessions approve`
// and `deny`.
type SessionsDecideOptions struct {
	f *Factory
	// ID is the session and Seq its held call (the arguments).
	ID  string
	Seq int64
	// Approve says yes; false denies.
	Approve bool
	// Reason says why: the agent reads a denial's.
	Reason string
}

// NewCmdSessionsApprove returns `outpost sessions approve`. runF replaces
// the run in tests.
func NewCmdSessionsApprove(f *Factory, runF func(context.Context, *SessionsDecideOptions) error) *cobra.Command {
	return newCmdSessionsDecide(f, runF, true)
}

// NewCmdSessionsDeny returns `outpost sessions deny`. runF replaces the run
// in tests.
func NewCmdSessionsDeny(f *Factory, runF func(context.Context, *SessionsDecideOptions) error) *cobra.Command {
	return newCmdSessionsDecide(f, runF, false)
}

func newCmdSessionsDecide(f *Factory, runF func(context.Context, *SessionsDecideOptions) error, approve bool) *cobra.Command {
	opts := &SessionsDecideOptions{f: f, Approve: approve}
	cmd := &cobra.Command{
		Use:   "approve ID SEQ",
		Short: "Approve a tool call that an approval rule holds",
		Long: `Approve tool call SEQ of session ID, which an ask approval rule holds (the
session's status detail is waiting_for_approval; 'outpost sessions approvals ID'
lists the held calls). The call then goes to the session's machine. Each call is
decided once: a call decided already (by a person or its timeout) is an error.`,
		Example: `  outpost sessions approve devin-123 4
  outpost sessions approve devin-123 4 --reason 'release day'`,
		Args: exactArgs(2, "a session id and a call sequence number"),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil || seq < 1 {
				return usageErrorf("SEQ must be a call sequence number (1, 2, …), not %q", args[1])
			}
			opts.ID, opts.Seq = args[0], seq
			if len(opts.Reason) > api.MaxApprovalReason {
				return usageErrorf("--reason is %d bytes long; at most %d are allowed", len(opts.Reason), api.MaxApprovalReason)
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsDecide(cmd.Context(), opts)
		},
	}
	if !approve {
		cmd.Use = "deny ID SEQ"
		cmd.Short = "Deny a tool call that an approval rule holds"
		cmd.Long = `Deny tool call SEQ of session ID, which an ask approval rule holds. The call
never reaches the machine: the agent gets a tool error that says a person denied
it, with --reason when given. Each call is decided once.`
		cmd.Example = `  outpost sessions deny devin-123 4 --reason 'not on the release branch'`
	}
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why (the agent reads a denial's reason)")
	return cmd
}

func runSessionsDecide(ctx context.Context, opts *SessionsDecideOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	var a *api.Approval
	if opts.Approve {
		a, err = c.Sessions.ApproveCall(ctx, opts.ID, opts.Seq, opts.Reason)
	} else {
		a, err = c.Sessions.DenyCall(ctx, opts.ID, opts.Seq, opts.Reason)
	}
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, a)
	}
	what := "Denied"
	if opts.Approve {
		what = "Approved"
	}
	fmt.Fprintf(f.IO.Out, "%s call %d (%s) of session %s.\n", what, a.CallSeq, a.Tool, opts.ID)
	return nil
}

// SessionsApprovalsOptions are the settings of `outpost sessions
// approvals`.
type SessionsApprovalsOptions struct {
	f *Factory
	// ID is the session (the argument).
	ID string
	// All lists decided calls too.
	All bool
}

// NewCmdSessionsApprovals returns `outpost sessions approvals`. runF
// replaces the run in tests.
func NewCmdSessionsApprovals(f *Factory, runF func(context.Context, *SessionsApprovalsOptions) error) *cobra.Command {
	opts := &SessionsApprovalsOptions{f: f}
	cmd := &cobra.Command{
		Use:   "approvals ID",
		Short: "List a session's tool calls that wait for approval",
		Long: `List the tool calls of session ID that approval rules hold, oldest first, with
the sequence numbers that approve and deny take, the rule that holds each and
its arguments (secrets redacted). --all lists decided calls too. A call that a
deny rule refused was never held: the transcript shows it.`,
		Example: `  outpost sessions approvals devin-123`,
		Args:    exactArgs(1, "a session id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsApprovals(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.All, "all", false, "list decided calls too")
	return cmd
}

func runSessionsApprovals(ctx context.Context, opts *SessionsApprovalsOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	state := api.ApprovalPending
	if opts.All {
		state = ""
	}
	items, err := c.Sessions.Approvals(ctx, opts.ID, state)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, api.ApprovalList{Items: items})
	}
	if len(items) == 0 {
		fmt.Fprintf(f.IO.Out, "Session %s has no tool call waiting for approval.\n", opts.ID)
		return nil
	}
	t := newTable(f.IO.Out, "SEQ", "TOOL", "STATE", "RULE", "DEADLINE", "ARGS")
	for _, a := range items {
		deadline := ""
		if a.State == api.ApprovalPending && a.Deadline > 0 {
			deadline = time.UnixMilli(a.Deadline).UTC().Format(time.RFC3339) + " then " + a.OnTimeout
		}
		t.row(strconv.FormatInt(a.CallSeq, 10), a.Tool, a.State, a.Rule, deadline, truncate(string(a.Args), 60))
	}
	return t.flush()
}

// approvalRulesFlagHelp is the help of --approval-rules.
const approvalRulesFlagHelp = `approval rules of the outpost's tool calls, a JSON file ([{"action": "ask", "tool": "exec", "match": {"command": "git push .* main"}}]; [] for none; - for standard input)`

// readApprovalRules reads and checks, as the server does, the approval
// rules of file ("-": standard input).
func readApprovalRules(f *Factory, file string) ([]api.ApprovalRule, error) {
	var b []byte
	var err error
	if file == "-" {
		b, err = readAll(f.IO.In)
	} else {
		b, err = os.ReadFile(file)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("the approval rules file %s does not exist (--approval-rules)", file)
	case err != nil:
		return nil, fmt.Errorf("read the approval rules file %s: %w", file, err)
	}
	var rules []api.ApprovalRule
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rules); err != nil {
		return nil, usageErrorf("%s is not a JSON list of approval rules: %v", file, err)
	}
	if rules, err = approval.Validate("approval_rules", rules); err != nil {
		return nil, usageErrorf("%s: %v", file, err)
	}
	if rules == nil {
		rules = []api.ApprovalRule{}
	}
	return rules, nil
}

// approvalRulesText shows an outpost's rules in a line.
func approvalRulesText(rules []api.ApprovalRule) string {
	if len(rules) == 0 {
		return "none"
	}
	parts := make([]string, len(rules))
	for i, r := range rules {
		parts[i] = r.Action + " " + r.Tool
		if len(r.Match) > 0 {
			parts[i] += " (matching " + strconv.Itoa(len(r.Match)) + " argument"
			if len(r.Match) > 1 {
				parts[i] += "s"
			}
			parts[i] += ")"
		}
	}
	return strings.Join(parts, "; ")
}
