package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/budget"
)

// NewCmdOutposts returns `outpost outposts`.
func NewCmdOutposts(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "outposts",
		Aliases: []string{"outpost"},
		Short:   "List, show, create, update and delete outposts",
	}
	create := NewCmdOutpostsCreate(f, nil)
	create.Example = `  outpost outposts create dev
  outpost outposts create mac-minis --platform macos --description "Office Mac minis"
  outpost outposts create gpu --max-running 3 --max-attempts 5
  outpost outposts create ci --max-snapshot-bytes 2147483648`
	del := NewCmdOutpostsDelete(f, nil)
	del.Example = "  outpost outposts delete dev\n  outpost outposts delete dev --force"
	cmd.AddCommand(NewCmdOutpostsList(f, nil), NewCmdOutpostsGet(f, nil), create, NewCmdOutpostsUpdate(f, nil), del)
	return cmd
}

// OutpostsListOptions are the settings of `outpost outposts list`.
type OutpostsListOptions struct {
	f *Factory
}

// NewCmdOutpostsList returns `outpost outposts list`. runF replaces the run
// in tests.
func NewCmdOutpostsList(f *Factory, runF func(context.Context, *OutpostsListOptions) error) *cobra.Command {
	opts := &OutpostsListOptions{f: f}
	return &cobra.Command{
		Use:     "list",
		Short:   "List outposts with their queue depth",
		Example: "  outpost outposts list\n  outpost outposts list -o json",
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runOutpostsList(cmd.Context(), opts)
		},
	}
}

func runOutpostsList(ctx context.Context, opts *OutpostsListOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	l, err := c.Outposts.List(ctx)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, l)
	}
	t := newTable(f.IO.Out, "NAME", "ID", "PLATFORM", "QUEUED", "CLAIMS", "DESCRIPTION")
	for _, o := range l.Items {
		t.row(o.Spec.Name, o.Metadata.OutpostID, o.Spec.Platform, strconv.Itoa(o.Status.QueueDepth),
			strconv.Itoa(o.Status.ActiveClaims), truncate(o.Spec.Description, 60))
	}
	return t.flush()
}

// OutpostsGetOptions are the settings of `outpost outposts get`.
type OutpostsGetOptions struct {
	f *Factory
	// Outpost is the outpost's name or id (the argument).
	Outpost string
}

// NewCmdOutpostsGet returns `outpost outposts get`. runF replaces the run
// in tests.
func NewCmdOutpostsGet(f *Factory, runF func(context.Context, *OutpostsGetOptions) error) *cobra.Command {
	opts := &OutpostsGetOptions{f: f}
	return &cobra.Command{
		Use:     "get NAME-OR-ID",
		Short:   "Show one outpost",
		Example: "  outpost outposts get dev",
		Args:    exactArgs(1, "an outpost name or id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Outpost = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runOutpostsGet(cmd.Context(), opts)
		},
	}
}

func runOutpostsGet(ctx context.Context, opts *OutpostsGetOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	o, err := c.Outposts.Get(ctx, opts.Outpost)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, o)
	}
	return fields(f.IO.Out,
		"Name", o.Spec.Name, "ID", o.Metadata.OutpostID, "Platform", o.Spec.Platform,
		"Description", o.Spec.Description, "Queued", strconv.Itoa(o.Status.QueueDepth),
		"Active claims", strconv.Itoa(o.Status.ActiveClaims), "Max running", maxRunningText(o.Spec.MaxRunning),
		"Max attempts", strconv.Itoa(o.Spec.MaxAttempts), "Max snapshot size", maxSnapshotText(o.Spec.MaxSnapshotBytes),
		"Network policy", policyText(o.Spec.NetworkPolicy), "Desktop", desktopText(o.Spec.Desktop),
		"Approval rules", approvalRulesText(o.Spec.ApprovalRules),
		"Budget", budget.DescribeOutpost(o.Spec.Budget, o.Status.BudgetUsage),
		"Created", timestamp(&o.Metadata.CreatedAt, time.Now()))
}

// maxRunningText shows an outpost's max_running, 0 being no cap.
func maxRunningText(n int) string {
	if n == 0 {
		return "no cap"
	}
	return strconv.Itoa(n)
}

// maxSnapshotText shows an outpost's max_snapshot_bytes, 0 being the
// server's limit.
func maxSnapshotText(n int64) string {
	if n == 0 {
		return "the server's (outpost server --max-snapshot-bytes)"
	}
	return fmt.Sprintf("%s (%d bytes)", api.ByteSize(n), n)
}

// OutpostsCreateOptions are the settings of `outpost outposts create` and
// `outpost worker outpost create`.
type OutpostsCreateOptions struct {
	f *Factory
	// Request is the new outpost: its name from the argument, the rest
	// from the flags.
	Request api.CreateOutpostRequest
	// Policy are the network policy flags.
	Policy PolicyFlags
	// Desktop is --desktop, "" when not given.
	Desktop string
	// ApprovalRules is --approval-rules, "" when not given.
	ApprovalRules string
	// Budget are --monthly-hours, --monthly-cost and --on-limit.
	Budget BudgetFlags
}

// NewCmdOutpostsCreate returns `outpost outposts create`. runF replaces the
// run in tests.
func NewCmdOutpostsCreate(f *Factory, runF func(context.Context, *OutpostsCreateOptions) error) *cobra.Command {
	opts := &OutpostsCreateOptions{f: f}
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create an outpost and print its id",
		Args:  exactArgs(1, "the new outpost's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Request.Name = args[0]
			var err error
			if opts.Request.NetworkPolicy, err = opts.Policy.policy(f); err != nil {
				return err
			}
			if opts.Desktop != "" {
				if opts.Request.Desktop, err = parseOutpostDesktop(opts.Desktop); err != nil {
					return err
				}
			}
			if opts.ApprovalRules != "" {
				if opts.Request.ApprovalRules, err = readApprovalRules(f, opts.ApprovalRules); err != nil {
					return err
				}
			}
			if fl := cmd.Flags(); opts.Budget.given(fl) {
				b := opts.Budget.merge(api.OutpostBudget{})
				opts.Request.Budget = &b
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runOutpostsCreate(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Request.Platform, "platform", "", "platform of the machines serving it: "+platformHelp)
	fl.StringVar(&opts.Request.Description, "description", "", "text shown to people choosing an outpost")
	fl.StringVar(&opts.Request.RemoteBinarySHA, "remote-binary-sha", "", "remote build the outpost's sessions run unless they pin their own (a version id of the server's /dist/, e.g. 1a2b3c4d5e6f)")
	fl.IntVar(&opts.Request.MaxRunning, "max-running", 0, "how many of its sessions may be claimed at once, whatever the number of machines (0: no cap)")
	fl.IntVar(&opts.Request.MaxAttempts, "max-attempts", 0, fmt.Sprintf("how many machines a session may lose or fail to get before it ends in error (0: %d)", api.DefaultMaxAttempts))
	fl.Int64Var(&opts.Request.MaxSnapshotBytes, "max-snapshot-bytes", 0, "the largest workspace snapshot, in bytes, stored when one of its sessions is suspended, at most the server's --max-snapshot-bytes (0: the server's)")
	fl.StringVar(&opts.Desktop, "desktop", "", desktopFlagHelp)
	fl.StringVar(&opts.ApprovalRules, "approval-rules", "", approvalRulesFlagHelp)
	opts.Budget.add(fl)
	opts.Policy.add(fl)
	return cmd
}

// OutpostsUpdateOptions are the settings of `outpost outposts update`.
type OutpostsUpdateOptions struct {
	f *Factory
	// Outpost is the outpost's name or id (the argument).
	Outpost string
	// Request holds the flags that were given.
	Request api.UpdateOutpostRequest
	// Policy are the network policy flags.
	Policy PolicyFlags
	// Unrestricted lifts the outpost's network policy.
	Unrestricted bool
	// Desktop is --desktop, "" when not given.
	Desktop string
	// ApprovalRules is --approval-rules, "" when not given.
	ApprovalRules string
	// Budget are --monthly-hours, --monthly-cost and --on-limit; the ones
	// given change the outpost's budget, the others keep theirs.
	Budget BudgetFlags
	// budgetGiven says one of them was given.
	budgetGiven bool
}

// NewCmdOutpostsUpdate returns `outpost outposts update`. runF replaces the
// run in tests.
func NewCmdOutpostsUpdate(f *Factory, runF func(context.Context, *OutpostsUpdateOptions) error) *cobra.Command {
	opts := &OutpostsUpdateOptions{f: f}
	var maxRunning, maxAttempts int
	var maxSnapshot int64
	cmd := &cobra.Command{
		Use:   "update NAME-OR-ID",
		Short: "Change an outpost's limits, network policy or desktop",
		Long: `Change an outpost's limits, network policy or desktop; what no flag names stays as it is.
A new network policy applies at once to the outpost's sessions that have none of
their own, running ones included.`,
		Example: `  outpost outposts update gpu --max-running 5
  outpost outposts update dev --allow-host '*.example.test' --allow-cidr 10.1.0.0/16
  outpost outposts update dev --network-policy policy.json
  outpost outposts update dev --unrestricted
  outpost outposts update desk --desktop 1600x900`,
		Args: exactArgs(1, "an outpost name or id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Outpost = args[0]
			fl := cmd.Flags()
			if fl.Changed("max-running") {
				opts.Request.MaxRunning = &maxRunning
			}
			if fl.Changed("max-attempts") {
				opts.Request.MaxAttempts = &maxAttempts
			}
			if fl.Changed("max-snapshot-bytes") {
				opts.Request.MaxSnapshotBytes = &maxSnapshot
			}
			if opts.Unrestricted && opts.Policy.given() {
				return usageErrorf("--unrestricted lifts the network policy; it cannot be given with a policy")
			}
			var err error
			if opts.Request.NetworkPolicy, err = opts.Policy.policy(f); err != nil {
				return err
			}
			if opts.Unrestricted {
				opts.Request.NetworkPolicy = &api.NetworkPolicy{Allow: []api.NetworkPolicyRule{}}
			}
			if opts.Desktop != "" {
				if opts.Request.Desktop, err = parseOutpostDesktop(opts.Desktop); err != nil {
					return err
				}
			}
			if opts.ApprovalRules != "" {
				rules, err := readApprovalRules(f, opts.ApprovalRules)
				if err != nil {
					return err
				}
				opts.Request.ApprovalRules = &rules
			}
			opts.budgetGiven = opts.Budget.given(fl)
			if opts.Request == (api.UpdateOutpostRequest{}) && !opts.budgetGiven {
				return usageErrorf("outposts update needs something to change: --max-running, --max-attempts, --max-snapshot-bytes, --desktop, --approval-rules, --monthly-hours, --monthly-cost, --on-limit, a network policy or --unrestricted")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runOutpostsUpdate(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&maxRunning, "max-running", 0, "how many of its sessions may be claimed at once (0: no cap)")
	fl.IntVar(&maxAttempts, "max-attempts", 0, fmt.Sprintf("how many machines a session may lose or fail to get before it ends in error (0: %d)", api.DefaultMaxAttempts))
	fl.Int64Var(&maxSnapshot, "max-snapshot-bytes", 0, "the largest workspace snapshot stored, in bytes (0: the server's)")
	fl.BoolVar(&opts.Unrestricted, "unrestricted", false, "lift the outpost's network policy")
	fl.StringVar(&opts.Desktop, "desktop", "", desktopFlagHelp)
	fl.StringVar(&opts.ApprovalRules, "approval-rules", "", approvalRulesFlagHelp)
	opts.Budget.add(fl)
	opts.Policy.add(fl)
	return cmd
}

func runOutpostsUpdate(ctx context.Context, opts *OutpostsUpdateOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	if opts.budgetGiven {
		// The API replaces the whole budget: the flags not given keep the
		// outpost's values.
		cur, err := c.Outposts.Get(ctx, opts.Outpost)
		if err != nil {
			return err
		}
		var b api.OutpostBudget
		if cur.Spec.Budget != nil {
			b = *cur.Spec.Budget
		}
		b = opts.Budget.merge(b)
		opts.Request.Budget = &b
	}
	o, err := c.Outposts.Update(ctx, opts.Outpost, opts.Request)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, o)
	}
	rules := ""
	if opts.Request.ApprovalRules != nil {
		rules = "; approval rules: " + approvalRulesText(o.Spec.ApprovalRules)
	}
	fmt.Fprintf(f.IO.Out, "Updated outpost %s; network policy: %s; desktop: %s%s.\n", o.Spec.Name, policyText(o.Spec.NetworkPolicy),
		desktopText(o.Spec.Desktop), rules)
	return nil
}

func runOutpostsCreate(ctx context.Context, opts *OutpostsCreateOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	o, err := c.Outposts.Create(ctx, opts.Request)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, o)
	}
	fmt.Fprintln(f.IO.Out, o.Metadata.OutpostID)
	return nil
}

// OutpostsDeleteOptions are the settings of `outpost outposts delete` and
// `outpost worker outpost delete`.
type OutpostsDeleteOptions struct {
	f *Factory
	// Outpost is the outpost's name or id (the argument).
	Outpost string
	// Force ends the outpost's claimed sessions rather than refusing.
	Force bool
}

// NewCmdOutpostsDelete returns `outpost outposts delete`. runF replaces the
// run in tests.
func NewCmdOutpostsDelete(f *Factory, runF func(context.Context, *OutpostsDeleteOptions) error) *cobra.Command {
	opts := &OutpostsDeleteOptions{f: f}
	cmd := &cobra.Command{
		Use:   "delete NAME-OR-ID",
		Short: "Delete an outpost",
		Long: `Delete an outpost. While sessions are claimed the server refuses unless --force
is given, which ends every unfinished session of the outpost.`,
		Args: exactArgs(1, "an outpost name or id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Outpost = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runOutpostsDelete(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Force, "force", false, "delete even with claimed sessions, ending them")
	return cmd
}

func runOutpostsDelete(ctx context.Context, opts *OutpostsDeleteOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	if err := c.Outposts.Delete(ctx, opts.Outpost, opts.Force); err != nil {
		if client.IsConflict(err) && !opts.Force {
			return withForceHint(err)
		}
		return err
	}
	fmt.Fprintf(f.IO.ErrOut, "Deleted outpost %s.\n", opts.Outpost)
	return nil
}

// withForceHint says the server's refusal to delete an outpost with claimed
// sessions in the CLI's words: the API's force is the --force flag.
func withForceHint(err error) error {
	msg := err.Error()
	if strings.Contains(msg, "with force") {
		return errors.New(strings.Replace(msg, "with force", "with --force", 1))
	}
	return fmt.Errorf("%s; pass --force to delete it anyway, ending its sessions", strings.TrimSuffix(msg, "."))
}
