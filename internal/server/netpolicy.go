package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/netpolicy"
	"github.com/outpost-sh/outpost/internal/store"
)

// The network policies: an outpost's (the default of its sessions), a
// session's own (which replaces it), and the effective one each queue
// entry holds, which the fleet API shows as spec.network_policy. Workers
// watch the queue and apply a changed entry's policy to the running
// session, so every change of an effective policy is written as a change
// of the entry.

// decodeWithPolicy is decode for the request bodies that carry a
// network_policy (outposts create and update, sessions create). Besides
// decoding strictly, it refuses a policy with allow rules but no
// "enabled" (netpolicy.CheckEnabledKey), which would decode as disabled
// and be stored unrestricted. The check reads the body's own JSON, since
// the decoded api.NetworkPolicy cannot tell a missing "enabled" from
// false; answers keep their shape, and nothing is stored before it.
func decodeWithPolicy(w http.ResponseWriter, r *http.Request, v any) error {
	var body bytes.Buffer
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(r.Body, &body), r.Body}
	if err := decode(w, r, v); err != nil {
		return err
	}
	// The strict decode took the body, so it is one JSON object; its
	// network_policy is found as that decode found it (the last of
	// duplicate keys, matched case-insensitively).
	var outer struct {
		NetworkPolicy json.RawMessage `json:"network_policy"`
	}
	if err := json.NewDecoder(&body).Decode(&outer); err != nil {
		return fmt.Errorf("read network_policy again: %w", err)
	}
	return checkEnabledKey(outer.NetworkPolicy)
}

// checkEnabledKey answers 400 for a network_policy whose JSON has allow
// rules but no "enabled".
func checkEnabledKey(raw json.RawMessage) error {
	if err := netpolicy.CheckEnabledKey(raw); err != nil {
		return errBadRequest("%v.", err)
	}
	return nil
}

// checkPolicy validates a policy from a request and returns it normalized;
// nil stays nil. A bad policy answers 400 with the validation's sentence.
func checkPolicy(p *api.NetworkPolicy) (*api.NetworkPolicy, error) {
	if p == nil {
		return nil, nil
	}
	n, err := netpolicy.Normalize(*p)
	if err != nil {
		return nil, errBadRequest("Invalid network_policy: %v.", err)
	}
	return &n, nil
}

// checkSessionPolicy validates a session's own policy against its outpost:
// without network.admin it may only narrow the outpost's.
func checkSessionPolicy(ctx context.Context, o store.Outpost, p *api.NetworkPolicy) (*api.NetworkPolicy, error) {
	n, err := checkPolicy(p)
	if err != nil || n == nil {
		return n, err
	}
	outer := o.NetworkPolicy
	if outer == nil || !outer.Enabled || principalFrom(ctx).hasOn(o.ID, api.ScopeNetworkAdmin) {
		return n, nil
	}
	if err := netpolicy.Within(*outer, *n); err != nil {
		return nil, errForbidden("The session's %v of outpost %s; only a token with the %s scope may widen it.", err, o.Name, api.ScopeNetworkAdmin)
	}
	return n, nil
}

// samePolicy compares two effective policies.
func samePolicy(a, b *api.NetworkPolicy) bool {
	if a == nil || b == nil {
		return a == b
	}
	return reflect.DeepEqual(*a, *b)
}

// apiSession is toAPISession with the session's effective network policy,
// its own or its outpost's.
func (s *Server) apiSession(ctx context.Context, sess store.Session) (api.Session, error) {
	return s.apiSessionCached(ctx, sess, nil)
}

// apiSessionCached is apiSession reading each outpost's policy once
// through policies (by outpost id; nil: no cache), for a list of sessions.
func (s *Server) apiSessionCached(ctx context.Context, sess store.Session, policies map[string]*api.NetworkPolicy) (api.Session, error) {
	out := toAPISession(sess)
	if sess.NetworkPolicy != nil {
		out.Spec.NetworkPolicy, out.Spec.NetworkPolicyOwn = netpolicy.Effective(nil, sess.NetworkPolicy), true
		return out, nil
	}
	p, seen := policies[sess.OutpostID]
	if !seen {
		o, err := s.store.GetOutpost(ctx, sess.OutpostID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			// An outpost deleted under its ended sessions has nothing to
			// follow; any other error is the store's.
			return api.Session{}, fmt.Errorf("session %s: outpost %s: %w", sess.ID, sess.OutpostID, err)
		}
		p = netpolicy.Effective(o.NetworkPolicy, nil)
		if policies != nil {
			policies[sess.OutpostID] = p
		}
	}
	out.Spec.NetworkPolicy = p
	return out, nil
}

// writeSession answers 200 with the API view of sess.
func (s *Server) writeSession(ctx context.Context, w http.ResponseWriter, sess store.Session) error {
	out, err := s.apiSession(ctx, sess)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// updateSession is PATCH /v1/sessions/{session}: it replaces the session's
// own network policy, or removes it with null. The session's queue entry
// gets the new effective policy in the same transaction, which the queue's
// watchers (the worker serving it) see as a MODIFIED event.
func (s *Server) updateSession(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var raw map[string]json.RawMessage
	if err := decode(w, r, &raw); err != nil {
		return err
	}
	var req api.UpdateSessionRequest
	body, ok := raw["network_policy"]
	for k := range raw {
		if k != "network_policy" {
			return errBadRequest("The request has an unknown field %q.", k)
		}
	}
	if !ok {
		return errBadRequest("network_policy is required: a policy, or null to follow the outpost's.")
	}
	// As strict as decode: a misspelt key ("alow") is refused, not
	// dropped.
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req.NetworkPolicy); err != nil {
		return errBadRequest("network_policy is not a network policy: %v.", err)
	}
	if err := checkEnabledKey(body); err != nil {
		return err
	}
	sess, err := s.sessionFor(ctx, r.PathValue("session"))
	if err != nil {
		return err
	}
	// Shared: an outpost's policy cannot change while this session's
	// effective one is decided from it.
	o, unlock, err := s.lockOutpost(ctx, sess.OutpostID, true)
	if err != nil {
		return err
	}
	defer unlock()
	own, err := checkSessionPolicy(ctx, o, req.NetworkPolicy)
	if err != nil {
		return err
	}
	now := s.now()
	actx := s.audited(ctx, audit.SessionUpdate, audit.Object{Kind: audit.ObjectSession, ID: sess.ID}, map[string]any{"network_policy": req.NetworkPolicy}, nil)
	m, err := s.store.UpdateSession(actx, sess.ID, func(st store.Session, e store.QueueEntry) (store.Mutation, error) {
		if api.IsFinal(st.Status) || e.OutpostID == "" || e.Deleted {
			return store.Mutation{}, errConflict("Session %s has ended; its network policy no longer applies.", st.ID)
		}
		st.UpdatedAt = now
		var m store.Mutation
		setOwnPolicy(o, &st, &e, own, &m)
		return m, nil
	})
	if err != nil {
		return mapSessionUpdateErr(sess.ID, err)
	}
	s.committed(sess.ID, m)
	sess.NetworkPolicy, sess.UpdatedAt = own, now
	s.log.Info("session network policy changed", "session", sess.ID, "own", own != nil)
	return s.writeSession(ctx, w, sess)
}

// setOwnPolicy gives st the own policy own (nil: follow outpost o's) in
// m, and e the effective policy that follows when it changes: what a
// worker serving the session sees as a MODIFIED entry. Every change of a
// session's own policy goes through it.
func setOwnPolicy(o store.Outpost, st *store.Session, e *store.QueueEntry, own *api.NetworkPolicy, m *store.Mutation) {
	st.NetworkPolicy = own
	m.Session = st
	if eff := netpolicy.Effective(o.NetworkPolicy, own); !samePolicy(eff, e.NetworkPolicy) {
		e.NetworkPolicy = eff
		m.Entry = e
	}
}

func mapSessionUpdateErr(id string, err error) error {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return err
	case errors.Is(err, store.ErrNotFound):
		return errNotFound("Session %s does not exist.", id)
	}
	return fmt.Errorf("update session %s: %w", id, err)
}

// checkOutpostWidening refuses a new outpost policy that allows what o's
// restricted one does not, or lifts it, unless the caller holds
// network.admin: the outpost's policy bounds what its sessions reach, and
// an outposts.orchestrator token (which orchestrators hold) may not open
// it, as a sessions.write token may not open a session's.
func checkOutpostWidening(ctx context.Context, o store.Outpost, next *api.NetworkPolicy) error {
	cur := o.NetworkPolicy
	if cur == nil || !cur.Enabled || principalFrom(ctx).hasOn(o.ID, api.ScopeNetworkAdmin) {
		return nil
	}
	n := api.NetworkPolicy{}
	if next != nil {
		n = *next
	}
	if err := netpolicy.Within(*cur, n); err != nil {
		return errForbidden("Outpost %s's new %v; only a token with the %s scope may widen an outpost's network policy.", o.Name, err, api.ScopeNetworkAdmin)
	}
	return nil
}

// checkOutpostNarrowing refuses a new outpost policy that would leave
// live sessions of o with policies of their own wider than it (they were
// checked against the old one), unless the caller holds network.admin:
// a session's policy only narrows its outpost's, whichever of the two
// changes. The caller holds the outposts lock, so no session's own
// policy changes meanwhile.
func (s *Server) checkOutpostNarrowing(ctx context.Context, o store.Outpost, next *api.NetworkPolicy) error {
	if next == nil || !next.Enabled || principalFrom(ctx).hasOn(o.ID, api.ScopeNetworkAdmin) {
		return nil
	}
	entries, _, err := s.store.ListQueue(ctx, store.QueueFilter{OutpostID: o.ID, NoTotal: true})
	if err != nil {
		return fmt.Errorf("list the queue of outpost %s: %w", o.Name, err)
	}
	var wider []string
	for _, e := range entries {
		if e.Deleted || e.SessionStatus == api.QueueSessionTerminated {
			continue
		}
		sess, err := s.store.GetSession(ctx, e.SessionID)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("get session %s: %w", e.SessionID, err)
		}
		if sess.NetworkPolicy != nil && !api.IsFinal(sess.Status) && netpolicy.Within(*next, *sess.NetworkPolicy) != nil {
			wider = append(wider, sess.ID)
		}
	}
	if len(wider) == 0 {
		return nil
	}
	if len(wider) > 10 {
		wider = append(wider[:10], fmt.Sprintf("and %d more", len(wider)-10))
	}
	return errConflict("The new network policy would not contain the policies of sessions %s, which have their own; change or clear theirs first, or use a token with the %s scope.",
		strings.Join(wider, ", "), api.ScopeNetworkAdmin)
}

// spreadOutpostPolicy brings the queue entries of outpost o's live
// sessions that follow its policy up to date with it: each changed entry
// is a MODIFIED event for the workers that serve them. The caller holds
// the outposts lock, so no other change of o's policy interleaves.
func (s *Server) spreadOutpostPolicy(ctx context.Context, o store.Outpost) error {
	entries, _, err := s.store.ListQueue(ctx, store.QueueFilter{OutpostID: o.ID, NoTotal: true})
	if err != nil {
		return fmt.Errorf("list the queue of outpost %s: %w", o.Name, err)
	}
	eff := netpolicy.Effective(o.NetworkPolicy, nil)
	for _, listed := range entries {
		if listed.Deleted || listed.SessionStatus == api.QueueSessionTerminated {
			continue
		}
		m, err := s.store.UpdateSession(ctx, listed.SessionID, func(st store.Session, e store.QueueEntry) (store.Mutation, error) {
			if st.NetworkPolicy != nil || e.Deleted || e.OutpostID != o.ID || samePolicy(eff, e.NetworkPolicy) {
				return store.Mutation{}, nil
			}
			e.NetworkPolicy = eff
			return store.Mutation{Entry: &e}, nil
		})
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return fmt.Errorf("apply outpost %s's network policy to session %s: %w", o.Name, listed.SessionID, err)
		}
		s.committed(listed.SessionID, m)
	}
	return nil
}
