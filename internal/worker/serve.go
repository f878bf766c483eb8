package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/machine"
)

const (
	// killDelay is how long a remote asked to stop has before it is killed.
	killDelay = 5 * time.Second
	// confirmWindow is how long the queue's session status may lag a
	// remote's exit; confirmEvery is how often it is read meanwhile.
	confirmWindow = 5 * time.Second
	confirmEvery  = 500 * time.Millisecond
	// releaseTimeout bounds the release of a claim, which runs even after
	// the worker's context ended.
	releaseTimeout = 15 * time.Second
	// minRenewWait and unknownDeadlineWait bound the wait between renewals.
	minRenewWait        = time.Second
	unknownDeadlineWait = time.Minute
)

// errStart marks a remote that could not be started at all; the next
// session would fail the same way, so the worker stops.
var errStart = errors.New("cannot start the remote")

// remoteProc is a running remote and the writers of its output.
type remoteProc struct {
	cmd       *exec.Cmd
	stdout    *lineWriter
	stderr    *lineWriter
	logFile   *os.File
	exited    chan error // receives cmd.Wait's result once
	stateDir  string
	startedAt time.Time
	claimLost bool
	// stopped is set when the worker stopped the remote; the session is then
	// not expected to end, so its status is read once, not waited for.
	stopped bool
}

// serve runs a remote for a claimed session until it exits, renewing the
// claim meanwhile, then confirms the session's end and releases the claim.
func (w *worker) serve(ctx context.Context, claim *api.QueueEntry) error {
	id := claim.Metadata.SessionID
	log := w.log.With("session", id)
	log.Info("claimed session", "kind", claim.Spec.Kind)
	w.presence.serving(id)
	defer w.presence.serving("")
	// Renewals during the grace period and the final release must outlive ctx.
	bg := context.WithoutCancel(ctx)

	if err := w.ws.before(ctx, id); err != nil {
		w.release(bg, id, log)
		return err
	}
	rc, err := w.remoteCommand(ctx, claim)
	var p *remoteProc
	if err == nil {
		p, err = w.start(claim, rc)
	}
	if err != nil {
		w.releaseBecause(bg, id, fmt.Sprintf("Cannot start the remote: %v.", err), log)
		return fmt.Errorf("%w for session %s: %w", errStart, id, err)
	}
	defer p.logFile.Close()
	log.Info("remote started", "pid", p.cmd.Process.Pid, "state_dir", p.stateDir)

	renewCtx, stopRenew := context.WithCancel(bg)
	lost := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.renew(renewCtx, claim, lost, log)
	}()
	exitErr := w.wait(ctx, p, lost, log)
	stopRenew()
	wg.Wait()
	p.stdout.flush()
	p.stderr.flush()

	if p.claimLost {
		log.Warn("session abandoned: the claim was lost", "exit", exitErr)
		return fmt.Errorf("lost the claim on session %s", id)
	}
	if !p.stopped && remoteRejected(exitErr) {
		// The claim is someone else's now: another process serving the
		// session under this acceptor id, or a new holder. Releasing it
		// would take it from them.
		log.Error("the gateway refused this worker's remote: another remote serves the session under the same claim, "+
			"or the claim ended or moved; leaving the claim alone (not releasing it)", "remote_exit", ExitString(exitErr))
		return fmt.Errorf("the gateway refused the remote for session %s; its claim was left to whoever serves it", id)
	}
	window := confirmWindow
	if p.stopped {
		window = 0
	}
	status := w.confirmEnd(bg, id, window)
	w.release(bg, id, log)
	ended := status == api.QueueSessionTerminated || status == api.QueueSessionSuspended || status == "gone"
	log.Info("session done", "session_status", status, "remote_exit", ExitString(exitErr),
		"duration", time.Since(p.startedAt).Round(time.Second))
	if !ended {
		if exitErr == nil {
			exitErr = errors.New("exited cleanly")
		}
		return fmt.Errorf("remote for session %s stopped before the session ended (%s, session status %q); the session goes back to the queue",
			id, ExitString(exitErr), status)
	}
	return nil
}

// start starts the remote command rc under the spawn contract.
func (w *worker) start(claim *api.QueueEntry, rc []string) (*remoteProc, error) {
	id := claim.Metadata.SessionID
	if claim.Status.GatewayURL == "" && w.opts.GatewayURL != "" {
		c := *claim
		c.Status.GatewayURL = w.opts.GatewayURL
		claim = &c
	}
	if claim.Status.GatewayURL == "" || claim.Status.ConnectToken == "" {
		return nil, errors.New("the claim answer has no gateway_url or connect_token (pass --gateway-url when the server gives none)")
	}
	if !filepath.IsLocal(id) || strings.ContainsAny(id, `/\`) {
		return nil, fmt.Errorf("session id %q cannot name a state directory", id)
	}
	stateDir := filepath.Join(w.opts.DataDir, "sessions", id)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
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
	cmd.Env = RemoteEnv(claim, stateDir, LookupWithCAFile(os.LookupEnv, w.opts.CAFile))
	if w.caps != "" {
		cmd.Env = append(cmd.Env, machine.EnvCapabilities+"="+w.caps)
	}
	cmd.Dir = w.opts.Dir
	p := &remoteProc{cmd: cmd, stdout: newWriter("stdout"), stderr: newWriter("stderr"), logFile: logFile,
		exited: make(chan error, 1), stateDir: stateDir}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	// Children that keep the output pipes open must not hold up Wait.
	cmd.WaitDelay = killDelay
	isolate(cmd)
	started, err := w.iso.wrap(cmd, stateDir)
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("isolate the remote (%s): %w", w.iso.name(), err)
	}
	err = cmd.Start()
	started()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", rc[0], err)
	}
	p.startedAt = time.Now()
	go func() { p.exited <- cmd.Wait() }() // received by wait or stop, always
	return p, nil
}

// wait returns the remote's exit error once it exits. When the claim is
// lost it stops the remote at once; when ctx ends it gives the remote the
// grace period first.
func (w *worker) wait(ctx context.Context, p *remoteProc, lost <-chan struct{}, log *slog.Logger) error {
	select {
	case err := <-p.exited:
		return err
	case <-lost:
	case <-ctx.Done():
		log.Info("shutting down: waiting for the session's remote to finish", "grace_period", w.opts.GracePeriod)
		grace := time.NewTimer(w.opts.GracePeriod)
		defer grace.Stop()
		select {
		case err := <-p.exited:
			return err
		case <-lost:
		case <-grace.C:
			log.Warn("grace period over: stopping the remote")
			return w.stop(p, log)
		}
	}
	p.claimLost = true
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

// renew keeps the worker's claim until ctx ends; see KeepClaim.
func (w *worker) renew(ctx context.Context, claim *api.QueueEntry, lost chan<- struct{}, log *slog.Logger) {
	if !KeepClaim(ctx, w.c, w.acceptor, claim, log, nil) {
		close(lost)
	}
}

// KeepClaim re-claims a session at about a third of the time left before
// its claim deadline, until ctx ends (true) or the server says the claim
// is no longer the acceptor's (false). onRenew, when set, sees each
// renewal's answer; failed renewals are retried at the same cadence.
// Workers and orchestrators keep their claims with it.
func KeepClaim(ctx context.Context, c *client.Client, acceptor string, claim *api.QueueEntry, log *slog.Logger, onRenew func(*api.QueueEntry, error)) bool {
	id := claim.Metadata.SessionID
	deadline := claimDeadline(claim)
	for {
		if err := sleep(ctx, renewWait(deadline, time.Now())); err != nil {
			return true
		}
		e, err := c.Queue.Claim(ctx, id, acceptor)
		switch {
		case ctx.Err() != nil:
			return true
		case client.IsConflict(err) || client.IsNotFound(err):
			log.Warn("claim renewal refused", "err", err)
			return false
		case err != nil:
			log.Warn("cannot renew the claim; retrying", "err", err, "claim_deadline", deadline.Format(time.TimeOnly))
			if onRenew != nil {
				onRenew(nil, err)
			}
			continue
		}
		deadline = claimDeadline(e)
		log.Debug("claim renewed", "claim_deadline", deadline.Format(time.TimeOnly), "session_status", e.Status.SessionStatus)
		if onRenew != nil {
			onRenew(e, nil)
		}
	}
}

// renewWait is the wait before the next renewal of a claim that lapses at
// deadline (zero: unknown).
func renewWait(deadline, now time.Time) time.Duration {
	if deadline.IsZero() {
		return unknownDeadlineWait
	}
	return max(deadline.Sub(now)/3, minRenewWait)
}

func claimDeadline(e *api.QueueEntry) time.Time {
	if e == nil || e.Status.ClaimDeadline == nil {
		return time.Time{}
	}
	return time.Unix(*e.Status.ClaimDeadline, 0)
}

// confirmEnd reads the queue entry until it shows the session suspended or
// terminated, or is gone ("gone"), for up to window, because the status
// can lag the remote's exit. It returns the last status read.
func (w *worker) confirmEnd(ctx context.Context, id string, window time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, window+releaseTimeout)
	defer cancel()
	until := time.Now().Add(window)
	status := "unknown"
	for {
		e, err := w.c.Queue.Get(ctx, id)
		switch {
		case client.IsNotFound(err):
			return "gone"
		case err == nil:
			status = e.Status.SessionStatus
			if status == api.QueueSessionTerminated || status == api.QueueSessionSuspended {
				return status
			}
		}
		if time.Now().After(until) || sleep(ctx, confirmEvery) != nil {
			return status
		}
	}
}

// release gives the claim back, ignoring answers that mean it is no longer
// held. It uses its own timeout so that shutdown never drops it.
func (w *worker) release(ctx context.Context, id string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	_, err := w.c.Queue.Release(ctx, id, w.acceptor)
	switch {
	case err == nil:
		log.Info("claim released")
	case client.IsConflict(err) || client.IsNotFound(err):
		log.Debug("claim already gone", "err", err)
	default:
		log.Warn("cannot release the claim; it lapses at its deadline", "err", err)
	}
}

// remoteRejected reports whether a remote exited because the gateway kept
// refusing it (api.RemoteExitRejected).
func remoteRejected(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == api.RemoteExitRejected
}

// ExitString describes how a process ended ("exit 0", "exit status 3",
// "signal: killed").
func ExitString(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit 0"
	case errors.As(err, &ee):
		return ee.ProcessState.String()
	}
	return err.Error()
}
