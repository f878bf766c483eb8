package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/budget"
	"github.com/outpost-sh/outpost/internal/cliconfig"
	"github.com/outpost-sh/outpost/internal/machine"
	"github.com/outpost-sh/outpost/internal/netpolicy"
)

// NewCmdSessions returns `outpost sessions`.
func NewCmdSessions(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "sessions",
		Aliases: []string{"session"},
		Short:   "Create, list, show, follow and end sessions",
	}
	cmd.AddCommand(NewCmdSessionsCreate(f, nil), NewCmdSessionsList(f, nil), NewCmdSessionsGet(f, nil),
		NewCmdSessionsLogs(f, nil), NewCmdSessionsTerminate(f, nil), NewCmdSessionsSend(f, nil),
		NewCmdSessionsSuspend(f, nil), NewCmdSessionsResume(f, nil), NewCmdSessionsRerun(f, nil), NewCmdSessionsFork(f, nil),
		NewCmdSessionsArtifacts(f, nil), NewCmdSessionsNetwork(f), NewCmdSessionsDesktop(f, nil),
		NewCmdSessionsApprove(f, nil), NewCmdSessionsDeny(f, nil), NewCmdSessionsApprovals(f, nil))
	return cmd
}

// SessionsCreateOptions are the settings of `outpost sessions create`.
type SessionsCreateOptions struct {
	f       *Factory
	File    string
	Outpost string
	Title   string
	Prompt  string
	// RemoteBinarySHA pins the session's remote build (overrides the file).
	RemoteBinarySHA string
	// Priority is the session's priority when PrioritySet (overrides the
	// file).
	Priority    int
	PrioritySet bool
	Follow      bool
	// Policy are the network policy flags (override the file).
	Policy PolicyFlags
	// Request is built from File and the flags by resolve.
	Request api.CreateSessionRequest
}

// NewCmdSessionsCreate returns `outpost sessions create`. runF replaces the
// run in tests.
func NewCmdSessionsCreate(f *Factory, runF func(context.Context, *SessionsCreateOptions) error) *cobra.Command {
	opts := &SessionsCreateOptions{f: f}
	cmd := &cobra.Command{
		Use:   "create --outpost NAME --file SESSION.yaml",
		Short: "Create a session and print its id",
		Long: `Create a session from a YAML or JSON file holding the fields of a session
request (outpost, title, prompt, repos, agent, env, secrets, limits,
remote_binary_sha, priority); an unknown field is an error. --outpost, --title,
--prompt, --remote-binary-sha and --priority override the file.
A script stops at its first failed step unless the step has
continue_on_error: true. With --follow, print the transcript until the
session ends; the exit status is then 1 unless it finished (an error, a
failed step, a limit or a terminate).`,
		Example: `  outpost sessions create --outpost dev --file session.yaml
  outpost sessions create --file session.json --title "nightly build" --follow
  cat session.yaml | outpost sessions create --file -
  outpost sessions create --outpost dev --file session.yaml --remote-binary-sha 1a2b3c4d5e6f
  outpost sessions create --outpost dev --file session.yaml --priority 10`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.PrioritySet = cmd.Flags().Changed("priority")
			if err := opts.resolve(f); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsCreate(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.File, "file", "", "session file, YAML or JSON (- for standard input)")
	fl.StringVar(&opts.Outpost, "outpost", "", "outpost name or id (overrides the file)")
	fl.StringVar(&opts.Title, "title", "", "title (overrides the file)")
	fl.StringVar(&opts.Prompt, "prompt", "", "prompt (overrides the file)")
	fl.StringVar(&opts.RemoteBinarySHA, "remote-binary-sha", "", "remote build to serve the session, over its outpost's (overrides the file)")
	fl.IntVar(&opts.Priority, "priority", 0, "place in the outpost's queue: higher is claimed first, FIFO within one (overrides the file)")
	fl.BoolVar(&opts.Follow, "follow", false, "print the transcript until the session ends")
	opts.Policy.add(fl)
	return cmd
}

func (o *SessionsCreateOptions) resolve(f *Factory) error {
	if o.File != "" {
		var b []byte
		var err error
		if o.File == "-" {
			b, err = readAll(f.IO.In)
		} else {
			b, err = os.ReadFile(o.File)
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("the session file %s does not exist (--file)", o.File)
		case err != nil:
			return fmt.Errorf("read the session file %s: %w", o.File, err)
		}
		if o.Request, err = parseSessionFile(o.File, b); err != nil {
			return err
		}
	}
	for _, kv := range []struct {
		flag string
		dst  *string
	}{{o.Outpost, &o.Request.Outpost}, {o.Title, &o.Request.Title}, {o.Prompt, &o.Request.Prompt},
		{o.RemoteBinarySHA, &o.Request.RemoteBinarySHA}} {
		if kv.flag != "" {
			*kv.dst = kv.flag
		}
	}
	if o.PrioritySet {
		o.Request.Priority = o.Priority
	}
	if o.Policy.given() {
		p, err := o.Policy.policy(f)
		if err != nil {
			return err
		}
		o.Request.NetworkPolicy = p
	}
	if o.Request.Outpost == "" {
		return usageErrorf("sessions create needs an outpost: pass --outpost or set outpost in the file")
	}
	return nil
}

// parseSessionFile decodes a YAML or JSON session request, refusing unknown
// fields so that a typo is not silently ignored.
func parseSessionFile(name string, b []byte) (api.CreateSessionRequest, error) {
	var req api.CreateSessionRequest
	if err := yaml.UnmarshalStrict(b, &req); err != nil {
		msg := strings.TrimPrefix(err.Error(), "error unmarshaling JSON: while decoding JSON: ")
		if m := unknownField.FindStringSubmatch(msg); m != nil {
			return req, errors.New(unknownFieldMessage(name, b, m[1]))
		}
		return req, fmt.Errorf("%s is not a valid session file: %s", name, msg)
	}
	// A network_policy with rules but no "enabled" decodes as disabled:
	// refused here as the server refuses it, since the client sends the
	// decoded request, in which a missing "enabled" reads as false.
	if j, err := yaml.YAMLToJSON(b); err == nil {
		var shape struct {
			NetworkPolicy json.RawMessage `json:"network_policy"`
		}
		if json.Unmarshal(j, &shape) == nil {
			if err := netpolicy.CheckEnabledKey(shape.NetworkPolicy); err != nil {
				return req, usageErrorf("%s: %v", name, err)
			}
		}
	}
	return req, nil
}

// unknownField matches the strict decoder's refusal of a key.
var unknownField = regexp.MustCompile(`^json: unknown field "([^"]+)"`)

// unknownFieldMessage says where in a session file the unknown key is and,
// when a field of the request is close to it, which was likely meant.
func unknownFieldMessage(name string, b []byte, key string) string {
	line := ""
	at := regexp.MustCompile(`^\s*(?:-\s+)?["']?` + regexp.QuoteMeta(key) + `["']?\s*:`)
	for i, l := range strings.Split(string(b), "\n") {
		if at.MatchString(l) {
			line = fmt.Sprintf("line %d: ", i+1)
			break
		}
	}
	msg := fmt.Sprintf("%s is not a valid session file: %sunknown key %q", name, line, key)
	if s := cliconfig.Closest(key, sessionFileKeys()); s != "" {
		return msg + fmt.Sprintf(" (did you mean %q?)", s)
	}
	return msg + ": see docs/api.md for the fields of a session (api.CreateSessionRequest)"
}

// sessionFileKeys lists every key a session file may hold, at any depth.
func sessionFileKeys() []string {
	seen := map[reflect.Type]bool{}
	var names []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for f := range t.Fields() {
			if !f.IsExported() {
				continue
			}
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if tag == "-" {
				continue
			}
			if f.Anonymous && tag == "" {
				walk(f.Type)
				continue
			}
			if tag == "" {
				tag = f.Name
			}
			names = append(names, tag)
			walk(f.Type)
		}
	}
	walk(reflect.TypeFor[api.CreateSessionRequest]())
	slices.Sort(names)
	return slices.Compact(names)
}

func runSessionsCreate(ctx context.Context, o *SessionsCreateOptions) error {
	f := o.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	s, err := c.Sessions.Create(ctx, o.Request)
	if err != nil {
		return err
	}
	id := s.Metadata.SessionID
	switch {
	case f.JSON() && !o.Follow:
		return printJSON(f.IO.Out, s)
	case !o.Follow:
		fmt.Fprintln(f.IO.Out, id)
		return nil
	}
	fmt.Fprintf(f.IO.ErrOut, "Created session %s; following it (Ctrl-C stops following, not the session).\n", id)
	return followTranscript(ctx, f, c, id)
}

// sessionStatuses are the values of sessions list --status.
var sessionStatuses = []string{api.StatusNew, api.StatusClaimed, api.StatusRunning, api.StatusResuming,
	api.StatusSuspended, api.StatusExit, api.StatusError}

// SessionsListOptions are the settings of `outpost sessions list`.
type SessionsListOptions struct {
	f *Factory
	// Filter is what to list: --outpost, --status, --worker and --limit
	// (First; 0 means the server's default).
	Filter client.SessionFilter
}

// NewCmdSessionsList returns `outpost sessions list`. runF replaces the run
// in tests.
func NewCmdSessionsList(f *Factory, runF func(context.Context, *SessionsListOptions) error) *cobra.Command {
	opts := &SessionsListOptions{f: f}
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List sessions, newest first",
		Example: "  outpost sessions list\n  outpost sessions list --outpost dev --status running --limit 10 -o json\n  outpost sessions list --worker worker-box1-3f9a",
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Filter.First < 0 || opts.Filter.First > 200 {
				return usageErrorf("--limit must be from 1 to 200, not %d", opts.Filter.First)
			}
			if opts.Filter.Status != "" && !slices.Contains(sessionStatuses, opts.Filter.Status) {
				return usageErrorf("--status must be one of %s, not %q", strings.Join(sessionStatuses, ", "), opts.Filter.Status)
			}
			if opts.Filter.Worker != "" {
				if err := api.ValidateAcceptorID(opts.Filter.Worker); err != nil {
					return usageErrorf("--worker: %s", err)
				}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsList(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Filter.Outpost, "outpost", "", "only sessions of this outpost")
	fl.StringVar(&opts.Filter.Status, "status", "", "only sessions with this status ("+strings.Join(sessionStatuses, ", ")+")")
	fl.StringVar(&opts.Filter.Worker, "worker", "", "only sessions this worker (an acceptor id) ran")
	fl.StringVar(&opts.Filter.ForkedFrom, "forked-from", "", "only the sessions forked from this session")
	fl.IntVar(&opts.Filter.First, "limit", 0, "at most this many sessions (1–200; default 50)")
	return cmd
}

func runSessionsList(ctx context.Context, opts *SessionsListOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	l, err := c.Sessions.List(ctx, opts.Filter)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, l)
	}
	now := time.Now()
	t := newTable(f.IO.Out, "ID", "OUTPOST", "STATUS", "CREATED", "WORKER", "TITLE")
	for _, s := range l.Items {
		outpost := s.Spec.Outpost
		if outpost == "" {
			outpost = s.Metadata.OutpostID
		}
		worker := s.Status.Worker
		if worker == "" {
			worker = "-"
		}
		t.row(s.Metadata.SessionID, outpost, statusText(s.Status.Status, s.Status.StatusDetail),
			ago(s.Metadata.CreatedAt, now), worker, truncate(s.Spec.Title, 50))
	}
	return t.flush()
}

// SessionsGetOptions are the settings of `outpost sessions get`.
type SessionsGetOptions struct {
	f *Factory
	// ID is the session (the argument).
	ID string
}

// NewCmdSessionsGet returns `outpost sessions get`. runF replaces the run in
// tests.
func NewCmdSessionsGet(f *Factory, runF func(context.Context, *SessionsGetOptions) error) *cobra.Command {
	opts := &SessionsGetOptions{f: f}
	return &cobra.Command{
		Use:     "get ID",
		Short:   "Show one session",
		Example: "  outpost sessions get devin-123\n  outpost sessions get devin-123 -o json",
		Args:    exactArgs(1, "a session id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsGet(cmd.Context(), opts)
		},
	}
}

func runSessionsGet(ctx context.Context, opts *SessionsGetOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	s, err := c.Sessions.Get(ctx, opts.ID)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, s)
	}
	now := time.Now()
	acceptor := ""
	if s.Status.AcceptorID != nil {
		acceptor = *s.Status.AcceptorID
	}
	repos := make([]string, 0, len(s.Spec.Repos))
	for _, r := range s.Spec.Repos {
		repos = append(repos, r.URL)
	}
	return fields(f.IO.Out,
		"ID", s.Metadata.SessionID, "Title", s.Spec.Title, "Outpost", s.Spec.Outpost,
		"Status", statusText(s.Status.Status, s.Status.StatusDetail), "Reason", s.Status.Reason,
		"Agent", s.Spec.Agent.Kind, "Repos", strings.Join(repos, ", "), "Acceptor", acceptor,
		"Created", timestamp(&s.Metadata.CreatedAt, now), "Started", timestamp(s.Status.StartedAt, now),
		"Ended", timestamp(s.Status.EndedAt, now), "Last call", strconv.FormatInt(s.Status.LastSeq, 10),
		"Usage", budget.DescribeUsage(s.Status.Usage),
		"Machine", machineText(s.Status.Capabilities), "Network policy", sessionPolicyText(s))
}

// SessionsTerminateOptions are the settings of `outpost sessions terminate`.
type SessionsTerminateOptions struct {
	f *Factory
	// ID is the session (the argument).
	ID string
	// Reason is recorded on the session; "" means none.
	Reason string
}

// NewCmdSessionsTerminate returns `outpost sessions terminate`. runF
// replaces the run in tests.
func NewCmdSessionsTerminate(f *Factory, runF func(context.Context, *SessionsTerminateOptions) error) *cobra.Command {
	opts := &SessionsTerminateOptions{f: f}
	cmd := &cobra.Command{
		Use:     "terminate ID",
		Short:   "End a session",
		Example: `  outpost sessions terminate devin-123 --reason "wrong branch"`,
		Args:    exactArgs(1, "a session id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsTerminate(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why, recorded on the session")
	return cmd
}

func runSessionsTerminate(ctx context.Context, opts *SessionsTerminateOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	s, err := c.Sessions.Terminate(ctx, opts.ID, opts.Reason)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, s)
	}
	fmt.Fprintf(f.IO.Out, "Session %s is %s.\n", s.Metadata.SessionID, statusText(s.Status.Status, s.Status.StatusDetail))
	return nil
}

// SessionsSendOptions are the settings of `outpost sessions send`.
type SessionsSendOptions struct {
	f *Factory
	// ID is the session and Text the message (the arguments).
	ID, Text string
}

// NewCmdSessionsSend returns `outpost sessions send`. runF replaces the run
// in tests.
func NewCmdSessionsSend(f *Factory, runF func(context.Context, *SessionsSendOptions) error) *cobra.Command {
	opts := &SessionsSendOptions{f: f}
	return &cobra.Command{
		Use:     "send ID TEXT",
		Short:   "Send a message to an llm session; the model reads it at its next turn",
		Example: "  outpost sessions send devin-123 \"Also update the changelog.\"",
		Args:    exactArgs(2, "a session id and the message"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID, opts.Text = args[0], args[1]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsSend(cmd.Context(), opts)
		},
	}
}

func runSessionsSend(ctx context.Context, opts *SessionsSendOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	ev, err := c.Sessions.Send(ctx, opts.ID, opts.Text)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, ev)
	}
	fmt.Fprintf(f.IO.Out, "Message %d sent to session %s.\n", ev.Seq, opts.ID)
	return nil
}

// machineText summarises the capabilities of a session's machine:
// "linux/amd64 on box-1, 8 CPUs, 31.2 GiB[, 2 × NVIDIA H200 (140.4 GiB)];
// git 2.39.5, ffmpeg 5.1.6, chromium 156; passwordless sudo".
func machineText(c *api.Capabilities) string {
	if c == nil {
		return "-"
	}
	s := fmt.Sprintf("%s/%s on %s, %d CPUs, %.1f GiB", c.OS, c.Arch, orDash(c.Hostname), c.CPUs, float64(c.MemoryBytes)/(1<<30))
	if len(c.GPUs) > 0 {
		s += ", " + gpuText(c.GPUs)
	}
	if p := machine.Programs(*c); len(p) > 0 {
		s += "; " + strings.Join(p, ", ")
	} else {
		s += "; no git, ffmpeg or browser"
	}
	if c.PasswordlessSudo {
		s += "; passwordless sudo"
	}
	return s
}
