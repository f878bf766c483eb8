package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// eventsPage is how many events one page of `sessions logs` asks for.
const eventsPage = 1000

// SessionsLogsOptions are the settings of `outpost sessions logs`.
type SessionsLogsOptions struct {
	f *Factory
	// ID is the session (the argument).
	ID string
	// Follow prints the session live until it ends.
	Follow bool
}

// NewCmdSessionsLogs returns `outpost sessions logs`. runF replaces the run
// in tests.
func NewCmdSessionsLogs(f *Factory, runF func(context.Context, *SessionsLogsOptions) error) *cobra.Command {
	opts := &SessionsLogsOptions{f: f}
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a session's transcript",
		Long: `Print a session's transcript: status changes with their reasons, "$ command"
for each exec call, its output, and results with exit codes. With -f, follow
the session live until it ends; the exit status is then 1 unless it finished
(an error, a failed step, a limit or a terminate).
With -o json, print one event per line.`,
		Example: "  outpost sessions logs devin-123\n  outpost sessions logs -f devin-123\n  outpost sessions logs devin-123 -o json | jq .type",
		Args:    exactArgs(1, "a session id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsLogs(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "follow the session live until it ends")
	return cmd
}

func runSessionsLogs(ctx context.Context, opts *SessionsLogsOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	if opts.Follow {
		return followTranscript(ctx, f, c, opts.ID)
	}
	emit := eventWriter(f)
	var after int64
	for {
		page, err := c.Sessions.Events(ctx, opts.ID, after, eventsPage)
		if err != nil {
			return err
		}
		for _, ev := range page.Items {
			if err := emit(ev); err != nil {
				return err
			}
		}
		if !page.HasNextPage || page.Next <= after {
			return nil
		}
		after = page.Next
	}
}

// eventWriter returns the function that prints an event in the chosen
// output format.
func eventWriter(f *Factory) func(api.Event) error {
	if f.JSON() {
		enc := json.NewEncoder(f.IO.Out)
		return func(ev api.Event) error { return enc.Encode(ev) }
	}
	return newTranscriptPrinter(f.IO.Out, time.Local).Print
}

// followTranscript prints a session's events live until its end event, and
// returns a *sessionFailedError (exit code 1) when the session did not
// finish well, so scripts and CI jobs can tell.
func followTranscript(ctx context.Context, f *Factory, c *client.Client, id string) error {
	emit := eventWriter(f)
	var end *api.Event
	err := c.Sessions.Follow(ctx, id, 0, func(ev api.Event) error {
		if ev.Type == api.EventEnd {
			end = &ev
		}
		return emit(ev)
	})
	if err != nil {
		return err
	}
	if end != nil && !succeeded(end.Status, end.StatusDetail) {
		return &sessionFailedError{id: id, status: end.Status, detail: end.StatusDetail, reason: end.Reason}
	}
	return nil
}

// succeeded reports whether a session that ended with status and detail
// did what it was asked: it finished (for a script, no step failed that
// lacked continue_on_error), or an interactive session was left idle. An
// error, a limit, a terminate and a deleted outpost are failures, as a CI
// job that was cancelled or timed out is not a success.
func succeeded(status, detail string) bool {
	return status == api.StatusExit && (detail == api.DetailFinished || detail == api.DetailInactivity)
}

// sessionFailedError is a followed session that ended without success.
type sessionFailedError struct {
	id, status, detail, reason string
}

func (e *sessionFailedError) Error() string {
	what := "ended " + statusText(e.status, e.detail)
	switch {
	case e.status == api.StatusError:
		what = "failed"
	case e.detail == api.DetailUserRequest:
		what = "was terminated"
	case e.detail == api.DetailUsageLimitExceeded:
		what = "was stopped by a limit"
	case e.detail == api.DetailOutpostDeleted:
		what = "ended with its outpost"
	}
	return fmt.Sprintf("session %s %s%s", e.id, what, reasonText(e.reason))
}

func readAll(r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, fmt.Errorf("no standard input")
	}
	return io.ReadAll(io.LimitReader(r, 16<<20))
}
