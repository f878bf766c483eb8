package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// NewCmdSecrets returns `outpost secrets`.
func NewCmdSecrets(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "secrets",
		Aliases: []string{"secret"},
		Short:   "Store, list and delete secrets of an outpost (orchestrator scope)",
		Long: `Secrets stored on an outpost are sealed at rest like a session's secrets and
never shown again. A session of the outpost names the ones it needs in
use_secrets (in its session file) and gets them as its own secrets: as
environment of its tools, redacted from its transcript. A secret the session
gives itself under the same name wins.`,
	}
	cmd.AddCommand(NewCmdSecretsSet(f, nil), NewCmdSecretsList(f, nil), NewCmdSecretsDelete(f, nil))
	return cmd
}

// SecretsOptions are the settings of `outpost secrets set|list|delete`.
type SecretsOptions struct {
	f       *Factory
	Outpost string
	// Name is the secret's name (set and delete).
	Name string
}

func secretsRunE(opts *SecretsOptions, runF func(context.Context, *SecretsOptions) error, run func(context.Context, *SecretsOptions) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if opts.Outpost == "" {
			return usageErrorf("%s needs --outpost NAME", cmd.CommandPath())
		}
		if len(args) > 0 {
			opts.Name = args[0]
		}
		if runF != nil {
			return runF(cmd.Context(), opts)
		}
		return run(cmd.Context(), opts)
	}
}

// NewCmdSecretsSet returns `outpost secrets set`. runF replaces the run in
// tests.
func NewCmdSecretsSet(f *Factory, runF func(context.Context, *SecretsOptions) error) *cobra.Command {
	opts := &SecretsOptions{f: f}
	cmd := &cobra.Command{
		Use:   "set --outpost NAME KEY",
		Short: "Store a secret of an outpost, its value read from standard input",
		Long: `Store the secret KEY of an outpost, replacing its value if it has one. The
value is read from standard input (one trailing newline removed), so that it
never appears on a command line; it is never shown again. Sessions created
afterwards get the new value; sessions created before keep theirs.`,
		Example: `  printf %s "$OPENAI_API_KEY" | outpost secrets set --outpost dev OPENAI_API_KEY
  outpost secrets set --outpost dev DEPLOY_KEY < deploy_key.pem`,
		Args: exactArgs(1, "the secret's name (KEY)"),
		RunE: secretsRunE(opts, runF, runSecretsSet),
	}
	cmd.Flags().StringVar(&opts.Outpost, "outpost", "", "outpost name or id")
	return cmd
}

func runSecretsSet(ctx context.Context, opts *SecretsOptions) error {
	f := opts.f
	b, err := readAll(f.IO.In)
	if err != nil {
		return fmt.Errorf("read the secret's value from standard input: %w", err)
	}
	value := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if value == "" {
		return usageErrorf("no value on standard input: pipe the secret's value in, e.g. printf %%s \"$%s\" | %s secrets set --outpost %s %s",
			opts.Name, "outpost", opts.Outpost, opts.Name)
	}
	c, err := f.Client()
	if err != nil {
		return err
	}
	sec, err := c.Outposts.SetSecret(ctx, opts.Outpost, opts.Name, value)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, sec)
	}
	fmt.Fprintf(f.IO.ErrOut, "Stored secret %s of outpost %s; sessions get it with use_secrets: [%s].\n", sec.Name, sec.Outpost, sec.Name)
	return nil
}

// NewCmdSecretsList returns `outpost secrets list`. runF replaces the run
// in tests.
func NewCmdSecretsList(f *Factory, runF func(context.Context, *SecretsOptions) error) *cobra.Command {
	opts := &SecretsOptions{f: f}
	cmd := &cobra.Command{
		Use:     "list --outpost NAME",
		Short:   "List the secrets of an outpost (names, never values)",
		Example: "  outpost secrets list --outpost dev\n  outpost secrets list --outpost dev -o json",
		Args:    exactArgs(0, ""),
		RunE:    secretsRunE(opts, runF, runSecretsList),
	}
	cmd.Flags().StringVar(&opts.Outpost, "outpost", "", "outpost name or id")
	return cmd
}

func runSecretsList(ctx context.Context, opts *SecretsOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	l, err := c.Outposts.ListSecrets(ctx, opts.Outpost)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, l)
	}
	now := time.Now()
	t := newTable(f.IO.Out, "NAME", "UPDATED", "CREATED")
	for _, s := range l.Items {
		t.row(s.Name, ago(s.UpdatedAt, now), ago(s.CreatedAt, now))
	}
	return t.flush()
}

// NewCmdSecretsDelete returns `outpost secrets delete`. runF replaces the
// run in tests.
func NewCmdSecretsDelete(f *Factory, runF func(context.Context, *SecretsOptions) error) *cobra.Command {
	opts := &SecretsOptions{f: f}
	cmd := &cobra.Command{
		Use:     "delete --outpost NAME KEY",
		Short:   "Delete a secret of an outpost",
		Long:    "Delete the secret KEY of an outpost. Sessions created before keep the value they were given.",
		Example: "  outpost secrets delete --outpost dev OPENAI_API_KEY",
		Args:    exactArgs(1, "the secret's name (KEY)"),
		RunE:    secretsRunE(opts, runF, runSecretsDelete),
	}
	cmd.Flags().StringVar(&opts.Outpost, "outpost", "", "outpost name or id")
	return cmd
}

func runSecretsDelete(ctx context.Context, opts *SecretsOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	if err := c.Outposts.DeleteSecret(ctx, opts.Outpost, opts.Name); err != nil {
		return err
	}
	fmt.Fprintf(f.IO.ErrOut, "Deleted secret %s of outpost %s.\n", opts.Name, opts.Outpost)
	return nil
}
