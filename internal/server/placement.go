package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// Placement: a session may state requirements (labels, CPUs, memory,
// GPUs); the server-assigned claim gives a claimer only sessions its
// machine meets (lifecycle.Machine.ClaimNext), a claim by id of a worker
// whose heartbeat shows a machine that does not meet them is refused, and
// a pending session no connected worker meets says so in its reason.

// maxGPUs bounds the GPUs a heartbeat or a claim may describe.
const maxGPUs = 1024

// effectiveRequirements is what a queue entry (or an outpost) holds of
// requirements: nil for none. A session's own replace its outpost's
// whole, as its network policy does.
func effectiveRequirements(own *api.Requirements) *api.Requirements {
	if own.IsZero() {
		return nil
	}
	return own
}

// checkFits answers 409 when acceptor, connected to e's outpost with a
// heartbeat, runs on a machine that does not meet e's requirements. An
// acceptor the server has no heartbeat of (a claimer written for the
// public contract, which sends none) is not checked: the server cannot
// know its machine.
func (s *Server) checkFits(ctx context.Context, e store.QueueEntry, acceptor string) error {
	if e.Requirements.IsZero() {
		return nil
	}
	workers, err := s.store.ListWorkers(ctx, e.OutpostID, s.now())
	if err != nil {
		return fmt.Errorf("list workers of %s: %w", e.OutpostID, err)
	}
	for _, w := range workers {
		if w.AcceptorID != acceptor || w.Info.Kind != api.WorkerKindWorker {
			continue
		}
		var unmet *api.UnmetError
		if errors.As(e.Requirements.Unmet(w.Info.Capabilities, w.Info.Labels), &unmet) {
			return errConflict("Session %s needs a machine with %s; worker %s does not meet it (it has %s).", e.SessionID, unmet.Requirement, acceptor, unmet.Have)
		}
	}
	return nil
}

// unplaceable returns, for a pending entry with requirements that no
// connected worker of its outpost meets, a sentence saying so; "" when
// some worker meets them, or when the outpost has an orchestrator (which
// provisions machines to fit) connected.
func unplaceable(e store.QueueEntry, workers []store.Worker) string {
	if e.Requirements.IsZero() || e.Phase != api.PhasePending {
		return ""
	}
	n := 0
	var first *api.UnmetError
	for _, w := range workers {
		if w.Info.Kind == api.WorkerKindOrchestrator {
			return ""
		}
		n++
		err := e.Requirements.Unmet(w.Info.Capabilities, w.Info.Labels)
		if err == nil {
			return ""
		}
		if first == nil {
			errors.As(err, &first)
		}
	}
	if n == 0 || first == nil {
		return ""
	}
	noun := "workers"
	if n == 1 {
		noun = "worker"
	}
	return fmt.Sprintf("Waiting for a machine with %s; %d %s connected, none fits.", first.Requirement, n, noun)
}

// unplaceableDesc is outpost_sessions_unplaceable.
var unplaceableDesc = prometheus.NewDesc("outpost_sessions_unplaceable",
	"Pending sessions whose requirements no connected worker of their outpost meets.", []string{"outpost"}, nil)

// unplaceableScan bounds the pending entries of one outpost a scrape
// reads (in claim order) to count the unplaceable ones.
const unplaceableScan = 500

// countUnplaceable counts the pending entries of an outpost with
// connected workers whose requirements none of them meets, among the
// first unplaceableScan in claim order. Outposts without connected workers
// are not counted: every session with requirements waits there, and
// outpost_queue_pending says so.
func (s *Server) countUnplaceable(ctx context.Context, outpostID string) (int, error) {
	workers, err := s.store.ListWorkers(ctx, outpostID, s.now())
	if err != nil {
		return 0, fmt.Errorf("list workers of %s: %w", outpostID, err)
	}
	entries, _, err := s.store.ListQueue(ctx, store.QueueFilter{OutpostID: outpostID, Phase: api.PhasePending,
		ByPriority: true, Limit: unplaceableScan, NoTotal: true})
	if err != nil {
		return 0, fmt.Errorf("list the queue of %s: %w", outpostID, err)
	}
	n := 0
	for _, e := range entries {
		if e.SessionStatus != api.QueueSessionTerminated && e.SessionStatus != api.QueueSessionSuspended && unplaceable(e, workers) != "" {
			n++
		}
	}
	return n, nil
}
