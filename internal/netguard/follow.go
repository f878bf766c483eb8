package netguard

import (
	"context"
	"slices"

	"github.com/outpost-sh/outpost/api"
)

// policyEqual reports whether a and b say the same (nil and disabled are
// both unrestricted).
func policyEqual(a, b *api.NetworkPolicy) bool {
	ea, eb := a != nil && a.Enabled, b != nil && b.Enabled
	if !ea || !eb {
		return ea == eb
	}
	return slices.EqualFunc(a.Allow, b.Allow, func(x, y api.NetworkPolicyRule) bool {
		return x.Hostname == y.Hostname && x.IPv4 == y.IPv4 && x.IPv6 == y.IPv6 && slices.Equal(x.Ports, y.Ports)
	})
}

// policySetter is what Follow drives: a Guard.
type policySetter interface {
	SetPolicy(p *api.NetworkPolicy) error
}

// follow applies the policy of each newer entry (entry, after a value on
// updated) to g until ctx ends. A policy that does not compile is logged
// and the one in force stays.
func follow(ctx context.Context, g policySetter, updated <-chan struct{}, entry func() api.QueueEntry, warn func(msg string, args ...any)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-updated:
		}
		e := entry()
		if err := g.SetPolicy(e.Spec.NetworkPolicy); err != nil {
			warn("the session's new network policy is not applied; the one in force stays", "err", err)
		}
	}
}
