package operator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// proxySecretFrom keeps the proxy password of the session's Secret, so
// that a pod already running (an adopted session) keeps a credential the
// proxy accepts.
func (sr *sessionRun) proxySecretFrom(cur *corev1.Secret) {
	if sr.proxyURL == "" {
		if pw := proxySecretOf(string(cur.Data[ProxyURLKey])); pw != "" {
			sr.proxyPass = pw
		}
	}
}

// proxySetup gives a proxied session its proxy URL and adds it to the
// operator's egress proxy for as long as the run lasts.
func (sr *sessionRun) proxySetup(pool *v1alpha1.OutpostPool) error {
	if !proxied(pool, sr.claim, sr.r.render()) {
		sr.proxyURL = ""
		return nil
	}
	if sr.proxyPass == "" {
		sr.proxyPass = newProxySecret()
	}
	u, err := ProxyURL(pool.Spec.Network.EgressProxy.URL, sr.id, sr.proxyPass)
	if err != nil {
		return policyRefusal{fmt.Errorf("spec.network.egressProxy: %w", err)}
	}
	sr.proxyURL = u
	if sr.unproxy == nil {
		post := func(ctx context.Context, batch []api.NetworkDecision) error {
			// Decisions only: the server takes no machine step with them.
			_, err := sr.r.cfg.API.Queue.MachineEvent(ctx, sr.id, api.MachineEventRequest{AcceptorID: sr.r.cfg.AcceptorID, Network: batch})
			return err
		}
		sr.unproxy = sr.r.cfg.Egress.add(sr.id, sr.proxyPass, sr.s.Entry, post, sr.r.cfg.Metrics.EgressDecisions)
	}
	return nil
}
