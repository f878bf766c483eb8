package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outpost-sh/outpost/api"
	outpost "github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/fleet"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// DefaultPollInterval is how often a session's pod is read again when
// nothing notifies the runner of a change, when RunnerConfig.PollInterval
// is zero: a backstop for a missed watch event.
const DefaultPollInterval = 10 * time.Second

// reportTimeout bounds a report on the transcript and each cleanup call,
// which run even after the claim is lost or the operator stops.
const reportTimeout = 10 * time.Second

// RunnerMetrics are the runner's metrics, curried with the pool's label. A
// nil field is not counted.
type RunnerMetrics struct {
	// PodsActive counts the pods runners serve now.
	PodsActive prometheus.Gauge
	// PodsGivenUp counts sessions given up after restartLimit failed pods.
	PodsGivenUp prometheus.Counter
	// ProvisionSeconds observes the time from a claim's run to its worker
	// container running.
	ProvisionSeconds prometheus.Observer
	// EgressDecisions counts the egress proxy's decisions by "decision"
	// (allow, deny).
	EgressDecisions *prometheus.CounterVec
}

// RunnerConfig configures a pool's Runner.
type RunnerConfig struct {
	// Kube reads and writes the pool's Pods, Secrets and
	// PersistentVolumeClaims. Secrets must be read uncached. Required.
	Kube client.Client
	// Pool returns the pool's latest object; never nil. Required.
	Pool func() *v1alpha1.OutpostPool
	// API is the pool's client of the Outpost server (the pool's token):
	// the runner reports machine events and reads queue entries with it.
	// Required.
	API *outpost.Client
	// AcceptorID is the pool's acceptor id, which holds its claims.
	AcceptorID string
	// OutpostID is the id of the outpost served.
	OutpostID string
	// WorkerImage is the operator's default worker image.
	WorkerImage string
	// Metrics are counted when set.
	Metrics RunnerMetrics
	// Egress is the operator's egress proxy's registry, nil when the
	// operator serves no proxy: the runner adds each proxied session it
	// serves.
	Egress *EgressSessions
	// PollInterval is how often a session's pod is read again without a
	// Notify; zero means DefaultPollInterval.
	PollInterval time.Duration
	// StartTimeout is how long a pod may stay without its worker container
	// running (unschedulable, an image that cannot be pulled, a missing
	// volume) before it counts as failed toward restartLimit; zero means
	// no deadline.
	StartTimeout time.Duration
	// Logger receives the runner's log; nil discards it.
	Logger *slog.Logger
}

// Runner is a pool's fleet.Runner: it gives each claimed session a Pod, a
// Secret holding only its connect token and, with FilesystemSnapshot, a
// PersistentVolumeClaim; watches the pod, reporting its provisioning on
// the session's transcript; replaces a failed pod up to the pool's
// restartLimit; and deletes what it made when the session is done.
type Runner struct {
	cfg RunnerConfig
	log *slog.Logger
	// policyGrace is defaultPolicyGrace but in tests.
	policyGrace time.Duration

	mu    sync.Mutex // guards wakes
	wakes map[string]chan struct{}
}

var _ fleet.Runner = (*Runner)(nil)

// NewRunner returns a pool's runner.
func NewRunner(cfg RunnerConfig) *Runner {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: cfg, log: log, policyGrace: defaultPolicyGrace, wakes: map[string]chan struct{}{}}
}

// Notify wakes the run of the session, if any, to read its objects again:
// call it when a Pod, Secret or PersistentVolumeClaim of the session
// changed. It never blocks.
func (r *Runner) Notify(sessionID string) {
	r.mu.Lock()
	ch := r.wakes[sessionID]
	r.mu.Unlock()
	poke(ch)
}

// NotifyAll wakes every run, as after a change of the pool's spec (an
// image change replaces pods that are not serving yet).
func (r *Runner) NotifyAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ch := range r.wakes {
		poke(ch)
	}
}

// running reports whether a run serves the session now.
func (r *Runner) running(sessionID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wakes[sessionID] != nil
}

func poke(ch chan struct{}) {
	if ch == nil {
		return
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run serves the claimed session until its pod is done, the session ends,
// the claim is lost (ctx ends: the pod and Secret are deleted at once) or
// the operator stops (s.Stopping: everything is left as it is, claim
// included, for the next operator to adopt).
func (r *Runner) Run(ctx context.Context, s *fleet.Session) fleet.Outcome {
	wake := make(chan struct{}, 1)
	r.mu.Lock()
	r.wakes[s.ID] = wake
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if r.wakes[s.ID] == wake {
			delete(r.wakes, s.ID)
		}
		r.mu.Unlock()
	}()
	claim := s.Claim
	if claim.Status.GatewayURL == "" {
		// The consumer's gateway, for a server that names none.
		claim.Status.GatewayURL = envValue(s.Env(""), api.EnvGatewayURL.Name)
	}
	sr := &sessionRun{r: r, s: s, claim: &claim, id: s.ID, pod: PodName(s.ID), wake: wake, start: time.Now(),
		mayHavePolicy: s.Adopted || r.cfg.Pool().Spec.Network.Enforcement != "",
		log:           r.log.With("session", s.ID, "pod", PodName(s.ID))}
	defer func() {
		if sr.unproxy != nil {
			sr.unproxy()
		}
		if sr.active && r.cfg.Metrics.PodsActive != nil {
			r.cfg.Metrics.PodsActive.Dec()
		}
	}()
	return sr.run(ctx)
}

// envValue is the value of name in env ("k=v" entries).
func envValue(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// render is the rendering options of the runner's pool.
func (r *Runner) render() Render {
	return Render{OutpostID: r.cfg.OutpostID, WorkerImage: r.cfg.WorkerImage, EgressProxy: r.cfg.Egress != nil}
}

// report puts a provisioning step of the session's pod onto its
// transcript. It is best effort: a failure is logged, never fatal.
func (r *Runner) report(ctx context.Context, sessionID, step, msg string, code *int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	if len(msg) > 2000 {
		msg = msg[:1997] + "..."
	}
	_, err := r.cfg.API.Queue.MachineEvent(ctx, sessionID, api.MachineEventRequest{AcceptorID: r.cfg.AcceptorID, Step: step,
		Machine: PodName(sessionID), Backend: backendName, Message: msg, ExitCode: code})
	if err != nil {
		r.log.Debug("cannot report a machine step", "session", sessionID, "step", step, "err", err)
	}
}

// key is the object key of name in the pool's namespace.
func (r *Runner) key(name string) client.ObjectKey {
	return client.ObjectKey{Namespace: r.cfg.Pool().Namespace, Name: name}
}

// deletePod deletes the session's pod; with uid set, only that pod (not
// one made since under the same name). A pod already gone is no error.
func (r *Runner) deletePod(ctx context.Context, sessionID string, uid types.UID) error {
	p := &corev1.Pod{}
	p.Namespace, p.Name = r.cfg.Pool().Namespace, PodName(sessionID)
	var opts []client.DeleteOption
	if uid != "" {
		opts = append(opts, client.Preconditions{UID: &uid})
	}
	return ignoreGone(r.cfg.Kube.Delete(ctx, p, opts...))
}

func (r *Runner) deleteSecret(ctx context.Context, sessionID string) error {
	s := &corev1.Secret{}
	s.Namespace, s.Name = r.cfg.Pool().Namespace, SecretName(sessionID)
	return ignoreGone(r.cfg.Kube.Delete(ctx, s))
}

func (r *Runner) deleteVolume(ctx context.Context, sessionID string) error {
	v := &corev1.PersistentVolumeClaim{}
	v.Namespace, v.Name = r.cfg.Pool().Namespace, VolumeName(sessionID)
	return ignoreGone(r.cfg.Kube.Delete(ctx, v))
}

// ignoreGone drops the errors of a delete that found nothing to delete
// (404) or another object than the one meant (a UID precondition, 409).
func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// permanent reports whether the API server refused a write for what it
// is, so that retrying it is pointless: an invalid object, a request
// admission or RBAC forbids, or an object in the way that is not ours.
func permanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) ||
		apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsMethodNotSupported(err) || errors.Is(err, errNotOurs) ||
		errors.As(err, new(policyRefusal))
}

// errNotOurs is an object under a session's name that the pool does not
// own.
var errNotOurs = errors.New("not owned by the pool")

func notOurs(kind, name string, pool *v1alpha1.OutpostPool) error {
	return fmt.Errorf("%s %s exists and is %w %s/%s; delete it or rename the pool", kind, name, errNotOurs, pool.Namespace, pool.Name)
}
