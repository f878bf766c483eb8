package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/steptrace"
	"github.com/outpost-sh/outpost/internal/store"
)

// Server-assigned claims. Outpost's own claimers (workers,
// orchestrators) ask for "the next pending session of this outpost"
// instead of racing each other for one id they saw on the watch: the
// store picks the first claimable entry in claim order inside the claim's
// own transaction, so concurrent claimers get different sessions and a
// burst has no conflicts. The claim by id stays as the contract has it.
//
// Every idle claimer sees each new session on its watch and asks at once,
// so the requests go through a lifecycle.NextGate: those of one outpost
// that would pick alike (equal filters and machines, no exclude list)
// wait in line, a few of them run a transaction at a time, and a pick that
// finds nothing answers every request that was waiting before it started.
// A burst of sessions costs about one transaction per session claimed
// on each replica, not one per claimer and session.

// claimNextHandler serves POST /v1/outposts/{outpost}/queue:claim: 200 and
// the claimed entry as a claim by id answers it, or 204 when no pending
// session of the outpost is claimable for the request.
func (s *Server) claimNextHandler(w http.ResponseWriter, r *http.Request) error {
	steptrace.Mark("server.claim_request", "")
	ctx := r.Context()
	var req api.ClaimNextRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := checkClaimNext(req); err != nil {
		return err
	}
	if err := checkClaimWait(req); err != nil {
		return err
	}
	o, err := s.resolveOutpost(ctx, r.PathValue("outpost"))
	if err != nil {
		return err
	}
	s.metrics.claimNextRequests.Inc()
	if outpostWantsDesktop(o) && !req.Desktop {
		// Fail closed, as with network policies: a claimer that cannot
		// give a desktop (or a build from before the setting) is never
		// handed a session that must have one. One that may wait is
		// held as long, so that it does not ask again at once.
		w.Header().Set(api.HeaderClaimWait, claimWaitHeader)
		if err := s.idleWait(ctx, req); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	w.Header().Set(api.HeaderClaimWait, claimWaitHeader)
	if req.WaitSeconds > 0 && r.ProtoMajor == 1 {
		// Over HTTP/1.x a request that has to wait waits on a hijacked
		// connection (claimpark.go), holding no handler stack or
		// net/http buffers while it is parked.
		q := s.claimWaits
		cw := q.join(o.ID)
		deadline := time.Now().Add(time.Duration(req.WaitSeconds) * time.Second)
		res, ok, err, done := s.claimPick(ctx, o.ID, req, cw, nil)
		if !done && s.parkClaim(w, r, o.ID, req, cw, deadline) {
			return nil
		}
		q.leave(cw)
		return s.answerClaim(ctx, w, req, res, ok, err)
	}
	res, ok, err := s.claimNextWaiting(ctx, o.ID, req)
	return s.answerClaim(ctx, w, req, res, ok, err)
}

// answerClaim answers a claim-next request with what its picks found: the
// claimed entry, or 204; a claim whose claimer left (ctx ended) or that
// needs a desktop the claimer cannot give goes back to the queue.
func (s *Server) answerClaim(ctx context.Context, w http.ResponseWriter, req api.ClaimNextRequest, res lifecycle.Grant, ok bool, err error) error {
	if err != nil {
		return err
	}
	if ok && ctx.Err() != nil {
		// The claimer is gone (it gave up waiting): nobody will start
		// a remote for this claim, so the session goes back to the queue
		// now rather than when the claim lapses.
		if _, err := s.life.Release(context.WithoutCancel(ctx), res.Entry.SessionID, req.AcceptorID,
			"its claimer left before the claim was answered", true); err != nil {
			s.log.Warn("cannot release a claim whose claimer left", "session", res.Entry.SessionID, "err", err)
		}
		return ctx.Err()
	}
	if !ok {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	desktop := outpostWantsDesktop(store.Outpost{Desktop: res.Desktop}) // as the claim's transaction read it
	if desktop && !req.Desktop {
		// The setting was turned on while the request waited its turn:
		// still fail closed.
		if _, err := s.life.Release(context.WithoutCancel(ctx), res.Entry.SessionID, req.AcceptorID,
			"the outpost wants a desktop its claimer cannot give", true); err != nil {
			s.log.Warn("cannot release a claim whose claimer has no desktop", "session", res.Entry.SessionID, "err", err)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	steptrace.Mark("server.claimed", res.Entry.SessionID)
	out := toAPIEntry(res.Entry)
	out.Status.ConnectToken = res.Token
	out.Status.GatewayURL = s.gatewayURL
	out.Spec.Desktop = desktop
	writeJSON(w, http.StatusOK, out)
	return nil
}

// checkClaimNext answers 400 for a request that is not valid.
func checkClaimNext(req api.ClaimNextRequest) error {
	if err := checkAcceptorID(req.AcceptorID); err != nil {
		return err
	}
	switch req.Platform {
	case "", api.PlatformLinux, api.PlatformMacOS, api.PlatformWindows:
	default:
		return errBadRequest("platform must be %s, %s or %s (or left out for any).", api.PlatformLinux, api.PlatformMacOS, api.PlatformWindows)
	}
	if m := req.Machine; m != nil {
		if err := api.ValidateLabels(m.Labels); err != nil {
			return errBadRequest("machine.labels: %s.", err)
		}
		if c := m.Capabilities; c != nil && (c.CPUs < 0 || c.MemoryBytes < 0 || len(c.GPUs) > maxGPUs) {
			return errBadRequest("machine.capabilities has negative numbers or more than %d GPUs.", maxGPUs)
		}
	}
	if len(req.Exclude) > api.MaxClaimNextExclude {
		return errBadRequest("exclude lists at most %d sessions; it has %d.", api.MaxClaimNextExclude, len(req.Exclude))
	}
	for _, id := range req.Exclude {
		if id == "" || len(id) > 128 {
			return errBadRequest("exclude holds session ids of 1 to 128 characters.")
		}
	}
	return nil
}

// claimNext claims for req.AcceptorID the first claimable pending session
// of outpost outpostID; false when there is none.
func (s *Server) claimNext(ctx context.Context, outpostID string, req api.ClaimNextRequest) (lifecycle.Grant, bool, error) {
	tokenID := principalFrom(ctx).tokenID
	g, ok, err := s.nextGate.ClaimNext(ctx, lifecycle.NextRequest{OutpostID: outpostID, Acceptor: req.AcceptorID, TokenID: tokenID,
		Filter:  store.NextFilter{Platform: req.Platform, Exclude: req.Exclude, Restricted: req.NetworkPolicy, Placed: req.Provisions},
		Machine: req.Machine})
	if errors.Is(err, store.ErrTokenRevoked) {
		// A parked request comes here after its handler returned.
		s.claimTokens.forget(tokenID, "")
	}
	return g, ok, err
}

// newNextGate is the server's line of claim-next requests, counted.
func (s *Server) newNextGate() *lifecycle.NextGate {
	return lifecycle.NewNextGate(s.life, lifecycle.NextGateOptions{Shared: s.metrics.claimNextShared.Inc})
}

// countedStore is the store as the state machine uses it, counting
// claim-next's transactions.
type countedStore struct {
	store.Store
	claimNext prometheus.Counter
}

func (c countedStore) ClaimNext(ctx context.Context, outpostID string, now time.Time, tokenID string, f store.NextFilter,
	fn func(s store.Session, e store.QueueEntry, load store.OutpostLoad) (store.Mutation, error)) (store.Mutation, error) {
	c.claimNext.Inc()
	return c.Store.ClaimNext(ctx, outpostID, now, tokenID, f, fn)
}
