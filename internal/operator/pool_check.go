package operator

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outpost-sh/outpost/api"
	outpost "github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/machine"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// apiClient checks the pool's apiUrl against the allow list and reads its
// token; nothing is sent anywhere. It returns the client of the pool's
// server.
func (r *poolReconciler) apiClient(ctx context.Context, pool *v1alpha1.OutpostPool) (*outpost.Client, string, string, *problem) {
	apiURL := pool.Spec.APIURL
	if apiURL == "" {
		apiURL = r.defaultURL
	}
	if apiURL == "" {
		return nil, "", "", degraded(ReasonNoAPIURL, "the pool has no apiUrl and the operator no --default-api-url")
	}
	if err := r.allow.Check(apiURL); err != nil {
		return nil, "", "", degraded(ReasonAPIURLNotAllowed, "%w", err)
	}
	ref := pool.Spec.TokenSecretRef
	keyName := ref.Key
	if keyName == "" {
		keyName = "token"
	}
	var secret corev1.Secret
	err := r.kube.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: ref.Name}, &secret)
	switch {
	case apierrors.IsNotFound(err):
		return nil, "", "", degraded(ReasonTokenSecret, "the token Secret %s/%s does not exist", pool.Namespace, ref.Name)
	case apierrors.IsForbidden(err):
		return nil, "", "", degraded(ReasonTokenSecret, "the operator may not read Secret %s/%s: grant it get on secrets in namespace %s", pool.Namespace, ref.Name, pool.Namespace)
	case err != nil:
		return nil, "", "", degraded(ReasonTokenSecret, "read the token Secret %s/%s: %w", pool.Namespace, ref.Name, err)
	}
	token := strings.TrimSpace(string(secret.Data[keyName]))
	if token == "" {
		return nil, "", "", degraded(ReasonTokenSecret, "the token Secret %s/%s has no key %q (or it is empty)", pool.Namespace, ref.Name, keyName)
	}
	opts := []outpost.Option{outpost.WithUserAgent("outpost-operator/" + machine.Version)}
	if r.http != nil {
		opts = append(opts, outpost.WithHTTPClient(r.http))
	}
	c, err := outpost.New(apiURL, token, opts...)
	if err != nil {
		return nil, "", "", degraded(ReasonAPIURLNotAllowed, "%w", err)
	}
	return c, apiURL, token, nil
}

// lookup resolves the pool's outpost on its server.
func (r *poolReconciler) lookup(ctx context.Context, c *outpost.Client, pool *v1alpha1.OutpostPool) (*api.Outpost, *problem) {
	op, err := c.Outposts.Get(ctx, pool.Spec.Outpost)
	switch {
	case err == nil:
		return op, nil
	case outpost.IsUnauthorized(err) || outpost.IsForbidden(err):
		return nil, &problem{phase: v1alpha1.PoolUnauthorized, reason: ReasonUnauthorized,
			err: fmt.Errorf("the server at %s refused the pool's token (it needs the %s scope): %w", c.BaseURL(), api.ScopeMachine, err)}
	case outpost.IsNotFound(err):
		return nil, degraded(ReasonOutpostNotFound, "the server at %s has no outpost %q", c.BaseURL(), pool.Spec.Outpost)
	default:
		return nil, degraded(ReasonServerError, "look up outpost %q at %s: %w", pool.Spec.Outpost, c.BaseURL(), err)
	}
}

// dryRun checks the pool's pod template by a server-side dry-run of the
// pod it renders to, once per generation.
func (r *poolReconciler) dryRun(ctx context.Context, pool *v1alpha1.OutpostPool) *problem {
	s := r.poolState(pool.UID)
	r.mu.Lock()
	done := s.dryRun == pool.Generation
	r.mu.Unlock()
	if done {
		return nil
	}
	// A sample session's pod, as the runner would make it.
	claim := api.QueueEntry{Metadata: api.QueueMetadata{SessionID: "ses_dry-run", OutpostID: "out_dry-run"},
		Status: api.QueueStatus{GatewayURL: "wss://gateway.invalid"}}
	pod := RenderPod(pool, &claim, Render{WorkerImage: r.workerImage})
	if err := r.kube.Create(ctx, pod, client.DryRunAll); err != nil {
		return degraded(ReasonTemplateInvalid, "the pod template is refused: %w", err)
	}
	r.mu.Lock()
	s.dryRun = pool.Generation
	r.mu.Unlock()
	return nil
}
