package main

import (
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
	cmd.AddCommand(newCmdTokensCreate(f), newCmdTokensList(f), newCmdTokensRevoke(f))
	return cmd
}

func newCmdTokensCreate(f *Factory) *cobra.Command {
	var (
		req       api.CreateTokenRequest
		expiresIn time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create --scope SCOPE...",
		Short: "Create a token and print it (shown once)",
		Long: fmt.Sprintf(`Create an API token and print its secret on standard output; it is shown only
once. Scopes: %s. A token made with --outpost works
for that outpost only.`, strings.Join(api.Scopes, ", ")),
		Example: `  outpost tokens create --scope outposts.machine --outpost dev --name dev-workers
  outpost tokens create --scope sessions.write --expires-in 24h
  TOKEN=$(outpost tokens create --scope outposts.orchestrator)`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(req.Scopes) == 0 {
				return usageErrorf("tokens create needs at least one --scope (%s)", strings.Join(api.Scopes, ", "))
			}
			if expiresIn < 0 {
				return usageErrorf("--expires-in must be positive")
			}
			req.ExpiresInS = int64(expiresIn / time.Second)
			c, err := f.Client()
			if err != nil {
				return err
			}
			t, err := c.Tokens.Create(cmd.Context(), req)
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
			fmt.Fprintf(f.IO.ErrOut, "Created token %s with scopes %s%s; it is shown only this once:\n", t.ID, strings.Join(t.Scopes, ", "), limit)
			fmt.Fprintln(f.IO.Out, t.Secret)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&req.Scopes, "scope", nil, "scope to grant (repeatable)")
	fl.StringVar(&req.Outpost, "outpost", "", "limit the token to this outpost")
	fl.StringVar(&req.Name, "name", "", "a name to recognize the token by")
	fl.DurationVar(&expiresIn, "expires-in", 0, "lifetime, e.g. 24h (default: never expires)")
	return cmd
}

func newCmdTokensList(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List tokens (never their secrets)",
		Example: "  outpost tokens list\n  outpost tokens list -o json",
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.Client()
			if err != nil {
				return err
			}
			l, err := c.Tokens.List(cmd.Context())
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
		},
	}
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

func newCmdTokensRevoke(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:     "revoke ID",
		Short:   "Revoke a token at once",
		Example: "  outpost tokens revoke tok_123",
		Args:    exactArgs(1, "a token id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.Client()
			if err != nil {
				return err
			}
			if err := c.Tokens.Revoke(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(f.IO.ErrOut, "Revoked token %s.\n", args[0])
			return nil
		},
	}
}
