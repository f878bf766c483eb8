package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
)

// suspendTimeout bounds the wait for a suspend: the server's own bound on
// the remote's snapshot.
const suspendTimeout = 20 * time.Minute

// SessionsSuspendOptions are the settings of `outpost sessions suspend`.
type SessionsSuspendOptions struct {
	f *Factory
	// ID is the session (the argument).
	ID string
	// Wait bounds the wait for running calls (--wait); zero means the
	// server's bound.
	Wait time.Duration
	// Interrupt stops the running calls instead (--interrupt).
	Interrupt bool
	// NoWait returns once the suspend has begun (--no-wait).
	NoWait bool
	// poll is how often the suspend is followed; zero means a second.
	poll time.Duration
}

// NewCmdSessionsSuspend returns `outpost sessions suspend`. runF replaces
// the run in tests.
func NewCmdSessionsSuspend(f *Factory, runF func(context.Context, *SessionsSuspendOptions) error) *cobra.Command {
	opts := &SessionsSuspendOptions{f: f}
	cmd := &cobra.Command{
		Use:   "suspend ID",
		Short: "Suspend a running session, keeping its workspace",
		Long: `Suspend a running session: its machine takes a snapshot of the workspace
(repositories with uncommitted and untracked changes, and every other file;
not processes or memory), uploads it to the server and is released. The
command returns once the session is suspended. Resume it with
'outpost sessions resume' (or, for an llm session, by sending it a message).

The snapshot is taken once no call runs on the machine. While a call runs
the command says so every few seconds ("waiting for the running call to
finish: exec ` + "`make test`" + ` (running 12 s)"). --wait bounds that wait
(default and most 10m): past it the suspend is withdrawn, the session goes
on running, and the command fails saying so. --interrupt stops the running
call instead (llm and external sessions): its result on the transcript,
which the agent reads when the session resumes, says it was interrupted.
--no-wait returns once the suspend has begun; 'outpost sessions get ID'
then shows the session suspended (the API follows it at
GET /v1/sessions/ID/suspend).`,
		Example: `  outpost sessions suspend devin-123
  outpost sessions suspend devin-123 --wait 30s
  outpost sessions suspend devin-123 --interrupt
  outpost sessions suspend devin-123 --no-wait`,
		Args: exactArgs(1, "a session id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if opts.Wait < 0 || opts.Wait > api.MaxSuspendWaitS*time.Second {
				return usageErrorf("--wait %s: give a duration up to %s (such as 30s or 5m)", opts.Wait, api.MaxSuspendWaitS*time.Second)
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsSuspend(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&opts.Wait, "wait", 0, "how long to wait for a running call to finish before the suspend is withdrawn (default and most 10m)")
	fl.BoolVar(&opts.Interrupt, "interrupt", false, "stop a running call instead of waiting for it; the transcript records it interrupted (llm and external sessions)")
	fl.BoolVar(&opts.NoWait, "no-wait", false, "return once the suspend has begun, without waiting for the snapshot")
	return cmd
}

// progressEvery is how often the command repeats what it waits for.
const progressEvery = 5 * time.Second

func runSessionsSuspend(ctx context.Context, opts *SessionsSuspendOptions) error {
	c, err := opts.f.Client()
	if err != nil {
		return err
	}
	// A large workspace takes a while to archive and upload.
	ctx, cancel := context.WithTimeout(ctx, suspendTimeout)
	defer cancel()
	// Whole seconds, rounded up: a wait is never cut shorter than asked.
	waitS := int((opts.Wait + time.Second - 1) / time.Second)
	p, err := c.Sessions.SuspendAsync(ctx, opts.ID, api.SuspendRequest{WaitS: waitS, Interrupt: opts.Interrupt})
	if err != nil {
		return err
	}
	if opts.NoWait {
		if opts.f.JSON() {
			return printJSON(opts.f.IO.Out, p)
		}
		what := strings.TrimSuffix(suspendProgressLine(p, time.Now()), "…")
		if what == "" {
			what = strings.ReplaceAll(p.State, "_", " ")
		}
		fmt.Fprintf(opts.f.IO.Out, "Session %s is being suspended (%s). 'outpost sessions get %s' shows it suspended once its snapshot is stored.\n",
			opts.ID, what, opts.ID)
		return nil
	}
	poll := opts.poll
	if poll <= 0 {
		poll = time.Second
	}
	var said string
	var saidAt time.Time
	for {
		switch p.State {
		case api.SuspendDone:
			s, err := c.Sessions.Get(ctx, opts.ID)
			if err != nil {
				return err
			}
			return printSessionState(opts.f, s)
		case api.SuspendFailed:
			return fmt.Errorf("the suspend of session %s failed: %s", opts.ID, p.Error)
		case api.SuspendNone:
			return fmt.Errorf("the suspend of session %s ended without suspending it; 'outpost sessions logs %s' shows why", opts.ID, opts.ID)
		}
		// A change is said at once; the same wait again every few
		// seconds, with its running time grown.
		line, key := suspendProgressLine(p, time.Now()), suspendProgressKey(p)
		if line != "" && (key != said || time.Since(saidAt) >= progressEvery) {
			fmt.Fprintln(opts.f.IO.ErrOut, line)
			said, saidAt = key, time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up following the suspend of session %s after %s; it may still finish: 'outpost sessions get %s' shows it", opts.ID, suspendTimeout, opts.ID)
		case <-time.After(poll):
		}
		if p, err = c.Sessions.SuspendProgress(ctx, opts.ID); err != nil {
			return err
		}
	}
}

// suspendProgressKey identifies what a suspend waits for, so that a
// change is said at once.
func suspendProgressKey(p *api.SuspendProgress) string {
	if p.State == api.SuspendWaiting && len(p.Calls) == 0 {
		// Nothing left to wait for: said as the snapshot it goes on to.
		return api.SuspendSnapshotting
	}
	key := p.State
	for _, c := range p.Calls {
		key += fmt.Sprintf(" %d", c.Seq)
	}
	return key
}

// suspendProgressLine says what a suspend waits for at now, "" when
// nothing is worth a line.
func suspendProgressLine(p *api.SuspendProgress, now time.Time) string {
	switch p.State {
	case api.SuspendSnapshotting:
		return "taking the workspace snapshot…"
	case api.SuspendWaiting:
		if len(p.Calls) == 0 {
			// No call runs (or the one interrupted has stopped): the
			// snapshot is next.
			return "taking the workspace snapshot…"
		}
		var parts []string
		for _, c := range p.Calls {
			what := c.Tool
			if c.Target != "" {
				what += " `" + truncate(c.Target, 80) + "`"
			}
			running := max(now.Sub(time.UnixMilli(c.StartedMS)), 0).Truncate(time.Second)
			parts = append(parts, fmt.Sprintf("%s (running %d s)", what, int(running/time.Second)))
		}
		verb := "waiting for the running call to finish"
		switch {
		case p.Interrupt && len(parts) > 1:
			verb = "stopping the running calls"
		case p.Interrupt:
			verb = "stopping the running call"
		case len(parts) > 1:
			verb = "waiting for the running calls to finish"
		}
		return verb + ": " + strings.Join(parts, ", ")
	}
	return ""
}

// SessionsResumeOptions are the settings of `outpost sessions resume`.
type SessionsResumeOptions struct {
	f *Factory
	// ID is the session (the argument).
	ID string
}

// NewCmdSessionsResume returns `outpost sessions resume`. runF replaces the
// run in tests.
func NewCmdSessionsResume(f *Factory, runF func(context.Context, *SessionsResumeOptions) error) *cobra.Command {
	opts := &SessionsResumeOptions{f: f}
	return &cobra.Command{
		Use:   "resume ID",
		Short: "Resume a suspended session on the next free machine",
		Long: `Resume a suspended session: it goes back to its outpost's queue, and the
next machine restores its workspace snapshot before it runs any call.`,
		Example: `  outpost sessions resume devin-123`,
		Args:    exactArgs(1, "a session id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsResume(cmd.Context(), opts)
		},
	}
}

func runSessionsResume(ctx context.Context, opts *SessionsResumeOptions) error {
	c, err := opts.f.Client()
	if err != nil {
		return err
	}
	s, err := c.Sessions.Resume(ctx, opts.ID)
	if err != nil {
		return err
	}
	return printSessionState(opts.f, s)
}

// printSessionState prints a session's new state, or the session as JSON.
func printSessionState(f *Factory, s *api.Session) error {
	if f.JSON() {
		return printJSON(f.IO.Out, s)
	}
	fmt.Fprintf(f.IO.Out, "Session %s is %s.\n", s.Metadata.SessionID, statusText(s.Status.Status, s.Status.StatusDetail))
	return nil
}
