package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestForkRefusedOverOutpostBudget: a fork makes new sessions, so an
// outpost over its monthly budget refuses it (409 budget_exceeded) as it
// refuses POST /v1/sessions, and no session is made.
func TestForkRefusedOverOutpostBudget(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("forkcap")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"forkcap","agent":{"kind":"script"}}`, &s)
	id := s.Metadata.SessionID
	if _, err := ts.srv.store.UpdateSession(context.Background(), id, func(sess store.Session, _ store.QueueEntry) (store.Mutation, error) {
		sess.Usage.CostUSD = 5
		return store.Mutation{Session: &sess}, nil
	}); err != nil {
		t.Fatal(err)
	}
	ts.mustDo(200, "PATCH", "/v1/outposts/forkcap", ts.admin, `{"budget":{"monthly_cost_usd":1}}`, nil)

	req, _ := http.NewRequest("POST", ts.url+"/v1/sessions/"+id+"/fork", strings.NewReader(`{"count":2}`))
	req.Header.Set("Authorization", "Bearer "+ts.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e api.ErrorResponse
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || e.Error.Code != api.CodeBudgetExceeded || !strings.Contains(e.Error.Message, "monthly cost limit") {
		t.Errorf("fork on an outpost over its budget: %d %+v", resp.StatusCode, e)
	}
	var list api.SessionList
	ts.mustDo(200, "GET", "/v1/sessions?forked_from="+id, ts.admin, nil, &list)
	if len(list.Items) != 0 {
		t.Errorf("%d forks made over the budget", len(list.Items))
	}
}

// TestBudgetSweepLeavesAnotherReplicasSession: the budget sweep of a
// replica that does not hold a session's remote leaves the session to its
// owner, which can suspend it; it does not end it for want of a remote.
// A running session of its own it does stop, and one still waiting for a
// machine (never started) it leaves alone.
func TestBudgetSweepLeavesAnotherReplicasSession(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("swept")
	ctx := context.Background()
	started := time.Now().Add(-time.Hour)
	running := func(owner string) string {
		var s api.Session
		ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"swept","agent":{"kind":"script"}}`, &s)
		id := s.Metadata.SessionID
		if _, err := ts.srv.store.UpdateSession(ctx, id, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
			sess.Status, sess.StartedAt = api.StatusRunning, &started
			e.Owner = owner
			return store.Mutation{Session: &sess, Entry: &e}, nil
		}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	id, mine := running("another-replica"), running(ts.srv.opts.ReplicaID)
	pending := ts.session("swept").Metadata.SessionID
	ts.mustDo(200, "PATCH", "/v1/outposts/swept", ts.admin, `{"budget":{"monthly_session_hours":0.5}}`, nil)
	ts.srv.sweepBudgetsOnce(ctx)
	// A stop the sweep began runs in the background until it is done.
	waitfor.True(t, "the sweep's stops done", func() bool {
		_, busy := ts.srv.budgetStops.Load(id)
		_, busyMine := ts.srv.budgetStops.Load(mine)
		return !busy && !busyMine
	})
	status := func(id string) store.Session {
		got, err := ts.srv.store.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := status(id); got.Status != api.StatusRunning {
		t.Errorf("a session another replica owns was stopped by this one's sweep: %s %s %q", got.Status, got.StatusDetail, got.Reason)
	}
	if got := status(mine); got.Status == api.StatusRunning {
		t.Errorf("this replica's running session over the outpost's budget was not stopped: %s %s %q", got.Status, got.StatusDetail, got.Reason)
	}
	if got := status(pending); got.Status != api.StatusNew {
		t.Errorf("a session waiting for a machine was touched by the sweep: %s %s %q", got.Status, got.StatusDetail, got.Reason)
	}
	if n := testutil.ToFloat64(ts.srv.metrics.budgetReached.WithLabelValues("swept", api.BudgetOutpostHours)); n != 1 {
		t.Errorf("outpost_budget_reached_total{swept,outpost_hours} = %v, want 1 (this replica's session)", n)
	}
}

// TestResumeRefusedOverOutpostBudget: a suspended session of an outpost
// over its budget is not resumed, by the resume route or by a message
// (409 budget_exceeded): it would only be stopped again once it ran.
func TestResumeRefusedOverOutpostBudget(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{LLM: &toolModel{}})
	ts.outpost("resumecap")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"resumecap","prompt":"x","agent":{"kind":"llm"}}`, &s)
	id := s.Metadata.SessionID
	ctx := context.Background()
	if _, err := ts.srv.store.UpdateSession(ctx, id, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		sess.Status, sess.Usage.CostUSD = api.StatusSuspended, 5
		e.SessionStatus = api.QueueSessionSuspended
		return store.Mutation{Session: &sess, Entry: &e}, nil
	}); err != nil {
		t.Fatal(err)
	}
	ts.mustDo(200, "PATCH", "/v1/outposts/resumecap", ts.admin, `{"budget":{"monthly_cost_usd":1}}`, nil)
	for _, tc := range []struct{ path, body string }{
		{"/v1/sessions/" + id + "/resume", `{}`},
		{"/v1/sessions/" + id + "/messages", `{"text":"go on"}`},
	} {
		req, _ := http.NewRequest("POST", ts.url+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+ts.admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e api.ErrorResponse
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusConflict || e.Error.Code != api.CodeBudgetExceeded || !strings.Contains(e.Error.Message, "cannot be resumed") {
			t.Errorf("POST %s: %d %+v", tc.path, resp.StatusCode, e)
		}
	}
	got, err := ts.srv.store.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != api.StatusSuspended {
		t.Errorf("session resumed over the budget: %s", got.Status)
	}
}

// TestOutpostBudgetAudited: the audit entries of an outpost's create and
// update carry the budget given, so who raised or lifted a cap is on the
// log.
func TestOutpostBudgetAudited(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	n := len(ts.auditLog())
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, `{"name":"audited","budget":{"monthly_cost_usd":5}}`, nil)
	ts.mustDo(200, "PATCH", "/v1/outposts/audited", ts.admin, `{"budget":{"monthly_cost_usd":500,"on_limit":"end"}}`, nil)
	got := ts.auditSince(n, "outpost.create", "outpost.update")
	for i, want := range []api.OutpostBudget{{MonthlyCostUSD: 5}, {MonthlyCostUSD: 500, OnLimit: api.OnLimitEnd}} {
		var data struct {
			Budget *api.OutpostBudget `json:"budget"`
		}
		if err := json.Unmarshal(got[i].Data, &data); err != nil || data.Budget == nil || *data.Budget != want {
			t.Errorf("%s entry's budget %+v (%v), want %+v: %s", got[i].Action, data.Budget, err, want, got[i].Data)
		}
	}
}
