package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/atomicfile"
)

// SessionsArtifactsOptions are the settings of `outpost sessions
// artifacts`.
type SessionsArtifactsOptions struct {
	f *Factory
	// ID is the session (the argument).
	ID string
	// Get is the artifact to download; "" lists them.
	Get string
	// Out is the file Get is written to: "" means ./NAME, "-" standard
	// output.
	Out string
}

// NewCmdSessionsArtifacts returns `outpost sessions artifacts`. runF
// replaces the run in tests.
func NewCmdSessionsArtifacts(f *Factory, runF func(context.Context, *SessionsArtifactsOptions) error) *cobra.Command {
	opts := &SessionsArtifactsOptions{f: f}
	cmd := &cobra.Command{
		Use:   "artifacts ID [--get NAME] [--out FILE]",
		Short: "List a session's artifacts, or download one",
		Long: `List the files a session uploaded with the upload_artifact tool, or, with
--get, download one to --out (default ./NAME; - for standard output).`,
		Example: "  outpost sessions artifacts ses_123\n  outpost sessions artifacts ses_123 --get report.pdf --out /tmp/report.pdf",
		Args:    exactArgs(1, "a session id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if opts.Out != "" && opts.Get == "" {
				return fmt.Errorf("--out needs --get NAME")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsArtifacts(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Get, "get", "", "download the artifact with this name")
	fl.StringVar(&opts.Out, "out", "", "file to write the download to (default ./NAME; - for standard output)")
	return cmd
}

func runSessionsArtifacts(ctx context.Context, opts *SessionsArtifactsOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	get, out := opts.Get, opts.Out
	if get != "" {
		if err := api.ValidateArtifactName(get); err != nil {
			return err
		}
		if out == "-" {
			return c.Artifacts.Get(ctx, opts.ID, get, f.IO.Out)
		}
		if out == "" {
			out = get
		}
		if err := downloadArtifact(ctx, c, opts.ID, get, out); err != nil {
			return err
		}
		fmt.Fprintf(f.IO.ErrOut, "Wrote artifact %s to %s.\n", get, out)
		return nil
	}
	l, err := c.Artifacts.List(ctx, opts.ID)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, l)
	}
	now := time.Now()
	t := newTable(f.IO.Out, "NAME", "SIZE", "TYPE", "CREATED")
	for _, a := range l.Items {
		t.row(a.Name, strconv.FormatInt(a.Size, 10), a.ContentType, ago(a.CreatedAt.Unix(), now))
	}
	return t.flush()
}

// downloadArtifact writes an artifact to path whole, so a failed download
// leaves nothing half-written. The API's errors come back as they are.
func downloadArtifact(ctx context.Context, c *client.Client, sessionID, name, path string) error {
	var apiErr error
	err := atomicfile.WriteFunc(path, 0o600, func(w io.Writer) error {
		apiErr = c.Artifacts.Get(ctx, sessionID, name, w)
		return apiErr
	})
	switch {
	case apiErr != nil:
		return apiErr
	case err != nil:
		return fmt.Errorf("download artifact %s: %w", name, err)
	}
	return nil
}
