package storetest

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// testApprovals checks approval rules and approvals: an outpost's rules
// (CreateOutpost, SetOutpostApprovalRules), a session's own rules (in its
// spec) and the session's approvals, which UpdateSession reads and writes
// as part of the session's state; none round-trips as nil.
func testApprovals(t *testing.T, s store.Store) {
	rules := []api.ApprovalRule{
		{Action: api.ApprovalAsk, Tool: "exec", Match: map[string]string{"command": `git push .* main`}, Reason: "pushes", TimeoutS: 60, OnTimeout: api.ApprovalAllow},
		{Action: api.ApprovalDeny, Tool: "browser_*"},
	}
	o := newOutpost("op-appr", "appr")
	o.ApprovalRules = rules
	must(t, "create outpost", s.CreateOutpost(ctx(t), o))
	got, err := s.GetOutpost(ctx(t), o.ID)
	must(t, "get outpost", err)
	equal(t, "outpost", got, o)
	must(t, "clear the rules", s.SetOutpostApprovalRules(ctx(t), o.ID, nil))
	got, err = s.GetOutpost(ctx(t), o.ID)
	must(t, "get outpost", err)
	equal(t, "rules after clearing", got.ApprovalRules, []api.ApprovalRule(nil))
	must(t, "set the rules", s.SetOutpostApprovalRules(ctx(t), o.ID, rules[1:]))
	all, err := s.ListOutposts(ctx(t))
	must(t, "list outposts", err)
	equal(t, "listed rules", all[0].ApprovalRules, rules[1:])
	if err := s.SetOutpostApprovalRules(ctx(t), "op-missing", rules); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("rules of a missing outpost: got %v, want ErrNotFound", err)
	}

	sess := newSession("s-appr", o.ID, "appr", 0)
	sess.Spec.ApprovalRules = rules[:1]
	must(t, "create session", s.CreateSession(ctx(t), sess, newEntry(sess), nil))
	gs, err := s.GetSession(ctx(t), sess.ID)
	must(t, "get session", err)
	equal(t, "session rules", gs.Spec.ApprovalRules, rules[:1])
	equal(t, "no approvals", gs.Approvals, []api.Approval(nil))

	pending := api.Approval{CallSeq: 3, Tool: "exec", Args: json.RawMessage(`{"command":"git push origin main"}`), State: api.ApprovalPending,
		Rule: "outpost[0]", OnTimeout: api.ApprovalDeny, Deadline: 5000, RequestedAt: 1000}
	_, err = s.UpdateSession(ctx(t), sess.ID, func(st store.Session, _ store.QueueEntry) (store.Mutation, error) {
		st.Approvals = append(st.Approvals, pending)
		return store.Mutation{Session: &st}, nil
	})
	must(t, "add an approval", err)
	_, err = s.UpdateSession(ctx(t), sess.ID, func(st store.Session, _ store.QueueEntry) (store.Mutation, error) {
		equal(t, "approvals fn reads", st.Approvals, []api.Approval{pending})
		st.Approvals[0].State, st.Approvals[0].By, st.Approvals[0].DecidedAt = api.ApprovalApproved, "tok_1", 2000
		return store.Mutation{Session: &st}, nil
	})
	must(t, "decide the approval", err)
	gs, err = s.GetSession(ctx(t), sess.ID)
	must(t, "get session", err)
	decided := pending
	decided.State, decided.By, decided.DecidedAt = api.ApprovalApproved, "tok_1", 2000
	equal(t, "decided approvals", gs.Approvals, []api.Approval{decided})
}
