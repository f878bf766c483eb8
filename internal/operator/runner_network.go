package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// defaultPolicyGrace is how old a NetworkPolicy without a pod must be
// before it is collected: a pod just made may not be in the cache yet.
const defaultPolicyGrace = 10 * time.Second

// hasHostname reports whether p has a hostname rule.
func hasHostname(p *api.NetworkPolicy) bool {
	return p != nil && slices.ContainsFunc(p.Allow, func(r api.NetworkPolicyRule) bool { return r.Hostname != "" })
}

// policyRefusal is why the pool cannot enforce (any more) the session's
// network policy: its pod must not run.
type policyRefusal struct{ err error }

func (p policyRefusal) Error() string { return p.err.Error() }
func (p policyRefusal) Unwrap() error { return p.err }

// ensurePolicy writes the session's NetworkPolicy for its newest entry
// before any pod of it runs, and updates it when the policy changed. A
// session that is unrestricted now has none: one left from a restricted
// policy is deleted (the session may reach anything). It fails with a
// policyRefusal when the pool cannot enforce the policy.
func (sr *sessionRun) ensurePolicy(ctx context.Context) error {
	pool := sr.r.cfg.Pool()
	e := sr.s.Entry()
	want, err := RenderNetworkPolicy(pool, &e, sr.r.render())
	if err != nil {
		return policyRefusal{err}
	}
	if want != nil && sr.proxyURL == "" && hasHostname(e.Spec.NetworkPolicy) {
		// The pod was made without the proxy (the session, or the pool's
		// proxy, came later): its names would all fail. A new pod gets it.
		return policyRefusal{errors.New("its network policy has hostname rules now, and its pod was made without the egress proxy's settings; " +
			"it is served again with them")}
	}
	if want == nil && !sr.mayHavePolicy {
		// Unrestricted, and no policy of this run's or before it: nothing
		// to read (a pool without network settings asks nothing about
		// NetworkPolicies, nor needs the RBAC).
		sr.policyGen = pool.Generation
		return nil
	}
	if err := sr.writePolicy(ctx, pool, want); err != nil {
		if want == nil {
			// A leftover policy can only restrict the session more:
			// it is collected once the pod is gone.
			sr.log.Warn("cannot remove the NetworkPolicy of a session that is unrestricted now", "err", err)
			return nil
		}
		return err
	}
	sr.mayHavePolicy = want != nil
	sr.policyGen = pool.Generation
	return nil
}

// writePolicy makes the session's NetworkPolicy want (nil: none).
func (sr *sessionRun) writePolicy(ctx context.Context, pool *v1alpha1.OutpostPool, want *networkingv1.NetworkPolicy) error {
	name := NetworkPolicyName(sr.id)
	var cur networkingv1.NetworkPolicy
	err := sr.r.cfg.Kube.Get(ctx, sr.r.key(name), &cur)
	switch {
	case apierrors.IsNotFound(err):
		if want == nil {
			return nil
		}
		sr.mayHavePolicy = true // a create that fails may still have been made
		if err := sr.r.cfg.Kube.Create(ctx, want, client.FieldOwner(ManagedBy)); err != nil {
			return fmt.Errorf("create network policy %s: %w", name, err)
		}
		sr.log.Info("network policy created", "network_policy", name, "egress_rules", len(want.Spec.Egress))
		sr.r.report(ctx, sr.id, api.MachineStepCreate, fmt.Sprintf("Created NetworkPolicy %s: egress only to DNS, the control plane and the policy's %d address rules.",
			name, len(want.Spec.Egress)-2), nil)
		return nil
	case err != nil:
		return fmt.Errorf("read network policy %s: %w", name, err)
	case !OwnedBy(&cur, pool):
		return notOurs("NetworkPolicy", name, pool)
	case want == nil:
		uid := cur.UID
		if err := ignoreGone(sr.r.cfg.Kube.Delete(ctx, &cur, client.Preconditions{UID: &uid})); err != nil {
			return fmt.Errorf("delete network policy %s: %w", name, err)
		}
		sr.log.Info("network policy deleted: the session is unrestricted now", "network_policy", name)
		return nil
	case cur.DeletionTimestamp != nil:
		return fmt.Errorf("network policy %s is being deleted", name)
	case equality.Semantic.DeepEqual(cur.Spec, want.Spec) && equality.Semantic.DeepEqual(cur.Labels, want.Labels) &&
		equality.Semantic.DeepEqual(cur.OwnerReferences, want.OwnerReferences):
		return nil
	}
	cur.Labels, cur.Spec, cur.OwnerReferences = want.Labels, want.Spec, want.OwnerReferences
	if err := sr.r.cfg.Kube.Update(ctx, &cur, client.FieldOwner(ManagedBy)); err != nil {
		return fmt.Errorf("update network policy %s: %w", name, err)
	}
	sr.log.Info("network policy rewritten", "network_policy", name)
	sr.r.report(ctx, sr.id, api.MachineStepStart, fmt.Sprintf("Rewrote NetworkPolicy %s: the session's network policy or the pool's settings changed, or it was edited.", name), nil)
	return nil
}

// policyRefused ends the run of a session whose network policy the pool
// cannot enforce: its pod (if any) is deleted, the reason goes on the
// transcript and is the release reason, and other claimers get the
// session first. It is never served open.
func (sr *sessionRun) policyRefused(ctx context.Context, err error) fleet.Outcome {
	why := fmt.Sprintf("Refused to run a session with a network policy on pod %s: %v.", sr.pod, err)
	sr.log.Warn("refusing the session: its network policy cannot be enforced", "err", err)
	sr.r.report(ctx, sr.id, api.MachineStepFailed, why, nil)
	sr.teardown(ctx, "its network policy cannot be enforced", false)
	return fleet.NotStarted(errors.New(why)).WithReason(why).Postponed()
}

// syncPolicy follows a change of the session's entry the watch showed: a
// new network policy is written to its NetworkPolicy (the network plugin
// applies it to the running pod); one the pool cannot enforce ends the
// run. Failing to write it is retried at the next change or poll.
func (sr *sessionRun) syncPolicy(ctx context.Context) (fleet.Outcome, bool) {
	if sr.unproxy != nil {
		// The proxy reads the new policy at each connection; open tunnels
		// it forbids now are closed.
		sr.r.cfg.Egress.Changed(sr.id)
	}
	err := sr.ensurePolicy(ctx)
	switch {
	case err == nil:
		return fleet.Outcome{}, false
	case errors.As(err, new(policyRefusal)):
		return sr.policyRefused(ctx, err), true
	}
	if ctx.Err() == nil {
		sr.log.Warn("cannot write the session's network policy; retrying", "err", err)
	}
	return fleet.Outcome{}, false
}

// CollectNetworkPolicies deletes the pool's NetworkPolicies whose session
// has no pod any more. They are not deleted with the pod: a pod being
// deleted still runs through its grace period, and must stay restricted
// until it is gone. Policies of sessions a run serves now are left alone.
func (r *Runner) CollectNetworkPolicies(ctx context.Context) error {
	pool := r.cfg.Pool()
	var list networkingv1.NetworkPolicyList
	if err := r.cfg.Kube.List(ctx, &list, r.listOpts()...); err != nil {
		if apierrors.IsForbidden(err) && PoolNetworkEnforcement(pool) != nil {
			return nil // a pool that never enforced, without the RBAC for it
		}
		return fmt.Errorf("list network policies: %w", err)
	}
	var errs []error
	for i := range list.Items {
		np := &list.Items[i]
		id := np.Labels[LabelSessionID]
		if !OwnedBy(np, pool) || id == "" || np.DeletionTimestamp != nil || r.running(id) ||
			time.Since(np.CreationTimestamp.Time) < r.policyGrace {
			continue
		}
		var p corev1.Pod
		err := r.cfg.Kube.Get(ctx, r.key(PodName(id)), &p)
		switch {
		case err == nil:
			continue // still there (perhaps terminating): it stays restricted
		case !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("read pod %s: %w", PodName(id), err))
			continue
		}
		uid := np.UID
		if err := ignoreGone(r.cfg.Kube.Delete(ctx, np, client.Preconditions{UID: &uid})); err != nil {
			errs = append(errs, fmt.Errorf("delete network policy %s: %w", np.Name, err))
			continue
		}
		r.log.Info("network policy collected: its session has no pod", "session", id, "network_policy", np.Name)
	}
	return errors.Join(errs...)
}

// policiesInUse counts the pool's NetworkPolicies whose session still has
// a pod (one being deleted included): a deleted pool is held until they
// are gone, or the garbage collector would delete the policies while
// those pods run through their grace period.
func (r *Runner) policiesInUse(ctx context.Context) (int, error) {
	pool := r.cfg.Pool()
	var list networkingv1.NetworkPolicyList
	if err := r.cfg.Kube.List(ctx, &list, r.listOpts()...); err != nil {
		return 0, fmt.Errorf("list network policies: %w", err)
	}
	n := 0
	for i := range list.Items {
		np := &list.Items[i]
		id := np.Labels[LabelSessionID]
		if !OwnedBy(np, pool) || id == "" {
			continue
		}
		var p corev1.Pod
		err := r.cfg.Kube.Get(ctx, r.key(PodName(id)), &p)
		switch {
		case err == nil:
			n++
		case !apierrors.IsNotFound(err):
			return 0, fmt.Errorf("read pod %s: %w", PodName(id), err)
		}
	}
	return n, nil
}
