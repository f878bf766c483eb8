package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
)

// NewCmdTokens returns `outpost tokens`.
func NewCmdTokens(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "tokens",
		Aliases: []string{"token"},
		Short:   "Create, list and revoke API tokens (admin scope)",
	}
	cmd.AddCommand(NewCmdTokensCreate(f, nil), NewCmdTokensList(f, nil), NewCmdTokensRevoke(f, nil))
	return cmd
}

// TokensCreateOptions are the settings of `outpost tokens create`.
type TokensCreateOptions struct {
	f *Factory
	// Request is the new token; its lifetime comes from ExpiresIn.
	Request api.CreateTokenRequest
	// ExpiresIn is the token's lifetime; 0 means it never expires.
	ExpiresIn time.Duration
}

// NewCmdTokensCreate returns `outpost tokens create`. runF replaces the run
// in tests.
func NewCmdTokensCreate(f *Factory, runF func(context.Context, *TokensCreateOptions) error) *cobra.Command {
	opts := &TokensCreateOptions{f: f}
	cmd := &cobra.Command{
		Use:   "create (--scope SCOPE... | --role ROLE | --session ID)",
		Short: "Create a token and print it (shown once)",
		Long: fmt.Sprintf(`Create an API token and print its secret on standard output; it is shown only
once. Scopes: %s. Or give the token a role
instead (%s), which stands for its scopes. A token made
with --outpost works for that outpost only.

A token made with --session ID is for an outside agent driving that session:
it reaches that session's routes and MCP endpoint only, holds sessions.write
(or the --scope given: sessions.read, sessions.write), needs only
sessions.write on the session to create, and stops working when the session
ends.

A token created by a person signed in through single sign-on belongs to that
person and never does more than the person may, now or later; with
--service-account (admin only) it belongs to no one and keeps its scopes.`, strings.Join(api.Scopes, ", "), strings.Join(api.Roles, ", ")),
		Example: `  outpost tokens create --scope outposts.machine --outpost dev --name dev-workers
  outpost tokens create --scope sessions.write --expires-in 24h
  outpost tokens create --role viewer --name dashboards
  outpost tokens create --session ses_123
  TOKEN=$(outpost tokens create --scope outposts.orchestrator)`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Request.Role != "" && api.RoleRank(opts.Request.Role) < 0 {
				return usageErrorf("tokens create: role %q is unknown; roles are %s", opts.Request.Role, strings.Join(api.Roles, ", "))
			}
			if opts.Request.Role != "" && len(opts.Request.Scopes) > 0 {
				return usageErrorf("tokens create takes --scope or --role, not both: a role stands for its scopes")
			}
			if opts.Request.Session != "" && opts.Request.Role != "" {
				return usageErrorf("tokens create takes --session or --role, not both: a session's token holds sessions scopes only")
			}
			if opts.Request.Role == "" && len(opts.Request.Scopes) == 0 && opts.Request.Session == "" {
				return usageErrorf("tokens create needs at least one --scope (%s) or a --role (%s)", strings.Join(api.Scopes, ", "), strings.Join(api.Roles, ", "))
			}
			if opts.ExpiresIn < 0 {
				return usageErrorf("--expires-in must be positive")
			}
			opts.Request.ExpiresInS = int64(opts.ExpiresIn / time.Second)
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runTokensCreate(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&opts.Request.Scopes, "scope", nil, "scope to grant (repeatable)")
	fl.StringVar(&opts.Request.Role, "role", "", "give the token this role's scopes: "+strings.Join(api.Roles, ", "))
	fl.BoolVar(&opts.Request.ServiceAccount, "service-account", false, "make a signed-in admin's token a service account's, not the admin's own")
	fl.StringVar(&opts.Request.Outpost, "outpost", "", "limit the token to this outpost")
	fl.StringVar(&opts.Request.Session, "session", "", "limit the token to this session (for an outside agent); it ends with the session")
	fl.StringVar(&opts.Request.Name, "name", "", "a name to recognize the token by")
	fl.DurationVar(&opts.ExpiresIn, "expires-in", 0, "lifetime, e.g. 24h (default: never expires)")
	return cmd
}

func runTokensCreate(ctx context.Context, opts *TokensCreateOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	t, err := c.Tokens.Create(ctx, opts.Request)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, t)
	}
	limit := ""
	if t.Outpost != "" {
		limit = ", limited to outpost " + t.Outpost
	}
	if t.SessionID != "" {
		limit = ", limited to session " + t.SessionID + " (it stops working when the session ends)"
	}
	if t.Role != "" {
		limit = " (role " + t.Role + ")" + limit
	}
	fmt.Fprintf(f.IO.ErrOut, "Created token %s with scopes %s%s; it is shown only this once:\n", t.ID, strings.Join(t.Scopes, ", "), limit)
	fmt.Fprintln(f.IO.Out, t.Secret)
	return nil
}

// TokensListOptions are the settings of `outpost tokens list`.
type TokensListOptions struct {
	f *Factory
}

// NewCmdTokensList returns `outpost tokens list`. runF replaces the run in
// tests.
func NewCmdTokensList(f *Factory, runF func(context.Context, *TokensListOptions) error) *cobra.Command {
	opts := &TokensListOptions{f: f}
	return &cobra.Command{
		Use:     "list",
		Short:   "List tokens (never their secrets)",
		Example: "  outpost tokens list\n  outpost tokens list -o json",
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runTokensList(cmd.Context(), opts)
		},
	}
}

func runTokensList(ctx context.Context, opts *TokensListOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	l, err := c.Tokens.List(ctx)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, l)
	}
	now := time.Now()
	t := newTable(f.IO.Out, "ID", "NAME", "SCOPES", "OUTPOST", "CREATED", "STATE")
	for _, tok := range l.Items {
		outpost := tok.Outpost
		if outpost == "" {
			outpost = tok.OutpostID // a server that does not name it, or a deleted outpost
		}
		t.row(tok.ID, orDash(tok.Name), strings.Join(tok.Scopes, ", "), orDash(outpost),
			ago(tok.CreatedAt, now), tokenState(tok, now))
	}
	return t.flush()
}

func tokenState(t api.Token, now time.Time) string {
	switch {
	case t.RevokedAt != nil:
		return "revoked " + ago(*t.RevokedAt, now)
	case t.ExpiresAt != nil && time.Unix(*t.ExpiresAt, 0).Before(now):
		return "expired " + ago(*t.ExpiresAt, now)
	case t.ExpiresAt != nil:
		return "expires " + ago(*t.ExpiresAt, now)
	}
	return "active"
}

// TokensRevokeOptions are the settings of `outpost tokens revoke`.
type TokensRevokeOptions struct {
	f *Factory
	// ID is the token to revoke (the argument).
	ID string
}

// NewCmdTokensRevoke returns `outpost tokens revoke`. runF replaces the run
// in tests.
func NewCmdTokensRevoke(f *Factory, runF func(context.Context, *TokensRevokeOptions) error) *cobra.Command {
	opts := &TokensRevokeOptions{f: f}
	return &cobra.Command{
		Use:     "revoke ID",
		Short:   "Revoke a token at once",
		Example: "  outpost tokens revoke tok_123",
		Args:    exactArgs(1, "a token id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runTokensRevoke(cmd.Context(), opts)
		},
	}
}

func runTokensRevoke(ctx context.Context, opts *TokensRevokeOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	if err := c.Tokens.Revoke(ctx, opts.ID); err != nil {
		return err
	}
	fmt.Fprintf(f.IO.ErrOut, "Revoked token %s.\n", opts.ID)
	return nil
}
