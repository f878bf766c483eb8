package worker

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

// A restricted session (its queue entry's spec.network_policy enabled)
// runs its remote, and so all its code, in a network namespace of its
// own whose only way out is the egress engine the worker serves outside
// it (internal/netguard, internal/egress). The worker enforces that only
// where session code cannot undo it: in a bwrap sandbox (no capabilities,
// its own resolv.conf bound over the host's) or as another Unix user
// (which cannot leave the namespace; the host's resolv.conf applies, and
// a loopback nameserver in it is answered inside the namespace). With
// isolation none, session code runs as the worker's user and could read
// its token or, as root, leave the namespace: such a worker refuses
// restricted sessions, as one that cannot make namespaces does.

// errNoIsolation is why a worker without isolation enforces no policy.
var errNoIsolation = errors.New("this worker runs sessions without isolation (--isolation none), where session code could leave the network namespace; start it with --isolation bwrap, or as root with --isolation user --run-as USER")

// checkNetwork says whether this worker can enforce network policies
// (nil), or why not, in a sentence.
func (w *worker) checkNetwork(ctx context.Context) error {
	if w.iso.name() == string(IsolationNone) {
		return errNoIsolation
	}
	if err := netguard.Check(ctx); err != nil {
		return fmt.Errorf("this machine cannot make a network namespace for a session (%w)", err)
	}
	return nil
}

// networkEnforcement is the consumer's NetworkEnforcement: nil while the
// worker enforces network policies, else why not.
func (w *worker) networkEnforcement() error {
	if err := w.netBroken.Load(); err != nil {
		return *err
	}
	return w.netErr
}

// resolvConf is the host path of a restricted session's resolv.conf in
// the worker's data dir, out of session code's reach; bwrap binds it over
// the sandbox's /etc/resolv.conf.
func (w *worker) resolvConf(id string) string {
	return filepath.Join(w.opts.DataDir, "net", id, "resolv.conf")
}

// startGuard starts the enforcement point of claim's restricted session.
// When it cannot, it returns nil and the Outcome that gives the claim
// back with the reason; the worker then serves no restricted session
// until it restarts, so the session goes to a worker that can.
func (w *worker) startGuard(ctx context.Context, s *fleet.Session, claim *api.QueueEntry, log *slog.Logger) (*netguard.Guard, fleet.Outcome) {
	if err := w.networkEnforcement(); err != nil {
		return nil, refuseNetwork(err)
	}
	opts := netguard.Options{
		Session: s.ID, Policy: claim.Spec.NetworkPolicy, GatewayURL: claim.Status.GatewayURL, Log: log,
		Report: func(ctx context.Context, batch []api.NetworkDecision) error {
			_, err := w.c.Queue.MachineEvent(ctx, s.ID, api.MachineEventRequest{AcceptorID: w.id.AcceptorID, Network: batch})
			return err
		},
	}
	if w.iso.name() == string(IsolationBwrap) {
		opts.ResolvConf = w.resolvConf(s.ID)
	} else {
		opts.RelayNameservers = true
	}
	g, err := netguard.Start(ctx, opts)
	if err != nil {
		err = fmt.Errorf("the session's network enforcement could not start: %w", err)
		w.netBroken.Store(&err)
		log.Error("cannot enforce the session's network policy; serving no restricted session until restarted", "err", err)
		return nil, refuseNetwork(err)
	}
	return g, fleet.Outcome{}
}

// refuseNetwork gives a restricted session's claim back with the sentence
// why, leaving it to other workers.
func refuseNetwork(err error) fleet.Outcome {
	why := "Refused to run a session with a network policy on this worker: " + err.Error() + "."
	return fleet.NotStarted(errors.New(why)).WithReason(why).Postponed()
}
