// Package orchestrator serves an outpost's sessions by provisioning a
// machine per session: it is the fleet.Runner of a fleet.Consumer of
// capacity MaxConcurrent (which lists and watches the queue, claims, renews
// and releases), provisioning a machine for each claimed session through a
// Backend, starting `outpost remote serve` in it under the spawn contract,
// and tearing the machine down when the session or its remote ends.
//
// Machines are named from session ids and their workspaces live in the
// state dir, so a restarted orchestrator adopts or removes what a crashed
// one left behind.
package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/internal/machine"
)

const (
	// DefaultPollInterval is how often the whole queue is listed again, to
	// catch anything the watch missed and to claim a backlog.
	DefaultPollInterval = 10 * time.Second
	// DefaultRetryAfter is how long a session whose provisioning failed is
	// left to other claimers before this orchestrator tries it again.
	DefaultRetryAfter = 30 * time.Second

	// checkEvery is how often each held session's entry is read, in case
	// the watch missed its end.
	checkEvery  = 3 * time.Second
	cursorFile  = "cursor"
	machinesDir = "machines"
)

// Options configure an orchestrator.
type Options struct {
	// Client uses a token of the outposts.machine scope; it never reaches a
	// machine.
	Client        *client.Client
	Outpost       string
	StateDir      string
	Backend       Backend
	MaxConcurrent int
	// AcceptorID empty means the id saved in StateDir/acceptor-id.
	AcceptorID   string
	PollInterval time.Duration
	RetryAfter   time.Duration
	// RemoteCommand serves a session; empty means [this executable,
	// "remote", "serve"].
	RemoteCommand []string
	// StaticBaseURL is where the remote builds sessions pin are published
	// in the /dist/ layout; empty means the server's /dist/.
	StaticBaseURL string
	// CacheDir holds downloaded remote builds; empty means StateDir/cache.
	CacheDir string
	// CAFile is the PEM file of extra CA certificates the client trusts;
	// remotes get it as OUTPOST_CA_FILE (the bwrap and docker backends
	// mount it read-only into the machine). Empty means the orchestrator's
	// own OUTPOST_CA_FILE, if any, is passed on.
	CAFile  string
	Logger  *slog.Logger
	Metrics *Metrics
}

type orchestrator struct {
	opts     Options
	c        *client.Client
	log      *slog.Logger
	m        *Metrics
	outpost  api.Outpost
	platform string
	id       *fleet.Identity
	consumer *fleet.Consumer
}

// Run orchestrates until ctx ends, then tears every machine down and
// releases every claim it holds.
func Run(ctx context.Context, opts Options) error {
	o, err := newOrchestrator(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer o.id.Close()
	return o.consumer.Run(ctx)
}

func newOrchestrator(ctx context.Context, opts Options) (*orchestrator, error) {
	if opts.Client == nil || opts.Backend == nil || opts.Outpost == "" || opts.StateDir == "" {
		return nil, errors.New("orchestrator: Client, Backend, Outpost and StateDir are required")
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 1
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	var err error
	if opts.StateDir, err = filepath.Abs(opts.StateDir); err != nil {
		return nil, err
	}
	if opts.CAFile != "" {
		if opts.CAFile, err = filepath.Abs(opts.CAFile); err != nil {
			return nil, err
		}
	}
	// A downloaded build is checked here and started in a machine's
	// workspace, so its path must not be relative.
	if opts.CacheDir != "" {
		if opts.CacheDir, err = filepath.Abs(opts.CacheDir); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(opts.StateDir, machinesDir), 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	if len(opts.RemoteCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the outpost executable: %w", err)
		}
		opts.RemoteCommand = []string{exe, "remote", "serve"}
	}
	o := &orchestrator{opts: opts, c: opts.Client, log: opts.Logger, m: opts.Metrics}
	op, err := o.c.Outposts.Get(ctx, opts.Outpost)
	if err != nil {
		return nil, fmt.Errorf("look up outpost %q: %w", opts.Outpost, err)
	}
	o.outpost = *op
	o.platform = fleet.OutpostPlatform(op)
	o.id, err = fleet.OpenIdentity(fleet.IdentityOptions{
		Dir: opts.StateDir, DirName: "orchestrator state dir", Kind: api.WorkerKindOrchestrator, AcceptorID: opts.AcceptorID,
		DirHint: "Give this orchestrator a state dir of its own with --state-dir DIR",
		Hint:    "Give this orchestrator its own --acceptor-id (or none: each state dir gets its own), or stop the other one",
	})
	if err != nil {
		return nil, err
	}
	c, err := o.newConsumer()
	if err != nil {
		o.id.Close()
		return nil, err
	}
	o.consumer = c
	o.log.Info("orchestrator ready", "outpost", op.Spec.Name, "outpost_id", op.Metadata.OutpostID,
		"backend", opts.Backend.Name(), "max_concurrent", opts.MaxConcurrent, "acceptor_id", o.id.AcceptorID, "state_dir", opts.StateDir)
	return o, nil
}

// newConsumer is the orchestrator's fleet consumer: capacity
// MaxConcurrent, a machine from the backend per session.
func (o *orchestrator) newConsumer() (*fleet.Consumer, error) {
	host, _ := os.Hostname()
	info := api.WorkerInfo{Kind: api.WorkerKindOrchestrator, Hostname: host, Version: machine.Version,
		MaxSessions: o.opts.MaxConcurrent, PID: os.Getpid(), Instance: o.id.Instance}
	c := &fleet.Consumer{
		Client:         o.c,
		Outpost:        o.outpost,
		Platform:       o.platform,
		Identity:       o.id,
		Capacity:       o.opts.MaxConcurrent,
		Runner:         o,
		Machine:        o.claimMachine(),
		Provisions:     o.opts.Backend.Name() == "exec",
		Presence:       fleet.NewPresence(o.c, o.outpost.Metadata.OutpostID, o.id.AcceptorID, info, 0, nil, o.log),
		RemoteCommand:  o.opts.RemoteCommand,
		PinnedOnly:     true,
		CAFile:         o.opts.CAFile,
		PollInterval:   o.opts.PollInterval,
		ResyncInterval: o.opts.PollInterval,
		CheckInterval:  checkEvery,
		RetryAfter:     o.opts.RetryAfter,
		CursorFile:     filepath.Join(o.opts.StateDir, cursorFile),
		Observer:       observer{o.m},
		Logger:         o.log,
	}
	c.Recover = func(ctx context.Context) []api.QueueEntry { return o.recover(ctx, c) }
	c.NetworkEnforcement = o.networkEnforcement
	c.Desktop = o.givesDesktop()
	// Every backend runs the build a session pins (Session.Remote, as a
	// worker does); the exec backend's commands get it as $OUTPOST_BIN.
	cache := o.opts.CacheDir
	if cache == "" {
		cache = filepath.Join(o.opts.StateDir, "cache")
	}
	r, err := fleet.NewResolver(fleet.ResolverOptions{BaseURL: o.opts.StaticBaseURL, Client: o.c, CacheDir: cache,
		Self: o.opts.RemoteCommand, CAFile: o.opts.CAFile, Logger: o.log})
	if err != nil {
		return nil, err
	}
	c.Resolver = r
	return c, nil
}

// spec is the machine of session id; env, when set, gives the spawn
// contract's environment for a state dir.
func (o *orchestrator) spec(id string, remote []string, env func(stateDir string) []string) Spec {
	ws := filepath.Join(o.opts.StateDir, machinesDir, MachineName(id))
	s := Spec{SessionID: id, Name: MachineName(id), Workspace: ws, Platform: o.platform, Remote: remote, Acceptor: o.id.AcceptorID,
		StaticBaseURL: o.opts.StaticBaseURL}
	if env != nil {
		s.Env = env(filepath.Join(ws, "state"))
	} else {
		s.Env = []string{api.EnvSessionID.Name + "=" + id}
	}
	return s
}

// recover deals with what a previous run left: machines whose claim is
// still ours are adopted, up to MaxConcurrent, by handing their renewed
// claims to the consumer (Run checks that they still run); every other
// leftover machine is torn down, and claims of ours without a machine are
// released.
func (o *orchestrator) recover(ctx context.Context, c *fleet.Consumer) []api.QueueEntry {
	dirs, _ := os.ReadDir(filepath.Join(o.opts.StateDir, machinesDir))
	var leftovers []string
	for _, d := range dirs {
		if id, ok := strings.CutPrefix(d.Name(), "outpost-"); ok && d.IsDir() {
			leftovers = append(leftovers, id)
		}
	}
	if l, ok := o.opts.Backend.(LeftoverLister); ok {
		ids, err := l.Leftovers(ctx, o.id.AcceptorID)
		if err != nil {
			o.log.Warn("cannot list leftover machines", "err", err)
		}
		leftovers = append(leftovers, ids...)
	}
	seen := map[string]bool{}
	var adopt []api.QueueEntry
	for _, id := range leftovers {
		if seen[id] {
			continue
		}
		seen[id] = true
		log := o.log.With("session", id, "machine", MachineName(id))
		e, err := o.c.Queue.Get(ctx, id)
		ours := err == nil && e.Status.Phase == api.PhaseClaimed && e.Status.AcceptorID != nil && *e.Status.AcceptorID == o.id.AcceptorID &&
			e.Status.SessionStatus != api.QueueSessionTerminated
		if ours && len(adopt) < o.opts.MaxConcurrent {
			if claim, err := o.c.Queue.Claim(ctx, id, o.id.AcceptorID); err == nil {
				adopt = append(adopt, *claim)
				continue
			}
		}
		log.Info("removing leftover machine")
		if err := o.opts.Backend.Teardown(context.WithoutCancel(ctx), o.spec(id, o.opts.RemoteCommand, nil)); err != nil {
			log.Warn("teardown of leftover machine failed", "err", err)
			o.m.fail("teardown")
		}
		if ours {
			why := fmt.Sprintf("the orchestrator restarted and removed machine %s, whose remote had stopped", MachineName(id))
			o.report(ctx, id, api.MachineStepTeardown, why, nil)
			c.Release(ctx, id, why)
		}
	}
	// Claims of ours that have no machine (a crash between claim and
	// provisioning) go back to the queue at once.
	l, err := o.c.Queue.List(ctx, client.QueueFilter{Outpost: o.outpost.Metadata.OutpostID, Phase: api.PhaseClaimed, AcceptorID: o.id.AcceptorID, First: 200})
	if err == nil {
		for _, e := range l.Items {
			if !seen[e.Metadata.SessionID] {
				c.Release(ctx, e.Metadata.SessionID, "")
			}
		}
	}
	return adopt
}

// observer counts the consumer's conflicts and failures in the metrics.
type observer struct{ m *Metrics }

func (ob observer) Conflict()           { ob.m.ClaimConflicts.Inc() }
func (ob observer) Failure(what string) { ob.m.fail(what) }
func (ob observer) Held(n int)          { ob.m.ClaimsHeld.Set(float64(n)) }

// claimMachine is the machine the orchestrator's claims describe: this
// one for the backends whose machines run here (process, bwrap, docker:
// a session needing more than this machine has is not theirs to take);
// nil for the exec backend, whose commands provision machines elsewhere
// and are given the requirements (api.EnvRequirements) to meet.
func (o *orchestrator) claimMachine() *api.ClaimMachine {
	if o.opts.Backend.Name() == "exec" {
		return nil
	}
	caps := detectHost()
	return &api.ClaimMachine{Capabilities: &caps}
}
