package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
)

// NewCmdWebhooks returns `outpost webhooks`.
func NewCmdWebhooks(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "webhooks",
		Aliases: []string{"webhook"},
		Short:   "Subscribe URLs to events, and read their delivery logs (admin scope)",
	}
	cmd.AddCommand(NewCmdWebhooksCreate(f, nil), NewCmdWebhooksList(f, nil), NewCmdWebhooksDelete(f, nil),
		NewCmdWebhooksDeliveries(f, nil), NewCmdWebhooksRedeliver(f, nil))
	return cmd
}

// WebhooksCreateOptions are the settings of `outpost webhooks create`.
type WebhooksCreateOptions struct {
	f       *Factory
	Request api.CreateWebhookRequest
}

// NewCmdWebhooksCreate returns `outpost webhooks create`. runF replaces
// the run in tests.
func NewCmdWebhooksCreate(f *Factory, runF func(context.Context, *WebhooksCreateOptions) error) *cobra.Command {
	opts := &WebhooksCreateOptions{f: f}
	cmd := &cobra.Command{
		Use:   "create URL --event EVENT...",
		Short: "Subscribe a URL to events and print its signing secret (shown once)",
		Long: fmt.Sprintf(`Subscribe a URL to events. The server POSTs each event to it, signed with the
secret printed on standard output (shown only once); see "Webhooks" in
docs/api.md for how to verify a delivery. Events: %s.
With --outpost only that outpost's events are sent.`, strings.Join(api.WebhookEvents, ", ")),
		Example: `  outpost webhooks create https://hooks.example.com/outpost --event session.ended
  outpost webhooks create https://ci.example.com/hook --outpost gpu --event session.created --event session.ended`,
		Args: exactArgs(1, "a URL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Request.URL = args[0]
			if len(opts.Request.Events) == 0 {
				return usageErrorf("webhooks create needs at least one --event (%s)", strings.Join(api.WebhookEvents, ", "))
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runWebhooksCreate(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&opts.Request.Events, "event", nil, "event to send (repeatable)")
	fl.StringVar(&opts.Request.Outpost, "outpost", "", "send only this outpost's events")
	return cmd
}

func runWebhooksCreate(ctx context.Context, opts *WebhooksCreateOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	h, err := c.Webhooks.Create(ctx, opts.Request)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, h)
	}
	fmt.Fprintf(f.IO.ErrOut, "Created webhook %s for %s; its signing secret is shown only this once:\n", h.ID, strings.Join(h.Events, ", "))
	fmt.Fprintln(f.IO.Out, h.Secret)
	return nil
}

// WebhooksListOptions are the settings of `outpost webhooks list`.
type WebhooksListOptions struct {
	f *Factory
}

// NewCmdWebhooksList returns `outpost webhooks list`. runF replaces the
// run in tests.
func NewCmdWebhooksList(f *Factory, runF func(context.Context, *WebhooksListOptions) error) *cobra.Command {
	opts := &WebhooksListOptions{f: f}
	return &cobra.Command{
		Use:     "list",
		Short:   "List webhooks (never their secrets)",
		Example: "  outpost webhooks list\n  outpost webhooks list -o json",
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runWebhooksList(cmd.Context(), opts)
		},
	}
}

func runWebhooksList(ctx context.Context, opts *WebhooksListOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	l, err := c.Webhooks.List(ctx)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, l)
	}
	now := time.Now()
	t := newTable(f.IO.Out, "ID", "URL", "EVENTS", "OUTPOST", "CREATED", "STATE")
	for _, h := range l.Items {
		t.row(h.ID, h.URL, strings.Join(h.Events, ", "), orDash(h.OutpostID), ago(h.CreatedAt, now), webhookState(h, now))
	}
	return t.flush()
}

func webhookState(h api.Webhook, now time.Time) string {
	switch {
	case h.DisabledAt != nil:
		return "disabled " + ago(*h.DisabledAt, now) + ": " + h.DisabledReason
	case h.FailingSince != nil:
		return "failing since " + ago(*h.FailingSince, now)
	}
	return "active"
}

// WebhooksDeleteOptions are the settings of `outpost webhooks delete`.
type WebhooksDeleteOptions struct {
	f  *Factory
	ID string
}

// NewCmdWebhooksDelete returns `outpost webhooks delete`. runF replaces
// the run in tests.
func NewCmdWebhooksDelete(f *Factory, runF func(context.Context, *WebhooksDeleteOptions) error) *cobra.Command {
	opts := &WebhooksDeleteOptions{f: f}
	return &cobra.Command{
		Use:     "delete ID",
		Short:   "Delete a webhook and its delivery log",
		Example: "  outpost webhooks delete wh_123",
		Args:    exactArgs(1, "a webhook id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runWebhooksDelete(cmd.Context(), opts)
		},
	}
}

func runWebhooksDelete(ctx context.Context, opts *WebhooksDeleteOptions) error {
	c, err := opts.f.Client()
	if err != nil {
		return err
	}
	if err := c.Webhooks.Delete(ctx, opts.ID); err != nil {
		return err
	}
	fmt.Fprintf(opts.f.IO.ErrOut, "Deleted webhook %s.\n", opts.ID)
	return nil
}

// WebhooksDeliveriesOptions are the settings of `outpost webhooks
// deliveries`.
type WebhooksDeliveriesOptions struct {
	f     *Factory
	ID    string
	Limit int
}

// NewCmdWebhooksDeliveries returns `outpost webhooks deliveries`. runF
// replaces the run in tests.
func NewCmdWebhooksDeliveries(f *Factory, runF func(context.Context, *WebhooksDeliveriesOptions) error) *cobra.Command {
	opts := &WebhooksDeliveriesOptions{f: f}
	cmd := &cobra.Command{
		Use:     "deliveries ID",
		Short:   "Show a webhook's delivery log, newest first",
		Example: "  outpost webhooks deliveries wh_123\n  outpost webhooks deliveries wh_123 --limit 5 -o json",
		Args:    exactArgs(1, "a webhook id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if opts.Limit < 0 || opts.Limit > 200 {
				return usageErrorf("--limit must be from 1 to 200 (0: the server's bound)")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runWebhooksDeliveries(cmd.Context(), opts)
		},
	}
	cmd.Flags().IntVar(&opts.Limit, "limit", 0, "show at most this many (default: the server's bound, 200)")
	return cmd
}

func runWebhooksDeliveries(ctx context.Context, opts *WebhooksDeliveriesOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	l, err := c.Webhooks.Deliveries(ctx, opts.ID, opts.Limit)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, l)
	}
	now := time.Now()
	t := newTable(f.IO.Out, "ID", "EVENT", "STATE", "ATTEMPTS", "CODE", "TIME", "CREATED", "NEXT", "ANSWER")
	for _, d := range l.Items {
		code, next := "-", "-"
		if d.ResponseCode != 0 {
			code = strconv.Itoa(d.ResponseCode)
		}
		if d.NextAttemptAt != nil {
			next = ago(*d.NextAttemptAt, now)
		}
		answer := d.Error
		if answer == "" {
			answer = d.Response
		}
		answer = strings.Join(strings.Fields(answer), " ")
		if len(answer) > 60 {
			answer = answer[:57] + "..."
		}
		t.row(d.ID, d.Event, d.State, strconv.Itoa(d.Attempts), code, fmt.Sprintf("%dms", d.DurationMS), ago(d.CreatedAt, now), next, orDash(answer))
	}
	return t.flush()
}

// WebhooksRedeliverOptions are the settings of `outpost webhooks
// redeliver`.
type WebhooksRedeliverOptions struct {
	f              *Factory
	ID, DeliveryID string
}

// NewCmdWebhooksRedeliver returns `outpost webhooks redeliver`. runF
// replaces the run in tests.
func NewCmdWebhooksRedeliver(f *Factory, runF func(context.Context, *WebhooksRedeliverOptions) error) *cobra.Command {
	opts := &WebhooksRedeliverOptions{f: f}
	return &cobra.Command{
		Use:     "redeliver ID DELIVERY_ID",
		Short:   "Send a delivery again, now (same id and body, signed anew)",
		Example: "  outpost webhooks redeliver wh_123 whd_18eda33f4e1c0287eb17579c.wh_123",
		Args:    exactArgs(2, "a webhook id and a delivery id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID, opts.DeliveryID = args[0], args[1]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runWebhooksRedeliver(cmd.Context(), opts)
		},
	}
}

func runWebhooksRedeliver(ctx context.Context, opts *WebhooksRedeliverOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	d, err := c.Webhooks.Redeliver(ctx, opts.ID, opts.DeliveryID)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, d)
	}
	fmt.Fprintf(f.IO.ErrOut, "Queued delivery %s of webhook %s again.\n", d.ID, opts.ID)
	return nil
}
