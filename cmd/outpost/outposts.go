package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// NewCmdOutposts returns `outpost outposts`.
func NewCmdOutposts(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "outposts",
		Aliases: []string{"outpost"},
		Short:   "List, show, create and delete outposts",
	}
	list := &cobra.Command{
		Use:     "list",
		Short:   "List outposts with their queue depth",
		Example: "  outpost outposts list\n  outpost outposts list -o json",
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.Client()
			if err != nil {
				return err
			}
			l, err := c.Outposts.List(cmd.Context())
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
		},
	}
	get := &cobra.Command{
		Use:     "get NAME-OR-ID",
		Short:   "Show one outpost",
		Example: "  outpost outposts get dev",
		Args:    exactArgs(1, "an outpost name or id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.Client()
			if err != nil {
				return err
			}
			o, err := c.Outposts.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if f.JSON() {
				return printJSON(f.IO.Out, o)
			}
			return fields(f.IO.Out,
				"Name", o.Spec.Name, "ID", o.Metadata.OutpostID, "Platform", o.Spec.Platform,
				"Description", o.Spec.Description, "Queued", strconv.Itoa(o.Status.QueueDepth),
				"Active claims", strconv.Itoa(o.Status.ActiveClaims),
				"Created", timestamp(&o.Metadata.CreatedAt, time.Now()))
		},
	}
	create := newCmdOutpostCreate(f)
	create.Example = `  outpost outposts create dev
  outpost outposts create mac-minis --platform macos --description "Office Mac minis"`
	del := newCmdOutpostDelete(f)
	del.Example = "  outpost outposts delete dev\n  outpost outposts delete dev --force"
	cmd.AddCommand(list, get, create, del)
	return cmd
}

func newCmdOutpostCreate(f *Factory) *cobra.Command {
	var req api.CreateOutpostRequest
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create an outpost and print its id",
		Args:  exactArgs(1, "the new outpost's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.Client()
			if err != nil {
				return err
			}
			req.Name = args[0]
			o, err := c.Outposts.Create(cmd.Context(), req)
			if err != nil {
				return err
			}
			if f.JSON() {
				return printJSON(f.IO.Out, o)
			}
			fmt.Fprintln(f.IO.Out, o.Metadata.OutpostID)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Platform, "platform", "", "platform of the machines serving it: "+platformHelp)
	cmd.Flags().StringVar(&req.Description, "description", "", "text shown to people choosing an outpost")
	cmd.Flags().StringVar(&req.RemoteBinarySHA, "remote-binary-sha", "", "remote build the outpost's sessions run unless they pin their own (a version id of the server's /dist/, e.g. 1a2b3c4d5e6f)")
	return cmd
}

func newCmdOutpostDelete(f *Factory) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete NAME-OR-ID",
		Short: "Delete an outpost",
		Long: `Delete an outpost. While sessions are claimed the server refuses unless --force
is given, which ends every unfinished session of the outpost.`,
		Args: exactArgs(1, "an outpost name or id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.Client()
			if err != nil {
				return err
			}
			if err := c.Outposts.Delete(cmd.Context(), args[0], force); err != nil {
				if client.IsConflict(err) && !force {
					return withForceHint(err)
				}
				return err
			}
			fmt.Fprintf(f.IO.ErrOut, "Deleted outpost %s.\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete even with claimed sessions, ending them")
	return cmd
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
