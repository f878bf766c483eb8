package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
)

// NewCmdUsers returns `outpost users`.
func NewCmdUsers(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "users",
		Short: "List the people who signed in through single sign-on (admin scope)",
	}
	cmd.AddCommand(NewCmdUsersList(f, nil))
	return cmd
}

// UsersListOptions are the settings of `outpost users list`.
type UsersListOptions struct {
	f *Factory
}

// NewCmdUsersList returns `outpost users list`. runF replaces the run in
// tests.
func NewCmdUsersList(f *Factory, runF func(context.Context, *UsersListOptions) error) *cobra.Command {
	opts := &UsersListOptions{f: f}
	return &cobra.Command{
		Use:     "list",
		Short:   "List users with their roles",
		Example: "  outpost users list\n  outpost users list -o json",
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runUsersList(cmd.Context(), opts)
		},
	}
}

func runUsersList(ctx context.Context, opts *UsersListOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	l, err := c.Users.List(ctx)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, l)
	}
	now := time.Now()
	t := newTable(f.IO.Out, "ID", "EMAIL", "NAME", "GROUPS", "ROLES", "LAST SIGN-IN", "STATE")
	for _, u := range l.Items {
		var roles []string
		for _, b := range u.Roles {
			roles = append(roles, roleText(b))
		}
		state := "active"
		if u.DisabledAt != nil {
			state = "disabled " + ago(*u.DisabledAt, now)
		}
		t.row(u.ID, orDash(u.Email), orDash(u.Name), orDash(strings.Join(u.Groups, ", ")), orDash(strings.Join(roles, ", ")), ago(u.LastLoginAt, now), state)
	}
	return t.flush()
}

// roleText is a role binding as "member@gpu (group eng)".
func roleText(b api.RoleBinding) string {
	s := b.Role
	if b.OutpostID != "" {
		o := b.Outpost
		if o == "" {
			o = b.OutpostID
		}
		s += "@" + o
	}
	if b.SubjectKind == api.SubjectGroup {
		s += " (group " + b.Subject + ")"
	}
	return s
}

// NewCmdRoles returns `outpost roles`.
func NewCmdRoles(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "roles",
		Short: "Grant, list and revoke the roles of users and provider groups (admin scope)",
	}
	cmd.AddCommand(NewCmdRolesGrant(f, nil), NewCmdRolesList(f, nil), NewCmdRolesRevoke(f, nil))
	return cmd
}

// RolesGrantOptions are the settings of `outpost roles grant`.
type RolesGrantOptions struct {
	f *Factory
	// Request is the binding to create; Role comes from the argument.
	Request api.CreateRoleBindingRequest
}

// NewCmdRolesGrant returns `outpost roles grant`. runF replaces the run in
// tests.
func NewCmdRolesGrant(f *Factory, runF func(context.Context, *RolesGrantOptions) error) *cobra.Command {
	opts := &RolesGrantOptions{f: f}
	cmd := &cobra.Command{
		Use:   "grant ROLE (--user USER | --group GROUP) [--outpost OUTPOST]",
		Short: "Give a role to a user or a provider group",
		Long: fmt.Sprintf(`Give ROLE (%s) to a user (its id or email; a user exists once it has
signed in) or to a group as the identity provider names it, on every outpost
or, with --outpost, on that one only.`, strings.Join(api.Roles, ", ")),
		Example: `  outpost roles grant member --group eng
  outpost roles grant operator --user ann@example.com --outpost gpu-h200`,
		Args: exactArgs(1, "ROLE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Request.Role = args[0]
			if api.RoleRank(opts.Request.Role) < 0 {
				return usageErrorf("roles grant: role %q is unknown; roles are %s", args[0], strings.Join(api.Roles, ", "))
			}
			if (opts.Request.User == "") == (opts.Request.Group == "") {
				return usageErrorf("roles grant needs exactly one of --user and --group")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runRolesGrant(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Request.User, "user", "", "the user's id or email")
	fl.StringVar(&opts.Request.Group, "group", "", "the provider group's name")
	fl.StringVar(&opts.Request.Outpost, "outpost", "", "give the role on this outpost only")
	return cmd
}

func runRolesGrant(ctx context.Context, opts *RolesGrantOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	b, err := c.Users.Grant(ctx, opts.Request)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, b)
	}
	fmt.Fprintf(f.IO.ErrOut, "Granted %s to %s %s.\n", roleText(*b), b.SubjectKind, b.Subject)
	fmt.Fprintln(f.IO.Out, b.ID)
	return nil
}

// RolesListOptions are the settings of `outpost roles list`.
type RolesListOptions struct {
	f *Factory
}

// NewCmdRolesList returns `outpost roles list`. runF replaces the run in
// tests.
func NewCmdRolesList(f *Factory, runF func(context.Context, *RolesListOptions) error) *cobra.Command {
	opts := &RolesListOptions{f: f}
	return &cobra.Command{
		Use:     "list",
		Short:   "List role bindings (those of the server's configuration have no id)",
		Example: "  outpost roles list\n  outpost roles list -o json",
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runRolesList(cmd.Context(), opts)
		},
	}
}

func runRolesList(ctx context.Context, opts *RolesListOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	l, err := c.Users.Roles(ctx)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, l)
	}
	t := newTable(f.IO.Out, "ID", "ROLE", "SUBJECT", "OUTPOST")
	for _, b := range l.Items {
		outpost := b.Outpost
		if outpost == "" {
			outpost = b.OutpostID
		}
		if b.OutpostID == "" {
			outpost = "(all)"
		}
		t.row(orDash(b.ID), b.Role, b.SubjectKind+" "+b.Subject, outpost)
	}
	return t.flush()
}

// RolesRevokeOptions are the settings of `outpost roles revoke`.
type RolesRevokeOptions struct {
	f *Factory
	// ID is the role binding to remove (the argument).
	ID string
}

// NewCmdRolesRevoke returns `outpost roles revoke`. runF replaces the run
// in tests.
func NewCmdRolesRevoke(f *Factory, runF func(context.Context, *RolesRevokeOptions) error) *cobra.Command {
	opts := &RolesRevokeOptions{f: f}
	return &cobra.Command{
		Use:     "revoke BINDING",
		Short:   "Remove a role binding (its id, from roles list)",
		Example: "  outpost roles revoke rb_0123456789",
		Args:    exactArgs(1, "BINDING"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runRolesRevoke(cmd.Context(), opts)
		},
	}
}

func runRolesRevoke(ctx context.Context, opts *RolesRevokeOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	if err := c.Users.Revoke(ctx, opts.ID); err != nil {
		return err
	}
	fmt.Fprintf(f.IO.ErrOut, "Revoked role binding %s.\n", opts.ID)
	return nil
}
