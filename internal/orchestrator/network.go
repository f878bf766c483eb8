package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/internal/netguard"
)

// A restricted session (spec.network_policy enabled) gets its machine only
// from a backend that starts it behind the session's enforcement point
// (NetworkEnforcer: bwrap, and docker with a local rootful daemon, both as
// root on Linux). Every other backend refuses
// it: the consumer never claims it, and one claimed anyway is given back
// with the sentence why. Its machine is never served open.

// networkEnforcement is the consumer's NetworkEnforcement.
func (o *orchestrator) networkEnforcement() error {
	ne, ok := o.opts.Backend.(NetworkEnforcer)
	if !ok {
		return fmt.Errorf("the %s backend cannot enforce a network policy; use --backend bwrap or docker (as root on Linux)", o.opts.Backend.Name())
	}
	return ne.EnforcesNetwork()
}

// startGuard starts the enforcement point of s's machine and sets it on
// spec. When it cannot, it returns nil and the Outcome that gives the
// claim back with the reason.
func (o *orchestrator) startGuard(ctx context.Context, s *fleet.Session, spec *Spec, log *slog.Logger) (*netguard.Guard, fleet.Outcome) {
	refuse := func(err error) fleet.Outcome {
		why := fmt.Sprintf("Refused to run a session with a network policy on machine %s: %v.", spec.Name, err)
		o.report(context.WithoutCancel(ctx), s.ID, api.MachineStepFailed, why, nil)
		return fleet.NotStarted(errors.New(why)).WithReason(why).Postponed()
	}
	if err := o.networkEnforcement(); err != nil {
		return nil, refuse(err)
	}
	resolv := filepath.Join(spec.Workspace, "resolv.conf") // outside every bind
	var nsPath string
	if nn, ok := o.opts.Backend.(NetworkNamespacer); ok {
		var err error
		if nsPath, err = nn.NetworkNamespace(ctx, *spec); err != nil {
			log.Error("cannot make the machine's network namespace", "err", err)
			o.m.fail("provision")
			o.teardownUnstarted(ctx, *spec, log)
			return nil, refuse(fmt.Errorf("the machine's network namespace could not be made: %w", err))
		}
	}
	g, err := netguard.Start(ctx, netguard.Options{
		Session: s.ID, Policy: s.Claim.Spec.NetworkPolicy, GatewayURL: s.Claim.Status.GatewayURL, ResolvConf: resolv, Log: log,
		Namespace: nsPath,
		Report: func(ctx context.Context, batch []api.NetworkDecision) error {
			// Decisions alone: the server takes machine and backend only
			// with a step.
			_, err := o.c.Queue.MachineEvent(ctx, s.ID, api.MachineEventRequest{AcceptorID: o.id.AcceptorID, Network: batch})
			return err
		},
	})
	if err != nil {
		log.Error("cannot enforce the session's network policy", "err", err)
		o.m.fail("provision")
		if nsPath != "" {
			o.teardownUnstarted(ctx, *spec, log)
		}
		return nil, refuse(fmt.Errorf("the network enforcement could not start: %w", err))
	}
	spec.Network, spec.ResolvConf = g, resolv
	return g, fleet.Outcome{}
}

// dropRestricted tears down the machine a previous run left for a
// restricted session: its enforcement point ended with that run (the
// sandbox kept its namespace but lost its only way out), so the session
// goes back to the queue for a fresh machine.
func (o *orchestrator) dropRestricted(ctx context.Context, s *fleet.Session, spec Spec, log *slog.Logger) fleet.Outcome {
	log.Info("removing the leftover machine of a restricted session: its network enforcement ended with the previous run")
	if err := o.opts.Backend.Teardown(ctx, spec); err != nil {
		log.Warn("teardown of leftover machine failed", "err", err)
		o.m.fail("teardown")
	}
	why := fmt.Sprintf("the orchestrator restarted and removed machine %s: the session's network enforcement ended with the previous run", spec.Name)
	o.report(ctx, s.ID, api.MachineStepTeardown, why, nil)
	return fleet.NotStarted(errors.New(why))
}

// teardownUnstarted removes what the backend made for a machine that
// never started (its network namespace's holder).
func (o *orchestrator) teardownUnstarted(ctx context.Context, spec Spec, log *slog.Logger) {
	if err := o.opts.Backend.Teardown(context.WithoutCancel(ctx), spec); err != nil {
		log.Warn("teardown of the unstarted machine failed", "err", err)
		o.m.fail("teardown")
	}
}
