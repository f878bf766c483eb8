package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/worker"
)

// supervise renews the claim and waits until the remote exits, the session
// ends, the claim is lost or ctx ends; then it tears the machine down and
// releases the claim.
func (o *orchestrator) supervise(ctx context.Context, s *session, claim *api.QueueEntry, spec Spec, m Machine, log *slog.Logger) {
	o.m.MachinesActive.Inc()
	defer o.m.MachinesActive.Dec()
	bg := context.WithoutCancel(ctx)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	lost := make(chan struct{})
	go o.renew(rctx, s, claim, lost, log)
	go o.check(rctx, s)

	reason, exited := "", false
	select {
	case <-m.Done():
		reason, exited = "remote exited: "+m.Exit(), true
		o.report(bg, s.id, api.MachineStepExit, fmt.Sprintf("The remote in machine %s exited: %s.", spec.Name, m.Exit()), exitCode(m))
	case <-s.ended:
		reason = "session ended"
	case <-lost:
		reason = "claim lost"
		o.m.fail("claim_lost")
	case <-ctx.Done():
		reason = "orchestrator shutting down"
	}
	stop()
	log.Info("tearing the machine down", "reason", reason)
	if err := o.opts.Backend.Teardown(bg, spec); err != nil {
		log.Warn("teardown failed", "err", err)
		o.m.fail("teardown")
	}
	log.Info("machine torn down")
	select {
	case <-lost:
		return // not ours to release
	default:
	}
	o.report(bg, s.id, api.MachineStepTeardown, fmt.Sprintf("Machine %s removed (%s).", spec.Name, reason), nil)
	status := "not read"
	if exited { // the queue's status can lag a remote's exit
		status = o.confirmEnd(bg, s)
	}
	over := status == api.QueueSessionTerminated || status == "gone"
	select {
	case <-s.ended:
		over = true
	default:
	}
	if over {
		o.release(bg, s.id)
	} else {
		o.releaseWhy(bg, s.id, reason)
	}
	log.Info("session done", "session_status", status, "reason", reason)
}

// renew keeps the claim (worker.KeepClaim), closing lost when the server
// says it is no longer ours and ending the session when a renewal shows it
// terminated.
func (o *orchestrator) renew(ctx context.Context, s *session, claim *api.QueueEntry, lost chan<- struct{}, log *slog.Logger) {
	kept := worker.KeepClaim(ctx, o.c, o.acceptor, claim, log, func(e *api.QueueEntry, err error) {
		switch {
		case err != nil:
			o.m.fail("renew")
		case e.Status.SessionStatus == api.QueueSessionTerminated:
			s.end()
		}
	})
	if !kept {
		close(lost)
	}
}

// check reads the session's entry now and then, in case the watch missed
// its end.
func (o *orchestrator) check(ctx context.Context, s *session) {
	for worker.Sleep(ctx, checkEvery) == nil {
		e, err := o.c.Queue.Get(ctx, s.id)
		if client.IsNotFound(err) || err == nil && e.Status.SessionStatus == api.QueueSessionTerminated {
			s.end()
			return
		}
	}
}

// confirmEnd waits up to confirmWindow for the entry to show the session
// suspended, terminated or gone (its status can lag a remote's exit).
func (o *orchestrator) confirmEnd(ctx context.Context, s *session) string {
	until := time.Now().Add(confirmWindow)
	status := "unknown"
	for {
		e, err := o.c.Queue.Get(ctx, s.id)
		switch {
		case client.IsNotFound(err):
			return "gone"
		case err == nil:
			status = e.Status.SessionStatus
			if status == api.QueueSessionTerminated || status == api.QueueSessionSuspended {
				return status
			}
		}
		select {
		case <-s.ended:
			return status
		default:
		}
		if time.Now().After(until) || worker.Sleep(ctx, 300*time.Millisecond) != nil {
			return status
		}
	}
}

// release gives a claim back, with a context of its own so that shutdown
// never drops it.
func (o *orchestrator) release(ctx context.Context, id string) { o.releaseWhy(ctx, id, "") }

// releaseWhy is release saying why, on the session's status and transcript.
func (o *orchestrator) releaseWhy(ctx context.Context, id, why string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if len(why) > 1000 {
		why = why[:997] + "..."
	}
	_, err := o.c.Queue.ReleaseWithReason(ctx, id, o.acceptor, why)
	switch {
	case err == nil:
		o.log.Info("claim released", "session", id)
	case client.IsConflict(err) || client.IsNotFound(err):
		o.log.Debug("claim already gone", "session", id, "err", err)
	default:
		o.log.Warn("cannot release the claim; it lapses at its deadline", "session", id, "err", err)
		o.m.fail("release")
	}
}

// ExitCoder is implemented by machines that know their remote's exit code.
type ExitCoder interface {
	// ExitCode reports the remote's exit code, once Done is closed; false
	// when it is not known.
	ExitCode() (int, bool)
}

func exitCode(m Machine) *int {
	if ec, ok := m.(ExitCoder); ok {
		if c, ok := ec.ExitCode(); ok {
			return &c
		}
	}
	return nil
}

// report puts a provisioning step onto the session's transcript. It is
// best effort: a failure is logged, never fatal.
func (o *orchestrator) report(ctx context.Context, id, step, msg string, code *int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if len(msg) > 2000 {
		msg = msg[:1997] + "..."
	}
	_, err := o.c.Queue.MachineEvent(ctx, id, api.MachineEventRequest{AcceptorID: o.acceptor, Step: step,
		Machine: MachineName(id), Backend: o.opts.Backend.Name(), Message: msg, ExitCode: code})
	if err != nil {
		o.log.Debug("cannot report a machine step", "session", id, "step", step, "err", err)
	}
}
