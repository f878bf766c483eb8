package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// NewCmdAudit returns `outpost audit`.
func NewCmdAudit(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read, verify and export the audit log (admin scope)",
		Long: `The audit log records every change a person or token made — sign-ins, tokens,
outposts and their policies, sessions, desktop takeovers, network grants,
worker registrations — written in the same transaction as the change and
hash-chained, so that 'outpost audit verify' shows none was edited or removed.`,
	}
	cmd.AddCommand(NewCmdAuditList(f, nil), NewCmdAuditVerify(f, nil), NewCmdAuditExport(f, nil))
	return cmd
}

// AuditFilterOptions are the filters list and export share.
type AuditFilterOptions struct {
	// Action keeps one action; "" all.
	Action string
	// Actor keeps one actor, by id or name; "" all.
	Actor string
	// Since keeps the entries of the last Since; 0 all.
	Since time.Duration
}

func (o *AuditFilterOptions) flags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&o.Action, "action", "", "only entries of this action, e.g. outpost.create or login.failed")
	fl.StringVar(&o.Actor, "actor", "", "only entries of this actor (a token's id or name)")
	fl.DurationVar(&o.Since, "since", 0, fmt.Sprintf("only entries of the last duration, e.g. 24h (at most %d days)", api.MaxAuditWindowDays))
}

func (o *AuditFilterOptions) check() error {
	if o.Since < 0 {
		return usageErrorf("--since must be positive")
	}
	if o.Since > api.MaxAuditWindowDays*24*time.Hour {
		return usageErrorf("--since must be at most %dd (%dh): the log is read in windows of at most %d days", api.MaxAuditWindowDays, api.MaxAuditWindowDays*24, api.MaxAuditWindowDays)
	}
	return nil
}

func (o *AuditFilterOptions) list(first int, after string) client.AuditListOptions {
	l := client.AuditListOptions{First: first, After: after, Action: o.Action, Actor: o.Actor}
	if o.Since > 0 {
		l.TimeAfter = time.Now().Add(-o.Since)
	}
	return l
}

// AuditListOptions are the settings of `outpost audit list`.
type AuditListOptions struct {
	f *Factory
	AuditFilterOptions
	// First is how many entries to show, newest first.
	First int
	// After is the end_cursor of the page before.
	After string
}

// NewCmdAuditList returns `outpost audit list`. runF replaces the run in
// tests.
func NewCmdAuditList(f *Factory, runF func(context.Context, *AuditListOptions) error) *cobra.Command {
	opts := &AuditListOptions{f: f}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List audit log entries, newest first",
		Example: `  outpost audit list
  outpost audit list --action token.create --since 24h
  outpost audit list --actor tok_123 -o json`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.check(); err != nil {
				return err
			}
			if opts.First < 1 || opts.First > 200 {
				return usageErrorf("--first must be from 1 to 200")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runAuditList(cmd.Context(), opts)
		},
	}
	opts.flags(cmd)
	cmd.Flags().IntVar(&opts.First, "first", 50, "how many entries to show (1-200)")
	cmd.Flags().StringVar(&opts.After, "after", "", "start after this audit_log_id (the end_cursor of the page before)")
	return cmd
}

func runAuditList(ctx context.Context, opts *AuditListOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	l, err := c.Audit.List(ctx, opts.list(opts.First, opts.After))
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, l)
	}
	now := time.Now()
	t := newTable(f.IO.Out, "ID", "WHEN", "ACTION", "ACTOR", "OBJECT", "SOURCE")
	for _, e := range l.Items {
		actor := e.Actor.Kind
		if e.Actor.ID != "" {
			actor = e.Actor.ID
			if e.Actor.Name != "" {
				actor += " (" + e.Actor.Name + ")"
			}
		}
		object := e.Object.Kind
		if e.Object.ID != "" {
			object += " " + e.Object.ID
		}
		t.row(e.AuditLogID, ago(e.CreatedAt, now), e.Action, actor, object, orDash(e.SourceIP))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if l.HasNextPage && l.EndCursor != nil {
		fmt.Fprintf(f.IO.ErrOut, "%d of %d entries; the next page: --after %s\n", len(l.Items), l.Total, *l.EndCursor)
	}
	return nil
}

// AuditVerifyOptions are the settings of `outpost audit verify`.
type AuditVerifyOptions struct {
	f *Factory
}

// NewCmdAuditVerify returns `outpost audit verify`. runF replaces the run
// in tests.
func NewCmdAuditVerify(f *Factory, runF func(context.Context, *AuditVerifyOptions) error) *cobra.Command {
	opts := &AuditVerifyOptions{f: f}
	return &cobra.Command{
		Use:   "verify",
		Short: "Check that no audit log entry was edited or removed",
		Long: `Check the audit log's hash chain from its oldest kept entry to its newest.
Exits 0 when it holds; 1, naming the audit_log_id of the first entry that
does not, when an entry was edited or entries were removed (but by the
retention, which keeps the chain verifiable).`,
		Example: "  outpost audit verify",
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runAuditVerify(cmd.Context(), opts)
		},
	}
}

func runAuditVerify(ctx context.Context, opts *AuditVerifyOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	v, err := c.Audit.Verify(ctx)
	if err != nil {
		return err
	}
	if f.JSON() {
		if err := printJSON(f.IO.Out, v); err != nil {
			return err
		}
	}
	if !v.OK {
		return codeError{exitFailed, fmt.Errorf("the audit log does not verify: entry %s does not hold: %s", v.FirstBad, v.Reason)}
	}
	if !f.JSON() {
		fmt.Fprintf(f.IO.Out, "The audit log verifies: %d entries, none edited or removed.\n", v.Checked)
	}
	return nil
}

// AuditExportOptions are the settings of `outpost audit export`.
type AuditExportOptions struct {
	f *Factory
	AuditFilterOptions
	// File is where the lines go; "" or "-" is standard output.
	File string
}

// NewCmdAuditExport returns `outpost audit export`. runF replaces the run
// in tests.
func NewCmdAuditExport(f *Factory, runF func(context.Context, *AuditExportOptions) error) *cobra.Command {
	opts := &AuditExportOptions{f: f}
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write the audit log as JSON lines, for a log shipper",
		Long: `Write every audit log entry that matches the filters as JSON lines (one
entry, as GET /v1/audit-logs shows it, a line), newest first, to standard
output or to --file (created readable by its owner only).`,
		Example: `  outpost audit export > audit.jsonl
  outpost audit export --since 24h --file /var/log/outpost/audit.jsonl`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.check(); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runAuditExport(cmd.Context(), opts)
		},
	}
	opts.flags(cmd)
	cmd.Flags().StringVar(&opts.File, "file", "", "write to this file instead of standard output")
	return cmd
}

func runAuditExport(ctx context.Context, opts *AuditExportOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	var w io.Writer = f.IO.Out
	var file *os.File
	if opts.File != "" && opts.File != "-" {
		// The log names people, addresses and what they did: the
		// owner's only.
		file, err = os.OpenFile(opts.File, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("export the audit log: %w", err)
		}
		defer file.Close() //nolint:errcheck // closed and checked below on success
		w = file
	}
	enc := json.NewEncoder(w)
	n, after := 0, ""
	// One filter for every page: --since is resolved once.
	base := opts.list(200, "")
	for {
		page := base
		page.After = after
		l, err := c.Audit.List(ctx, page)
		if err != nil {
			return err
		}
		for _, e := range l.Items {
			if err := enc.Encode(e); err != nil {
				return fmt.Errorf("export the audit log: %w", err)
			}
		}
		n += len(l.Items)
		if !l.HasNextPage || l.EndCursor == nil || *l.EndCursor == after {
			break
		}
		after = *l.EndCursor
	}
	if file != nil {
		if err := file.Close(); err != nil {
			return fmt.Errorf("export the audit log: %w", err)
		}
	}
	fmt.Fprintf(f.IO.ErrOut, "Exported %d audit log entries.\n", n)
	return nil
}
