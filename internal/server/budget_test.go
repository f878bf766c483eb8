package server

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/budget"
	"github.com/outpost-sh/outpost/internal/llm"
	"github.com/outpost-sh/outpost/internal/waitfor"
	"github.com/outpost-sh/outpost/internal/webhooks"
)

// budgetPrices prices the test model: 1000 prompt and 100 completion
// tokens (one answer of toolModel) cost 1000×3/1e6 + 100×15/1e6 = $0.0045.
var budgetPrices = map[string]budget.Price{"budget-model": {InputPerMTok: 3, OutputPerMTok: 15}}

const answerCost = 0.0045

// toolModel answers with one list_dir call, 1000 prompt and 100
// completion tokens each time; a prompt containing "just answer" gets a
// final answer instead.
type toolModel struct {
	mu sync.Mutex
	n  int
}

func (m *toolModel) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	resp := llm.Response{Usage: llm.Usage{PromptTokens: 1000, CompletionTokens: 100}, StopReason: "tool_calls",
		Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c", Name: api.ToolListDir, Arguments: json.RawMessage(`{"path":"."}`)}}}}
	if strings.Contains(req.Messages[0].Text, "just answer") {
		resp.Message = llm.Message{Role: llm.RoleAssistant, Text: "Done."}
		resp.StopReason = "stop"
	}
	return resp, nil
}

// serveLLM claims session id as acceptor and connects a fake remote,
// which answers every call until the session ends or is suspended; it
// returns the remote's connect token, the remote, and a channel that gets
// the frame (end or suspend) that stopped it, after which the remote is
// the caller's.
func serveLLM(t *testing.T, ts *testServer, id, acceptor string) (string, *fakeRemote, <-chan api.Frame) {
	t.Helper()
	claim := ts.claimFor(id, acceptor)
	r, _ := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r.expect(api.FrameWelcome)
	stopped := make(chan api.Frame, 1)
	go func() {
		for {
			f, err := r.recv()
			if err != nil {
				close(stopped)
				return
			}
			switch f.Type {
			case api.FrameCall:
				r.send(api.Frame{Type: api.FrameResult, Seq: f.Seq, OK: true, Value: json.RawMessage(`{"entries":[]}`)})
			case api.FrameEnd, api.FrameSuspend:
				stopped <- f
				return
			}
		}
	}()
	return claim.Status.ConnectToken, r, stopped
}

func waitStopped(t *testing.T, stopped <-chan api.Frame, want string) {
	t.Helper()
	select {
	case f, ok := <-stopped:
		if !ok || f.Type != want {
			t.Fatalf("the remote got %+v (open %v), want a %s frame", f, ok, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the remote never got a %s frame", want)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestSessionStoppedAtTokenLimit: an llm session reaches limits.max_tokens
// on its third answer and is suspended (the default) with a reason that
// says so, before that answer's call runs; its usage counts the tokens,
// the tool calls and the cost from the price table; a budget.reached
// event reaches a loopback receiver, signed, and the metric counts it.
func TestSessionStoppedAtTokenLimit(t *testing.T) {
	t.Parallel()
	type delivery struct {
		sig  string
		body []byte
	}
	got := make(chan delivery, 10)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- delivery{r.Header.Get("Outpost-Signature"), b}
	}))
	defer recv.Close()
	ts := startServer(t, Options{LLM: &toolModel{}, Prices: budgetPrices,
		Webhooks: WebhookOptions{AllowInternal: true, Poll: 20 * time.Millisecond}})
	ts.outpost("tok")
	var hook api.Webhook
	ts.mustDo(201, "POST", "/v1/webhooks", ts.admin, api.CreateWebhookRequest{URL: recv.URL, Events: []string{api.EventBudgetReached}}, &hook)

	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"tok","prompt":"List the files.","agent":{"kind":"llm","model":"budget-model"},
		"limits":{"max_tokens":2500}}`, &s)
	id := s.Metadata.SessionID
	token, r, stopped := serveLLM(t, ts, id, "m1")
	waitStopped(t, stopped, api.FrameSuspend)
	archive := []byte("workspace at the limit")
	if code, raw := ts.snapshotRequest("PUT", id, token, archive); code != 201 {
		t.Fatalf("PUT snapshot: %d %s", code, raw)
	}
	r.send(api.Frame{Type: api.FrameSuspended, Snapshot: &api.SnapshotInfo{Size: int64(len(archive)), SHA256: sha(archive)}})
	r.expect(api.FrameEnd)
	waitfor.True(t, "the session to be suspended", func() bool {
		ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
		return s.Status.Status == api.StatusSuspended
	})
	const want = "Token limit of 2500 reached: 3300 used (limits.max_tokens)."
	if !strings.HasPrefix(s.Status.Reason, want) {
		t.Errorf("reason %q, want it to start with %q", s.Status.Reason, want)
	}
	u := s.Status.Usage
	if u.PromptTokens != 3000 || u.CompletionTokens != 300 || u.ModelCalls != 3 || u.ToolCalls != 3 || !near(u.CostUSD, 3*answerCost) {
		t.Errorf("usage %+v, want 3000+300 tokens, 3 model and 3 tool calls, $%.4f", u, 3*answerCost)
	}
	results := 0
	for _, ev := range sessionEvents(t, ts, id) {
		if ev.Type == api.EventResult {
			results++
		}
	}
	if results != 2 {
		t.Errorf("%d call results, want 2: the third answer's call must not run past the limit", results)
	}
	select {
	case d := <-got:
		if err := webhooks.Verify(hook.Secret, d.sig, d.body, time.Now(), time.Minute); err != nil {
			t.Errorf("signature: %v", err)
		}
		var p struct {
			Event string `json:"event"`
			Data  struct {
				Session api.WebhookSession `json:"session"`
				Budget  budgetEvent        `json:"budget"`
			} `json:"data"`
		}
		if err := json.Unmarshal(d.body, &p); err != nil {
			t.Fatal(err)
		}
		if p.Event != api.EventBudgetReached || p.Data.Session.ID != id || p.Data.Budget.Kind != api.BudgetTokens ||
			p.Data.Budget.Limit != 2500 || p.Data.Budget.Used != 3300 || p.Data.Budget.OnLimit != api.OnLimitSuspend {
			t.Errorf("event %s", d.body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no budget.reached delivery")
	}
	if n := testutil.ToFloat64(ts.srv.metrics.budgetReached.WithLabelValues("tok", api.BudgetTokens)); n != 1 {
		t.Errorf("outpost_budget_reached_total{tok,tokens} = %v, want 1", n)
	}
}

// TestSessionStoppedAtToolCallLimit: an llm session with max_tool_calls 2
// and on_limit end runs its two calls and ends before a third model call.
func TestSessionStoppedAtToolCallLimit(t *testing.T) {
	t.Parallel()
	model := &toolModel{}
	ts := startServer(t, Options{LLM: model, Prices: budgetPrices})
	ts.outpost("calls")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"calls","prompt":"List the files.","agent":{"kind":"llm","model":"budget-model"},
		"limits":{"max_tool_calls":2,"on_limit":"end"}}`, &s)
	id := s.Metadata.SessionID
	_, _, stopped := serveLLM(t, ts, id, "m1")
	waitStopped(t, stopped, api.FrameEnd)
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
	const want = "Tool call limit of 2 reached: 2 made (limits.max_tool_calls)."
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailUsageLimitExceeded || s.Status.Reason != want {
		t.Errorf("status %+v, want exit, usage_limit_exceeded, %q", s.Status, want)
	}
	if u := s.Status.Usage; u.ToolCalls != 2 || u.ModelCalls != 2 || !near(u.CostUSD, 2*answerCost) {
		t.Errorf("usage %+v", u)
	}
	model.mu.Lock()
	defer model.mu.Unlock()
	if model.n != 2 {
		t.Errorf("the model was called %d times, want 2", model.n)
	}
	found := false
	for _, ev := range sessionEvents(t, ts, id) {
		found = found || (ev.Type == api.EventStatus && ev.Reason == want)
	}
	if !found {
		t.Error("the transcript does not say why the session ended")
	}
}

// TestOutpostCostCapReachedByThreeSessions: an outpost's monthly cost cap
// of $0.012 lets two sessions of $0.0045 finish; the third crosses it with
// its first answer and ends there (on_limit end) before its call runs;
// then the outpost refuses new sessions (409 budget_exceeded) and shows
// the month's usage.
func TestOutpostCostCapReachedByThreeSessions(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{LLM: &toolModel{}, Prices: budgetPrices})
	var o api.Outpost
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, `{"name":"capped","budget":{"monthly_cost_usd":0.012,"on_limit":"end"}}`, &o)
	if o.Spec.Budget == nil || o.Spec.Budget.MonthlyCostUSD != 0.012 || o.Status.BudgetUsage == nil || o.Status.BudgetUsage.CostUSD != 0 {
		t.Fatalf("new outpost's budget %+v, usage %+v", o.Spec.Budget, o.Status.BudgetUsage)
	}
	create := func(prompt string) string {
		var s api.Session
		ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"capped","prompt":"`+prompt+`","agent":{"kind":"llm","model":"budget-model"}}`, &s)
		return s.Metadata.SessionID
	}
	for i, acceptor := range []string{"m1", "m2"} {
		id := create("Please just answer.")
		_, _, stopped := serveLLM(t, ts, id, acceptor)
		waitStopped(t, stopped, api.FrameEnd)
		var s api.Session
		ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
		if s.Status.StatusDetail != api.DetailFinished {
			t.Fatalf("session %d: %+v", i+1, s.Status)
		}
	}
	id := create("List the files.")
	_, _, stopped := serveLLM(t, ts, id, "m3")
	waitStopped(t, stopped, api.FrameEnd)
	var s api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
	month := time.Now().UTC().Format("2006-01")
	want := "The outpost's monthly cost limit of $0.0120 reached: $0.0135 used in " + month + " (budget.monthly_cost_usd)."
	if s.Status.StatusDetail != api.DetailUsageLimitExceeded || s.Status.Reason != want {
		t.Errorf("third session %+v, want reason %q", s.Status, want)
	}
	req, _ := http.NewRequest("POST", ts.url+"/v1/sessions", strings.NewReader(`{"outpost":"capped","prompt":"More.","agent":{"kind":"llm"}}`))
	req.Header.Set("Authorization", "Bearer "+ts.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e api.ErrorResponse
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || e.Error.Code != api.CodeBudgetExceeded || !strings.Contains(e.Error.Message, "monthly cost limit") {
		t.Errorf("a fourth session: %d %+v", resp.StatusCode, e)
	}
	ts.mustDo(200, "GET", "/v1/outposts/capped", ts.admin, nil, &o)
	if u := o.Status.BudgetUsage; u == nil || !near(u.CostUSD, 3*answerCost) || u.Month != month || u.Reached != api.BudgetOutpostCost || u.SessionHours <= 0 {
		t.Errorf("outpost usage %+v", u)
	}
	if n := testutil.ToFloat64(ts.srv.metrics.budgetReached.WithLabelValues("capped", api.BudgetOutpostCost)); n != 1 {
		t.Errorf("outpost_budget_reached_total{capped,outpost_cost} = %v, want 1", n)
	}
	// A higher cap lets sessions in again.
	o = api.Outpost{}
	ts.mustDo(200, "PATCH", "/v1/outposts/capped", ts.admin, `{"budget":{"monthly_cost_usd":1}}`, &o)
	if o.Status.BudgetUsage == nil || o.Status.BudgetUsage.Reached != "" {
		t.Errorf("usage under the new cap %+v", o.Status.BudgetUsage)
	}
	create("Please just answer.")
}

// TestBudgetBadInput: negative limits and an unknown on_limit answer 400
// and change nothing.
func TestBudgetBadInput(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{LLM: &toolModel{}})
	ts.outpost("bad")
	for _, body := range []string{
		`{"outpost":"bad","prompt":"x","agent":{"kind":"llm"},"limits":{"max_cost_usd":-1}}`,
		`{"outpost":"bad","prompt":"x","agent":{"kind":"llm"},"limits":{"max_tool_calls":-2}}`,
		`{"outpost":"bad","prompt":"x","agent":{"kind":"llm"},"limits":{"on_limit":"pause"}}`,
		`{"outpost":"bad","agent":{"kind":"script"},"limits":{"max_tokens":-5}}`,
	} {
		if code := ts.do("POST", "/v1/sessions", ts.admin, body, nil); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", body, code)
		}
	}
	var list api.SessionList
	ts.mustDo(200, "GET", "/v1/sessions", ts.admin, nil, &list)
	if len(list.Items) != 0 {
		t.Errorf("%d sessions created by bad requests", len(list.Items))
	}
	for _, body := range []string{
		`{"name":"neg","budget":{"monthly_session_hours":-1}}`,
		`{"name":"neg","budget":{"monthly_cost_usd":10,"on_limit":"later"}}`,
	} {
		if code := ts.do("POST", "/v1/outposts", ts.admin, body, nil); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", body, code)
		}
	}
	if code := ts.do("GET", "/v1/outposts/neg", ts.admin, nil, nil); code != http.StatusNotFound {
		t.Errorf("an outpost refused for its budget exists: %d", code)
	}
	var o api.Outpost
	ts.mustDo(200, "PATCH", "/v1/outposts/bad", ts.admin, `{"budget":{"monthly_session_hours":10}}`, &o)
	for _, body := range []string{`{"budget":{"monthly_session_hours":-10}}`, `{"max_running":3,"budget":{"on_limit":"stop"}}`} {
		if code := ts.do("PATCH", "/v1/outposts/bad", ts.admin, body, nil); code != http.StatusBadRequest {
			t.Errorf("PATCH %s: %d, want 400", body, code)
		}
	}
	o = api.Outpost{}
	ts.mustDo(200, "GET", "/v1/outposts/bad", ts.admin, nil, &o)
	if o.Spec.Budget == nil || o.Spec.Budget.MonthlySessionHours != 10 || o.Spec.Budget.OnLimit != "" || o.Spec.MaxRunning != 0 {
		t.Errorf("after refused changes: budget %+v, max_running %d", o.Spec.Budget, o.Spec.MaxRunning)
	}
}
