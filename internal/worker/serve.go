package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/internal/machine"
	"github.com/outpost-sh/outpost/internal/netguard"
	"github.com/outpost-sh/outpost/internal/steptrace"
)

// killDelay is how long a remote asked to stop has before it is killed.
const killDelay = 5 * time.Second

// errStart marks a remote that could not be started at all; the next
// session would fail the same way, so the worker stops.
var errStart = errors.New("cannot start the remote")

// remoteProc is a running remote and the writers of its output.
type remoteProc struct {
	cmd       *exec.Cmd
	stdout    *lineWriter
	stderr    *lineWriter
	logFile   *os.File
	exited    chan error    // receives cmd.Wait's result once
	dead      chan struct{} // closed when the process has exited
	stateDir  string
	startedAt time.Time
	// stopped is set when the worker stopped the remote; the session is then
	// not expected to end, so its status is read once, not waited for.
	stopped bool
	// restricted is set when it was stopped because the session's network
	// policy was enabled while it ran outside a namespace.
	restricted bool
}

// Run is the worker's fleet.Runner: it runs a remote for the claimed
// session until the remote exits. When the claim is lost (ctx ends) it
// stops the remote at once; when the worker shuts down (s.Stopping) it gives
// the remote GracePeriod first.
func (w *worker) Run(ctx context.Context, s *fleet.Session) fleet.Outcome {
	id := s.ID
	steptrace.Mark("worker.run", id)
	log := w.log.With("session", id)
	if !w.opts.Once {
		defer w.pre.afterSession()
	}
	sctx, cancelSetup := s.Setup(ctx)
	defer cancelSetup()
	if err := w.ws.before(sctx, id); err != nil {
		out := fleet.NotStarted(err)
		if w.opts.Once || errors.Is(err, ErrWorkspace) {
			out = out.StopAfter()
		}
		return out
	}
	steptrace.Mark("worker.workspace_ready", id)
	claim := s.Claim
	if claim.Status.GatewayURL == "" {
		claim.Status.GatewayURL = w.opts.GatewayURL
	}
	var guard *netguard.Guard
	if fleet.Restricted(&claim) {
		var out fleet.Outcome
		if guard, out = w.startGuard(sctx, s, &claim, log); guard == nil {
			return out
		}
		defer guard.Close()
	}
	rc, err := s.Remote(sctx)
	steptrace.Mark("worker.remote_resolved", id)
	var p *remoteProc
	if err == nil {
		p, err = w.start(&claim, rc, s.Env, guard)
	}
	if err != nil {
		// The next session would fail the same way: the worker stops.
		return fleet.NotStarted(fmt.Errorf("%w for session %s: %w", errStart, id, err)).
			WithReason(fmt.Sprintf("Cannot start the remote: %v.", err)).StopAfter()
	}
	defer p.logFile.Close()
	log.Info("remote started", "pid", p.cmd.Process.Pid, "state_dir", p.stateDir, "network_policy", guard != nil)
	if guard != nil {
		guard.Follow(s.Updated(), s.Entry)
	}

	var restricting <-chan struct{}
	if guard == nil {
		// An open session whose policy is enabled while it runs has no
		// enforcement point: its remote stops, and it restarts behind one.
		wctx, stopWatching := context.WithCancel(ctx)
		defer stopWatching()
		restricting = s.Restricting(wctx)
	}
	exitErr := w.wait(ctx, p, s.Stopping(), restricting, log)
	p.stdout.flush()
	p.stderr.flush()
	w.iso.endLeftovers(ctx, log)
	w.mirrors.afterSession(ctx, id, p.stateDir)
	log.Info("remote exited", "remote_exit", fleet.ExitString(exitErr), "duration", time.Since(p.startedAt).Round(time.Second))
	err = fmt.Errorf("remote for session %s stopped before the session ended (%s)", id, fleet.ExitString(exitErr))
	var out fleet.Outcome
	switch {
	case p.restricted:
		out = fleet.Stopped(err).WithReason("The session's network policy was enabled while its remote ran without one; the remote was stopped so that the session restarts behind the policy.")
	case p.stopped:
		// The worker stopped it (the claim was lost, the worker shuts
		// down): the queue alone says whether the session is over.
		out = fleet.Stopped(err)
	case fleet.RemoteRejected(exitErr):
		out = fleet.HandedOff(err)
	default:
		out = fleet.Exited(err)
	}
	if w.opts.Once {
		out = out.StopAfter()
	}
	return out
}

// start starts the remote command rc under the spawn contract, with the
// environment env gives for the session's state dir: the pre-started
// remote when it fits the session (prestart.go), else a new process. A
// restricted session's remote starts in its guard's network namespace,
// never as the pre-started remote, which runs in the worker's.
func (w *worker) start(claim *api.QueueEntry, rc []string, env func(stateDir string) []string, guard *netguard.Guard) (*remoteProc, error) {
	id := claim.Metadata.SessionID
	if claim.Status.GatewayURL == "" || claim.Status.ConnectToken == "" {
		return nil, errors.New("the claim answer has no gateway_url or connect_token (pass --gateway-url when the server gives none)")
	}
	stateDir, err := w.stateDir(id)
	if err != nil {
		return nil, err
	}
	if guard == nil {
		if p := w.pre.take(rc, id, stateDir, env); p != nil {
			return p, nil
		}
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	if hc := w.opts.HandoverCommand; len(hc) > 0 && canPrestart {
		if slices.Equal(rc, w.opts.RemoteCommand) {
			return w.spawnHandover(hc, env(stateDir), id, stateDir, "", guard)
		}
		// Another build (a pin) may not read its session from standard
		// input: this build's remote reads it and executes that build
		// with it, so the variables never pass through bwrap either.
		command := append(slices.Clip(hc), append([]string{"--then-exec", "--"}, rc...)...)
		return w.spawnHandover(command, env(stateDir), id, stateDir, rc[0], guard)
	}
	return w.spawn(rc, env(stateDir), id, stateDir, nil, "", guard)
}

// spawnHandover starts command, a remote that reads the session's spawn
// variables from its standard input, with the rest of env as its
// environment, and hands it those variables as a pre-started remote gets
// them (prestart.go): over a socket, never in its arguments or initial
// environment, nor in bwrap's. then, when not "", is the executable of the
// build command executes once it has them, which the sandbox must show.
func (w *worker) spawnHandover(command, env []string, id, stateDir, then string, guard *netguard.Guard) (*remoteProc, error) {
	var handover strings.Builder
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if !slices.Contains(sessionVars, k) {
			continue
		}
		if strings.ContainsAny(v, "\n\x00") {
			return nil, fmt.Errorf("the spawn variable %s holds a line break or a NUL byte", k)
		}
		handover.WriteString(kv + "\n")
	}
	r, sock, err := sessionSocket()
	if err != nil {
		return nil, fmt.Errorf("create the session socket: %w", err)
	}
	p, err := w.spawn(command, baseEnv(env), id, stateDir, r, then, guard)
	r.Close()
	if err != nil {
		sock.Close()
		return nil, err
	}
	// The socket's buffer holds the few lines until the remote reads them,
	// after its "ready", which nobody waits for here.
	_, err = sock.WriteString(handover.String())
	if cerr := sock.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = kill(p.cmd)
		<-p.dead
		p.logFile.Close()
		return nil, fmt.Errorf("hand the session to its remote: %w", err)
	}
	return p, nil
}

// spawn starts the remote command rc with environment env (plus the
// detected capabilities) in the workspace, isolated, with stateDir (which
// exists) as its state dir and its output in stateDir's remote.log. A
// non-nil stdin becomes its standard input; then, when not "", is another
// executable rc runs, which the sandbox shows read-only too. A non-nil
// guard starts it in the session's network namespace.
func (w *worker) spawn(rc, env []string, id, stateDir string, stdin *os.File, then string, guard *netguard.Guard) (*remoteProc, error) {
	if err := os.MkdirAll(filepath.Join(w.opts.Dir, "repos"), 0o755); err != nil {
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	logFile, err := openRemoteLog(filepath.Join(stateDir, remoteLogName))
	if err != nil {
		return nil, fmt.Errorf("open remote log: %w", err)
	}
	mu := new(sync.Mutex)
	newWriter := func(stream string) *lineWriter {
		return &lineWriter{mu: mu, file: logFile, out: w.opts.Stdout, log: w.log, session: id, stream: stream}
	}
	cmd := exec.Command(rc[0], rc[1:]...)
	cmd.Env = desktopEnv(env, w.desktop)
	if w.caps != "" {
		cmd.Env = append(cmd.Env, machine.EnvCapabilities+"="+w.caps)
	}
	cmd.Dir = w.opts.Dir
	if stdin != nil {
		cmd.Stdin = stdin
	}
	p := &remoteProc{cmd: cmd, stdout: newWriter("stdout"), stderr: newWriter("stderr"), logFile: logFile,
		exited: make(chan error, 1), dead: make(chan struct{}), stateDir: stateDir}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	// Children that keep the output pipes open must not hold up Wait.
	cmd.WaitDelay = killDelay
	isolate(cmd)
	resolv := ""
	if guard != nil {
		resolv = w.resolvConf(id)
	}
	started, err := w.iso.wrap(cmd, stateDir, then, resolv)
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("isolate the remote (%s): %w", w.iso.name(), err)
	}
	if guard != nil {
		err = guard.Start(cmd)
	} else {
		err = cmd.Start()
	}
	started()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", rc[0], err)
	}
	p.startedAt = time.Now()
	go func() { // received by wait or stop, always
		err := cmd.Wait()
		close(p.dead)
		p.exited <- err
	}()
	return p, nil
}

// wait returns the remote's exit error once it exits. When ctx ends (the
// claim is lost) or restricting is closed (the session needs a network
// namespace it does not run in) it stops the remote at once; when stopping
// is closed it gives the remote the grace period first.
func (w *worker) wait(ctx context.Context, p *remoteProc, stopping, restricting <-chan struct{}, log *slog.Logger) error {
	select {
	case err := <-p.exited:
		return err
	case <-restricting:
		log.Warn("the session's network policy was enabled while it ran without one: stopping its remote so that it restarts behind the policy")
		p.restricted = true
		return w.stop(p, log)
	case <-ctx.Done():
	case <-stopping:
		log.Info("shutting down: waiting for the session's remote to finish", "grace_period", w.opts.GracePeriod)
		grace := time.NewTimer(w.opts.GracePeriod)
		defer grace.Stop()
		select {
		case err := <-p.exited:
			return err
		case <-ctx.Done():
		case <-grace.C:
			log.Warn("grace period over: stopping the remote")
			return w.stop(p, log)
		}
	}
	log.Warn("the claim was lost: stopping the remote")
	return w.stop(p, log)
}

// stop asks the remote to exit, kills it after killDelay, and returns its
// exit error.
func (w *worker) stop(p *remoteProc, log *slog.Logger) error {
	p.stopped = true
	if err := w.iso.terminate(p.cmd); err != nil {
		log.Debug("signal remote", "err", err)
	}
	t := time.NewTimer(killDelay)
	defer t.Stop()
	select {
	case err := <-p.exited:
		return err
	case <-t.C:
	}
	log.Warn("remote did not exit: killing it")
	if err := kill(p.cmd); err != nil {
		log.Debug("kill remote", "err", err)
	}
	return <-p.exited
}
