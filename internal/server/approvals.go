package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/approval"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/store"
)

// A call that an ask rule holds waits, stored on its session as a pending
// approval, until a person approves or denies it here or its timeout
// decides (the session's runner does that). A decision is one transaction
// under the session row's lock: the approval's new state, the approval
// event that says who decided, when and why, and the session's status
// detail; the runner, woken by the event (or its poll, for a decision on
// another replica), then sends the call to the machine or answers the
// agent with a tool error. Two decisions of one call cannot both commit:
// the second finds it decided (409).

// outpostApprovalRules gives the agent loop an outpost's rules; an outpost
// gone has none (its sessions are ending).
func (s *Server) outpostApprovalRules(ctx context.Context, outpostID string) ([]api.ApprovalRule, error) {
	o, err := s.store.GetOutpost(ctx, outpostID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return o.ApprovalRules, nil
}

// approveCall is POST /v1/sessions/{session}/calls/{seq}/approve.
func (s *Server) approveCall(w http.ResponseWriter, r *http.Request) error {
	return s.decideCall(w, r, api.ApprovalApproved)
}

// denyCall is POST /v1/sessions/{session}/calls/{seq}/deny.
func (s *Server) denyCall(w http.ResponseWriter, r *http.Request) error {
	return s.decideCall(w, r, api.ApprovalDenied)
}

func (s *Server) decideCall(w http.ResponseWriter, r *http.Request, state string) error {
	ctx := r.Context()
	var req api.ApprovalDecisionRequest
	if err := decodeOptional(w, r, &req); err != nil {
		return err
	}
	switch {
	case len(req.Reason) > api.MaxApprovalReason:
		return errBadRequest("reason is %d bytes long; at most %d are allowed.", len(req.Reason), api.MaxApprovalReason)
	case !utf8.ValidString(req.Reason):
		return errBadRequest("reason is not valid UTF-8.")
	}
	sess, err := s.sessionFor(ctx, r.PathValue("session"))
	if err != nil {
		return err
	}
	ref := r.PathValue("seq")
	seq, err := strconv.ParseInt(ref, 10, 64)
	if err != nil || seq < 1 {
		return errNotFound("Session %s has no call %q waiting for approval.", sess.ID, ref)
	}
	p := principalFrom(ctx)
	by := p.tokenID
	if u := p.User; u != nil {
		by = cmp.Or(u.Email, u.Name, u.ID) // a person, not the sign-in's token
	}
	if by == "" {
		by = "anonymous"
	}
	reason := strings.TrimSpace(req.Reason)
	now := s.now()
	var decided api.Approval
	action := audit.ApprovalApprove
	if state == api.ApprovalDenied {
		action = audit.ApprovalDeny
	}
	actx := s.audited(ctx, action, audit.Object{Kind: audit.ObjectToolCall, ID: fmt.Sprintf("%s/%d", sess.ID, seq)}, map[string]string{"reason": reason}, nil)
	m, err := s.store.UpdateSession(actx, sess.ID, func(st store.Session, e store.QueueEntry) (store.Mutation, error) {
		evs, err := approval.Decide(&st, seq, state, by, reason, now)
		switch {
		case err == nil && api.IsFinal(st.Status):
			return store.Mutation{}, errConflict("Session %s has ended; its calls can no longer be approved or denied.", st.ID)
		case errors.Is(err, approval.ErrUnknown):
			return store.Mutation{}, errNotFound("Session %s has no call %d waiting for approval.", st.ID, seq)
		case errors.Is(err, approval.ErrDecided):
			a := approval.Find(&st, seq)
			return store.Mutation{}, errConflict("Call %d of session %s was decided already (%s by %s).", seq, st.ID, a.State, a.By)
		case err != nil:
			return store.Mutation{}, err
		}
		decided = *approval.Find(&st, seq)
		return store.Mutation{Session: &st, Events: evs}, nil
	})
	if err != nil {
		return mapSessionUpdateErr(sess.ID, err)
	}
	s.committed(sess.ID, m)
	s.log.Info("tool call decided", "session", sess.ID, "call", seq, "tool", decided.Tool, "state", decided.State, "token", by)
	writeJSON(w, http.StatusOK, decided)
	return nil
}

// listApprovals is GET /v1/sessions/{session}/approvals: the session's held
// calls, pending and decided, oldest first; ?state=pending keeps those
// that wait.
func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request) error {
	sess, err := s.sessionFor(r.Context(), r.PathValue("session"))
	if err != nil {
		return err
	}
	state := r.URL.Query().Get("state")
	switch state {
	case "", api.ApprovalPending, api.ApprovalApproved, api.ApprovalDenied, api.ApprovalTimedOut:
	default:
		return errBadRequest("state %q is unknown; use %s, %s, %s or %s.", state, api.ApprovalPending, api.ApprovalApproved, api.ApprovalDenied, api.ApprovalTimedOut)
	}
	out := api.ApprovalList{Items: []api.Approval{}}
	for _, a := range sess.Approvals {
		if state == "" || a.State == state {
			out.Items = append(out.Items, a)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
