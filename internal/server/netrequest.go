package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/netpolicy"
	"github.com/outpost-sh/outpost/internal/redact"
	"github.com/outpost-sh/outpost/internal/store"
)

// A network access request is a network_access_request call of the
// session's agent that has no result yet; its id is the call's sequence
// number. Answering it writes, in one transaction of the session, the
// call's result (which the waiting runner hands to the agent), a
// network_request event with the answer and, for a grant, the session's
// new policy and its queue entry's. Every answer holds the outposts lock
// exclusively: two answers to one request cannot interleave (the second
// finds the call done: 409), and a grant for the outpost changes the
// outpost's policy and the session's in one critical section.

// answer is what a person says to a request.
type answer struct {
	grant  bool
	scope  string // a grant's
	reason string // a denial's
}

// grantNetworkRequest is POST /v1/sessions/{session}/network-requests/{request}/grant.
func (s *Server) grantNetworkRequest(w http.ResponseWriter, r *http.Request) error {
	var req api.NetworkGrantRequest
	if err := decodeOptional(w, r, &req); err != nil {
		return err
	}
	switch req.Scope {
	case "":
		req.Scope = api.NetworkGrantSession
	case api.NetworkGrantSession:
	case api.NetworkGrantOutpost:
		// The same right as changing the outpost's policy directly, or
		// network.admin, which may set any policy.
		p := principalFrom(r.Context())
		sess, err := s.sessionFor(r.Context(), r.PathValue("session"))
		if err != nil {
			return err
		}
		if !p.hasOn(sess.OutpostID, api.ScopeNetworkAdmin) && (!api.HasScope(p.scopes, api.ScopeOrchestrator) || p.outpostID != "") {
			return errForbidden("A grant for the outpost changes the outpost's network policy: it needs a token with the %s scope, or %s without an outpost limit; grant it for the session instead.",
				api.ScopeNetworkAdmin, api.ScopeOrchestrator)
		}
	default:
		return errBadRequest("scope %q is unknown; use %q or %q.", req.Scope, api.NetworkGrantSession, api.NetworkGrantOutpost)
	}
	return s.answerNetworkRequest(w, r, answer{grant: true, scope: req.Scope})
}

// denyNetworkRequest is POST /v1/sessions/{session}/network-requests/{request}/deny.
func (s *Server) denyNetworkRequest(w http.ResponseWriter, r *http.Request) error {
	var req api.NetworkDenyRequest
	if err := decodeOptional(w, r, &req); err != nil {
		return err
	}
	switch {
	case len(req.Reason) > api.MaxNetworkRequestReason:
		return errBadRequest("reason is %d bytes long; at most %d are allowed.", len(req.Reason), api.MaxNetworkRequestReason)
	case !utf8.ValidString(req.Reason):
		return errBadRequest("reason is not valid UTF-8.")
	}
	return s.answerNetworkRequest(w, r, answer{reason: strings.TrimSpace(req.Reason)})
}

func (s *Server) answerNetworkRequest(w http.ResponseWriter, r *http.Request, a answer) error {
	ctx := r.Context()
	sess, err := s.sessionFor(ctx, r.PathValue("session"))
	if err != nil {
		return err
	}
	ref := r.PathValue("request")
	seq, err := strconv.ParseInt(ref, 10, 64)
	if err != nil || seq < 1 {
		return errNotFound("Session %s has no network request %q.", sess.ID, ref)
	}
	o, unlock, err := s.lockOutpost(ctx, sess.OutpostID, false)
	if err != nil {
		return err
	}
	defer unlock()
	// Read again under the lock: a PATCH of its policy may have come
	// between.
	if sess, err = s.sessionFor(ctx, sess.ID); err != nil {
		return err
	}
	if api.IsFinal(sess.Status) {
		return errConflict("Session %s has ended; its network requests can no longer be answered.", sess.ID)
	}
	call, req, err := s.pendingRequest(ctx, sess.ID, seq)
	if err != nil {
		return err
	}
	p := principalFrom(ctx)
	// The transcript shows what the agent asked with secret values
	// redacted, as its call's arguments; the policy gets the names as
	// asked.
	red := redact.NewSet(sess.Secrets)
	shown := redactDomains(red, req.Domains)
	view := api.NetworkRequest{ID: strconv.FormatInt(seq, 10), Domains: shown, Reason: red.String(req.Reason), AnsweredBy: p.tokenID}
	result := api.NetworkAccessResult{RequestID: view.ID, Granted: a.grant, Domains: shown}
	// own is the session's new policy; keepOwn leaves it as it is.
	own, keepOwn := sess.NetworkPolicy, true
	outpostChanged := false
	// The entry goes with the first write of the answer: the outpost's
	// policy for a grant to the outpost, else the session's request.
	action := audit.NetworkDeny
	if a.grant {
		action = audit.NetworkGrant
	}
	actx := s.audited(ctx, action, audit.Object{Kind: audit.ObjectNetworkRequest, ID: sess.ID + "/" + view.ID},
		map[string]any{"session_id": sess.ID, "outpost_id": o.ID, "scope": a.scope, "domains": shown, "reason": a.reason}, sess.Secrets)
	switch {
	case !a.grant:
		view.State, view.Answer = api.NetworkRequestDenied, a.reason
		result.Reason = a.reason
		if result.Reason == "" {
			result.Reason = "A person denied the request."
		}
	case a.scope == api.NetworkGrantOutpost:
		if o.NetworkPolicy == nil || !o.NetworkPolicy.Enabled {
			return errConflict("Outpost %s's network is not restricted, so a grant for it changes nothing; grant the request for the session instead.", o.Name)
		}
		next, err := netpolicy.AllowHostnames(*o.NetworkPolicy, req.Domains)
		if err != nil {
			return errConflict("The grant cannot be added to outpost %s's network policy: %v.", o.Name, err)
		}
		if sess.NetworkPolicy != nil && sess.NetworkPolicy.Enabled {
			// A session with its own policy does not follow the outpost's;
			// it gets the domains too.
			n, err := netpolicy.AllowHostnames(*sess.NetworkPolicy, req.Domains)
			if err != nil {
				return errConflict("The grant cannot be added to session %s's network policy: %v.", sess.ID, err)
			}
			own, keepOwn = &n, samePolicy(&n, sess.NetworkPolicy)
		}
		if !samePolicy(&next, o.NetworkPolicy) {
			l := store.OutpostLimits{MaxRunning: o.MaxRunning, MaxAttempts: o.MaxAttempts, MaxSnapshotBytes: o.MaxSnapshotBytes, NetworkPolicy: &next}
			if err := s.store.SetOutpostLimits(actx, o.ID, l); err != nil {
				return fmt.Errorf("grant network request %d of session %s: update outpost %s: %w", seq, sess.ID, o.ID, err)
			}
			o.NetworkPolicy, outpostChanged = &next, true
		}
		view.State, view.Scope = api.NetworkRequestGranted, a.scope
		result.Scope, result.Reason = a.scope, "Every session of outpost "+o.Name+" may now reach these domains."
	default:
		view.State, view.Scope = api.NetworkRequestGranted, a.scope
		result.Scope, result.Reason = a.scope, "This session may now reach these domains."
		eff := netpolicy.Effective(o.NetworkPolicy, sess.NetworkPolicy)
		if eff == nil {
			result.Reason = "This session's network is not restricted: these domains are reachable already."
			break
		}
		// A session that follows its outpost's policy gets a copy of it
		// with the domains added: a policy of its own from now on.
		n, err := netpolicy.AllowHostnames(*eff, req.Domains)
		if err != nil {
			return errConflict("The grant cannot be added to session %s's network policy: %v.", sess.ID, err)
		}
		if own, err = checkSessionPolicy(ctx, o, &n); err != nil {
			return err
		}
		keepOwn = samePolicy(own, sess.NetworkPolicy)
	}
	value, err := json.Marshal(result)
	if err != nil {
		return fmt.Errorf("encode the answer of network request %d: %w", seq, err)
	}
	now := s.now()
	m, err := s.store.UpdateSession(actx, sess.ID, func(st store.Session, e store.QueueEntry) (store.Mutation, error) {
		if api.IsFinal(st.Status) {
			return store.Mutation{}, errConflict("Session %s has ended; its network requests can no longer be answered.", st.ID)
		}
		var m store.Mutation
		st.UpdatedAt, st.LastSeq = now, max(st.LastSeq, seq)
		m.Session = &st
		if !keepOwn || outpostChanged {
			if e.OutpostID == "" || e.Deleted {
				return store.Mutation{}, errConflict("Session %s has ended; its network policy no longer applies.", st.ID)
			}
			setOwnPolicy(o, &st, &e, own, &m)
		}
		ok := true
		call.Done, call.OK, call.Value, call.DoneAt = true, true, value, &now
		m.Calls = []store.Call{call}
		m.Events = []api.Event{
			{Type: api.EventNetworkRequest, Time: now.UnixMilli(), CallSeq: seq, Tool: call.Tool, NetworkRequest: &view},
			{Type: api.EventResult, Time: now.UnixMilli(), CallSeq: seq, Tool: call.Tool, OK: &ok, Value: value},
		}
		return m, nil
	})
	if err != nil {
		return mapSessionUpdateErr(sess.ID, err)
	}
	s.committed(sess.ID, m)
	s.log.Info("network request answered", "session", sess.ID, "request", seq, "state", view.State, "scope", view.Scope,
		"domains", strings.Join(req.Domains, ","), "token", p.tokenID)
	if outpostChanged {
		// The outpost's policy is stored; an error here leaves some
		// entries behind, which the next change of the policy brings up to
		// date.
		if err := s.spreadOutpostPolicy(ctx, o); err != nil {
			s.log.Error("spread a granted network request to the outpost's sessions", "outpost", o.Name, "err", err)
		}
	}
	writeJSON(w, http.StatusOK, view)
	return nil
}

// listNetworkRequests is GET /v1/sessions/{session}/network-requests: the
// requests that wait for an answer, read from the session's calls (not its
// transcript, which may be long), with secret values redacted as the
// transcript shows them.
func (s *Server) listNetworkRequests(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	sess, err := s.sessionFor(ctx, r.PathValue("session"))
	if err != nil {
		return err
	}
	out := api.NetworkRequestList{Items: []api.NetworkRequest{}}
	if api.IsFinal(sess.Status) {
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	calls, err := s.store.ListCalls(ctx, sess.ID)
	if errors.Is(err, store.ErrNotFound) {
		return errNotFound("Session %s does not exist.", sess.ID)
	}
	if err != nil {
		return fmt.Errorf("list the calls of session %s: %w", sess.ID, err)
	}
	red := redact.NewSet(sess.Secrets)
	for _, c := range calls {
		if c.Done || c.Tool != api.ToolNetworkAccessRequest {
			continue
		}
		req, err := netpolicy.ParseRequest(c.Args)
		if err != nil {
			continue // refused when it was made: never a request
		}
		out.Items = append(out.Items, api.NetworkRequest{ID: strconv.FormatInt(c.Seq, 10), Domains: redactDomains(red, req.Domains),
			Reason: red.String(req.Reason), State: api.NetworkRequestPending})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// redactDomains is a request's domains, normalized to lower case, with
// the session's secret values redacted whatever their case: a secret with
// capitals that the agent put into a domain is otherwise shown lower-cased.
func redactDomains(red *redact.Set, domains []string) []string {
	red = red.Folded()
	out := make([]string, len(domains))
	for i, d := range domains {
		out[i] = red.String(d)
	}
	return out
}

// pendingRequest returns call seq of the session, which must be a
// network access request without an answer, and its arguments.
func (s *Server) pendingRequest(ctx context.Context, sessionID string, seq int64) (store.Call, api.NetworkAccessRequestArgs, error) {
	calls, err := s.store.ListCalls(ctx, sessionID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Call{}, api.NetworkAccessRequestArgs{}, errNotFound("Session %s does not exist.", sessionID)
	}
	if err != nil {
		return store.Call{}, api.NetworkAccessRequestArgs{}, fmt.Errorf("list the calls of session %s: %w", sessionID, err)
	}
	for _, c := range calls {
		if c.Seq != seq || c.Tool != api.ToolNetworkAccessRequest {
			continue
		}
		req, err := netpolicy.ParseRequest(c.Args)
		if err != nil {
			break // refused when it was made: never a request
		}
		if c.Done {
			return store.Call{}, api.NetworkAccessRequestArgs{}, errConflict("Network request %d of session %s has been answered already.", seq, sessionID)
		}
		return c, req, nil
	}
	return store.Call{}, api.NetworkAccessRequestArgs{}, errNotFound("Session %s has no network request %d.", sessionID, seq)
}
