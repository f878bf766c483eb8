package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/fleet"
)

// Run is the orchestrator's fleet.Runner: it provisions the session's
// machine (or, for a claim adopted after a restart, takes over the one
// still running), supervises it and tears it down.
func (o *orchestrator) Run(ctx context.Context, s *fleet.Session) fleet.Outcome {
	id := s.ID
	log := o.log.With("session", id, "machine", MachineName(id))
	bg := context.WithoutCancel(ctx)
	if s.Adopted {
		spec := o.spec(id, o.opts.RemoteCommand, s.Env)
		spec.Pin = fleet.EntryPin(&s.Claim)
		spec.Requirements = s.Claim.Spec.Requirements
		if fleet.Restricted(&s.Claim) {
			return o.dropRestricted(bg, s, spec, log)
		}
		m, ok := o.opts.Backend.Adopt(ctx, spec)
		if !ok {
			log.Info("removing leftover machine")
			if err := o.opts.Backend.Teardown(bg, spec); err != nil {
				log.Warn("teardown of leftover machine failed", "err", err)
				o.m.fail("teardown")
			}
			why := fmt.Sprintf("the orchestrator restarted and removed machine %s, whose remote had stopped", spec.Name)
			o.report(bg, id, api.MachineStepTeardown, why, nil)
			return fleet.NotStarted(errors.New(why))
		}
		log.Info("adopted leftover machine")
		o.report(ctx, id, api.MachineStepStart, fmt.Sprintf("The orchestrator restarted and adopted machine %s, still running.", spec.Name), nil)
		return o.supervise(ctx, s, spec, m, log)
	}

	log.Info("claimed session; provisioning", "kind", s.Claim.Spec.Kind, "backend", o.opts.Backend.Name())
	sctx, cancelSetup := s.Setup(ctx)
	defer cancelSetup()
	remote, err := s.Remote(sctx)
	spec := o.spec(id, remote, s.Env)
	spec.Pin = fleet.EntryPin(&s.Claim)
	spec.Requirements = s.Claim.Spec.Requirements
	t0 := time.Now()
	var m Machine
	if err == nil && fleet.Restricted(&s.Claim) {
		g, out := o.startGuard(sctx, s, &spec, log)
		if g == nil {
			return out
		}
		defer g.Close()
	}
	if err == nil {
		o.report(ctx, id, api.MachineStepCreate, fmt.Sprintf("Creating machine %s (%s backend).", spec.Name, o.opts.Backend.Name()), nil)
		m, err = o.opts.Backend.Provision(sctx, spec)
	}
	if err != nil {
		log.Warn("provisioning failed; releasing the claim", "err", err)
		o.m.fail("provision")
		why := fmt.Sprintf("provisioning machine %s (%s backend) failed: %v", spec.Name, o.opts.Backend.Name(), err)
		o.report(bg, id, api.MachineStepFailed, why, nil)
		if terr := o.opts.Backend.Teardown(bg, spec); terr != nil {
			log.Warn("teardown after failed provisioning", "err", terr)
		}
		return fleet.NotStarted(errors.New(why)).Postponed()
	}
	took := time.Since(t0)
	o.m.ProvisionSeconds.Observe(took.Seconds())
	log.Info("machine provisioned; remote started", "took", took.Round(time.Millisecond))
	o.report(ctx, id, api.MachineStepStart, fmt.Sprintf("Machine %s is up and its remote started (%s).", spec.Name, took.Round(time.Millisecond)), nil)
	if spec.Network != nil {
		spec.Network.Follow(s.Updated(), s.Entry)
	}
	return o.supervise(ctx, s, spec, m, log)
}

// supervise waits until the remote exits, the session ends, the claim is
// lost (ctx ends) or the orchestrator shuts down; then it tears the machine
// down. The consumer confirms the session's end and releases the claim.
func (o *orchestrator) supervise(ctx context.Context, s *fleet.Session, spec Spec, m Machine, log *slog.Logger) fleet.Outcome {
	o.m.MachinesActive.Inc()
	defer o.m.MachinesActive.Dec()
	bg := context.WithoutCancel(ctx)
	ending := fleet.Stopped
	reason := ""
	var restricting <-chan struct{}
	if spec.Network == nil {
		// An open session whose policy is enabled while its machine runs
		// has no enforcement point: the machine goes, and it restarts
		// behind one.
		wctx, stopWatching := context.WithCancel(ctx)
		defer stopWatching()
		restricting = s.Restricting(wctx)
	}
	select {
	case <-restricting:
		reason = "the session's network policy was enabled while its machine ran without one; the machine was removed so that the session restarts behind the policy"
	case <-m.Done():
		reason, ending = "remote exited: "+m.Exit(), fleet.Exited
		code := exitCode(m)
		o.report(bg, s.ID, api.MachineStepExit, fmt.Sprintf("The remote in machine %s exited: %s.", spec.Name, m.Exit()), code)
		if code != nil && *code == api.RemoteExitRejected {
			// The gateway refused the remote: the claim is someone else's now.
			ending = fleet.HandedOff
		}
	case <-s.Ended():
		reason = "session ended"
	case <-ctx.Done():
		reason = "claim lost"
	case <-s.Stopping():
		reason = "orchestrator shutting down"
	}
	out := ending(errors.New(reason))
	log.Info("tearing the machine down", "reason", reason)
	if err := o.opts.Backend.Teardown(bg, spec); err != nil {
		log.Warn("teardown failed", "err", err)
		o.m.fail("teardown")
	}
	log.Info("machine torn down")
	if ctx.Err() == nil && out.Ending != fleet.EndHandedOff {
		o.report(bg, s.ID, api.MachineStepTeardown, fmt.Sprintf("Machine %s removed (%s).", spec.Name, reason), nil)
	}
	return out
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
	_, err := o.c.Queue.MachineEvent(ctx, id, api.MachineEventRequest{AcceptorID: o.id.AcceptorID, Step: step,
		Machine: MachineName(id), Backend: o.opts.Backend.Name(), Message: msg, ExitCode: code})
	if err != nil {
		o.log.Debug("cannot report a machine step", "session", id, "step", step, "err", err)
	}
}
