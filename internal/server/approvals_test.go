package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// pushRule holds an exec that pushes to main.
var pushRule = api.ApprovalRule{Action: api.ApprovalAsk, Tool: "exec", Match: map[string]string{"command": `git push .* main`},
	Reason: "Pushes to main need a person."}

// approvalSession creates a script session of outpost whose steps are an
// exec of command and a list_dir, going on after a failed step, with the
// session's own rules and a secret the command may hold.
func approvalSession(ts *testServer, token, outpost, command string, rules ...api.ApprovalRule) string {
	ts.t.Helper()
	stop := false
	req := api.CreateSessionRequest{Outpost: outpost, Title: "pushes", Secrets: map[string]string{"PUSH_TOKEN": "hunter2-secret"},
		Agent: api.Agent{Kind: api.AgentScript, StopOnError: &stop, Steps: []api.Step{
			{Tool: api.ToolExec, Args: rawJSON(ts.t, api.ExecArgs{Command: command})},
			{Tool: api.ToolListDir, Args: json.RawMessage(`{}`)},
		}},
		ApprovalRules: rules}
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", token, req, &s)
	return s.Metadata.SessionID
}

func rawJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// approvalEvents are the approval events of session id.
func approvalEvents(ts *testServer, id string) []api.Event {
	var out []api.Event
	for _, ev := range events(ts, id) {
		if ev.Type == api.EventApproval && ev.Approval != nil {
			out = append(out, ev)
		}
	}
	return out
}

// waitHeld waits for call seq of session id to wait for approval, and
// checks the session says so.
func waitHeld(ts *testServer, id string, seq int64) api.Approval {
	ts.t.Helper()
	var l api.ApprovalList
	waitfor.True(ts.t, "the held call", func() bool {
		ts.mustDo(200, "GET", "/v1/sessions/"+id+"/approvals?state=pending", ts.admin, nil, &l)
		return len(l.Items) > 0
	})
	if len(l.Items) != 1 || l.Items[0].CallSeq != seq || l.Items[0].State != api.ApprovalPending {
		ts.t.Fatalf("pending approvals %+v, want call %d", l.Items, seq)
	}
	var sess api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &sess)
	if sess.Status.StatusDetail != api.DetailWaitingForApproval {
		ts.t.Fatalf("status of a session with a held call: %+v", sess.Status)
	}
	return l.Items[0]
}

// resultEvent is the result event of call seq of session id.
func resultEvent(ts *testServer, id string, seq int64) (api.Event, bool) {
	for _, ev := range events(ts, id) {
		if ev.Type == api.EventResult && ev.CallSeq == seq {
			return ev, true
		}
	}
	return api.Event{}, false
}

// An outpost's ask rule holds the matching exec before the machine sees
// it; the pending approval shows the call with secrets redacted; an
// approval lets it run, and a second decision is refused.
func TestApprovalApprove(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "guarded", ApprovalRules: []api.ApprovalRule{pushRule}}, nil)
	ts.outpost("elsewhere")
	writer := ts.token([]string{api.ScopeSessionsWrite}, "")
	reader := ts.token([]string{api.ScopeSessionsRead}, "")
	limited := ts.token([]string{api.ScopeSessionsWrite}, "elsewhere")
	id := approvalSession(ts, writer, "guarded", "git push https://x:hunter2-secret@example.test/r.git main")
	r := connect(ts, id)
	held := waitHeld(ts, id, 1)
	if strings.Contains(string(held.Args), "hunter2-secret") || !strings.Contains(string(held.Args), "git push") ||
		held.Rule != "outpost[0]" || held.RuleReason != pushRule.Reason || held.OnTimeout != api.ApprovalDeny || held.Deadline == 0 {
		t.Fatalf("held call %+v", held)
	}
	evs := approvalEvents(ts, id)
	if len(evs) != 1 || evs[0].CallSeq != 1 || evs[0].Approval.State != api.ApprovalPending || strings.Contains(string(evs[0].Args), "hunter2-secret") {
		t.Fatalf("approval events %+v", evs)
	}

	base := "/v1/sessions/" + id + "/calls/"
	ts.mustDo(403, "POST", base+"1/approve", reader, nil, nil)
	ts.mustDo(404, "POST", base+"1/approve", limited, nil, nil)
	ts.mustDo(404, "POST", base+"2/approve", writer, nil, nil)
	ts.mustDo(404, "POST", base+"x/deny", writer, nil, nil)
	ts.mustDo(400, "POST", base+"1/deny", writer, api.ApprovalDecisionRequest{Reason: strings.Repeat("x", api.MaxApprovalReason+1)}, nil)
	ts.mustDo(400, "POST", base+"1/deny", writer, `{"reasn":"typo"}`, nil)
	if n := len(approvalEvents(ts, id)); n != 1 {
		t.Fatalf("refused decisions left %d approval events", n)
	}

	var decided api.Approval
	ts.mustDo(200, "POST", base+"1/approve", writer, api.ApprovalDecisionRequest{Reason: "release day"}, &decided)
	if decided.State != api.ApprovalApproved || decided.By == "" || decided.Reason != "release day" || decided.DecidedAt == 0 {
		t.Fatalf("decision %+v", decided)
	}
	ts.mustDo(409, "POST", base+"1/approve", writer, nil, nil)
	ts.mustDo(409, "POST", base+"1/deny", writer, nil, nil)

	call := r.expect(api.FrameCall)
	if call.Seq != 1 || call.Tool != api.ToolExec || !strings.Contains(string(call.Args), "hunter2-secret") {
		t.Fatalf("first call the machine got: %+v", call)
	}
	var sess api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, writer, nil, &sess)
	if sess.Status.StatusDetail == api.DetailWaitingForApproval {
		t.Fatalf("status after the approval: %+v", sess.Status)
	}
	r.send(api.Frame{Type: api.FrameResult, Seq: 1, OK: true, Value: json.RawMessage(`{"exit_code":0}`)})
	r.expect(api.FrameAck)
	if call := r.expect(api.FrameCall); call.Seq != 2 {
		t.Fatalf("second call: %+v", call)
	}
	evs = approvalEvents(ts, id)
	if len(evs) != 2 || evs[1].Approval.State != api.ApprovalApproved || evs[1].Approval.By != decided.By || evs[1].Approval.Reason != "release day" {
		t.Fatalf("approval events after the decision %+v", evs)
	}
}

// A denial returns a tool error with the person's reason: the machine
// never sees the call. A deny rule refuses at once, and a session's own
// allow rule does not lift its outpost's ask.
func TestApprovalDeny(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "guarded", ApprovalRules: []api.ApprovalRule{pushRule}}, nil)
	id := approvalSession(ts, ts.admin, "guarded", "git push origin main",
		api.ApprovalRule{Action: api.ApprovalAllow, Tool: "*"},
		api.ApprovalRule{Action: api.ApprovalDeny, Tool: "list_*", Reason: "This session must not look around."})
	r := connect(ts, id)
	waitHeld(ts, id, 1)
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/calls/1/deny", ts.admin, api.ApprovalDecisionRequest{Reason: "not on a Friday"}, nil)
	waitfor.True(t, "the session to end", func() bool {
		var sess api.Session
		ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &sess)
		return api.IsFinal(sess.Status.Status)
	})
	for seq, want := range map[int64]string{1: "not on a Friday", 2: "This session must not look around."} {
		ev, ok := resultEvent(ts, id, seq)
		if !ok || ev.OK == nil || *ev.OK || !strings.Contains(ev.Error, want) {
			t.Errorf("result of call %d: %+v (found %v), want a tool error saying %q", seq, ev, ok, want)
		}
	}
	evs := approvalEvents(ts, id)
	if len(evs) != 3 || evs[1].Approval.State != api.ApprovalDenied || evs[1].Approval.Reason != "not on a Friday" ||
		evs[2].CallSeq != 2 || evs[2].Approval.State != api.ApprovalDenied || evs[2].Approval.By != "rule" || evs[2].Approval.Rule != "session[1]" {
		t.Fatalf("approval events %+v", evs)
	}
	// The machine got no call: the next frame is the session's end.
	if f := r.expect(api.FrameEnd); f.Type != api.FrameEnd {
		t.Fatalf("frame %+v", f)
	}
	ts.mustDo(409, "POST", "/v1/sessions/"+id+"/calls/1/approve", ts.admin, nil, nil)
}

// Nobody answers: the rule's on_timeout decides, allow here.
func TestApprovalTimeout(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("o")
	rule := pushRule
	rule.TimeoutS, rule.OnTimeout = 1, api.ApprovalAllow
	id := approvalSession(ts, ts.admin, "o", "git push origin main", rule)
	r := connect(ts, id)
	waitHeld(ts, id, 1)
	if call := r.expect(api.FrameCall); call.Seq != 1 {
		t.Fatalf("call after the timeout: %+v", call)
	}
	evs := approvalEvents(ts, id)
	if len(evs) != 2 || evs[1].Approval.State != api.ApprovalTimedOut || evs[1].Approval.By != "timeout" {
		t.Fatalf("approval events %+v", evs)
	}
	ts.mustDo(409, "POST", "/v1/sessions/"+id+"/calls/1/deny", ts.admin, nil, nil)
}

// A timeout that denies is a tool error saying so.
func TestApprovalTimeoutDenies(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("o")
	rule := pushRule
	rule.TimeoutS = 1
	id := approvalSession(ts, ts.admin, "o", "git push origin main", rule)
	r := connect(ts, id)
	if call := r.expect(api.FrameCall); call.Seq != 2 {
		t.Fatalf("first call the machine got: %+v", call)
	}
	ev, ok := resultEvent(ts, id, 1)
	if !ok || ev.OK == nil || *ev.OK || !strings.Contains(ev.Error, "in time") {
		t.Fatalf("result of the timed out call: %+v", ev)
	}
}

// A held call survives a restart of the server: it is approved while no
// runner waits, and the next machine runs it.
func TestApprovalAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts, stop := startStoppable(t, Options{DataDir: dir})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "guarded", ApprovalRules: []api.ApprovalRule{pushRule}}, nil)
	id := approvalSession(ts, ts.admin, "guarded", "git push origin main")
	r := connect(ts, id)
	waitHeld(ts, id, 1)
	r.close()
	stop()

	ts2, _ := startStoppable(t, Options{DataDir: dir})
	ts2.admin = ts.admin
	waitHeld(ts2, id, 1)
	ts2.mustDo(200, "POST", "/v1/sessions/"+id+"/calls/1/approve", ts2.admin, nil, nil)
	r2 := connect(ts2, id)
	if call := r2.expect(api.FrameCall); call.Seq != 1 || call.Tool != api.ToolExec {
		t.Fatalf("first call of the next machine: %+v", call)
	}
	if evs := approvalEvents(ts2, id); len(evs) != 2 {
		t.Fatalf("approval events %+v, want one pending and one decision", evs)
	}
}

// Decisions racing for one call: exactly one wins.
func TestApprovalDecidedOnce(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("o")
	id := approvalSession(ts, ts.admin, "o", "git push origin main", pushRule)
	connect(ts, id)
	waitHeld(ts, id, 1)
	codes := make(chan int, 8)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			verb := "approve"
			if i%2 == 1 {
				verb = "deny"
			}
			codes <- ts.do("POST", "/v1/sessions/"+id+"/calls/1/"+verb, ts.admin, nil, nil)
		})
	}
	wg.Wait()
	close(codes)
	won := 0
	for c := range codes {
		switch c {
		case 200:
			won++
		case 409:
		default:
			t.Errorf("a decision got %d", c)
		}
	}
	if won != 1 {
		t.Fatalf("%d decisions won, want 1", won)
	}
	if evs := approvalEvents(ts, id); len(evs) != 2 {
		t.Fatalf("approval events %+v", evs)
	}
}

// Bad rules are refused with the rule's index and field, and change
// nothing; PATCH replaces an outpost's rules and [] removes them.
func TestApprovalRulesValidation(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	for _, tc := range []struct{ body, want string }{
		{`{"name":"a","approval_rules":[{"action":"ask","tool":"exec"},{"action":"ask","tool":"exec","match":{"command":"(x"}}]}`, "approval_rules[1].match.command"},
		{`{"name":"a","approval_rules":[{"action":"maybe","tool":"exec"}]}`, "approval_rules[0].action"},
		{`{"name":"a","approval_rules":[{"action":"deny","tool":"[x"}]}`, "approval_rules[0].tool"},
		{`{"name":"a","approval_rules":[{"action":"ask","tool":"x","on_timeout":"ask"}]}`, "approval_rules[0].on_timeout"},
		{`{"name":"a","approval_rules":[{"action":"deny","tool":"exce"}]}`, `approval_rules[0].tool "exce" matches no tool`},
		{`{"name":"a","approval_rules":[{"action":"ask","tool":"network_access_request"}]}`, "which approval rules do not cover"},
	} {
		if msg := errorMessage(ts, "POST", "/v1/outposts", tc.body); !strings.Contains(msg, tc.want) {
			t.Errorf("%s: message %q, want it to name %s", tc.body, msg, tc.want)
		}
	}
	ts.mustDo(404, "GET", "/v1/outposts/a", ts.admin, nil, nil)
	ts.outpost("o")
	if msg := errorMessage(ts, "POST", "/v1/sessions", `{"outpost":"o","agent":{"kind":"script"},"approval_rules":[{"action":"deny","tool":"exec","timeout_s":3}]}`); !strings.Contains(msg, "approval_rules[0].timeout_s") {
		t.Errorf("session rules: %q", msg)
	}
	if msg := errorMessage(ts, "PATCH", "/v1/outposts/o", `{"max_running":3,"approval_rules":[{"action":"ask"}]}`); !strings.Contains(msg, "approval_rules[0].tool") {
		t.Errorf("PATCH rules: %q", msg)
	}
	var o api.Outpost
	ts.mustDo(200, "GET", "/v1/outposts/o", ts.admin, nil, &o)
	if o.Spec.MaxRunning != 0 || o.Spec.ApprovalRules != nil {
		t.Fatalf("a refused PATCH changed the outpost: %+v", o.Spec)
	}
	ts.mustDo(200, "PATCH", "/v1/outposts/o", ts.admin, api.UpdateOutpostRequest{ApprovalRules: &[]api.ApprovalRule{pushRule}}, &o)
	if len(o.Spec.ApprovalRules) != 1 || o.Spec.ApprovalRules[0].TimeoutS != api.DefaultApprovalTimeoutS {
		t.Fatalf("rules after PATCH: %+v", o.Spec.ApprovalRules)
	}
	ts.mustDo(200, "PATCH", "/v1/outposts/o", ts.admin, `{"max_running":2}`, &o)
	if len(o.Spec.ApprovalRules) != 1 {
		t.Fatalf("a PATCH without rules changed them: %+v", o.Spec.ApprovalRules)
	}
	o = api.Outpost{}
	ts.mustDo(200, "PATCH", "/v1/outposts/o", ts.admin, `{"approval_rules":[]}`, &o)
	if o.Spec.ApprovalRules != nil {
		t.Fatalf("rules after PATCH []: %+v", o.Spec.ApprovalRules)
	}
}

// errorMessage is the error message of a request that must answer 400.
func errorMessage(ts *testServer, method, path, body string) string {
	ts.t.Helper()
	req, err := http.NewRequest(method, ts.url+path, strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+ts.admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.ErrorResponse
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != 400 {
		ts.t.Fatalf("%s %s: status %d, %v", method, path, resp.StatusCode, err)
	}
	return e.Error.Message
}

// A deny rule added to the outpost while a call waits refuses it even
// after a person approves it: the machine never sees the call, whose
// error names the rule.
func TestApprovalDenyRuleAddedWhileHeld(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "guarded", ApprovalRules: []api.ApprovalRule{pushRule}}, nil)
	id := approvalSession(ts, ts.admin, "guarded", "git push origin main")
	r := connect(ts, id)
	waitHeld(ts, id, 1)
	deny := api.ApprovalRule{Action: api.ApprovalDeny, Tool: "exec", Match: map[string]string{"command": `\bmain\b`}, Reason: "main is frozen"}
	rules := []api.ApprovalRule{pushRule, deny}
	ts.mustDo(200, "PATCH", "/v1/outposts/guarded", ts.admin, api.UpdateOutpostRequest{ApprovalRules: &rules}, nil)
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/calls/1/approve", ts.admin, nil, nil)

	if call := r.expect(api.FrameCall); call.Seq != 2 || call.Tool != api.ToolListDir {
		t.Fatalf("the machine got %+v, want only the second call", call)
	}
	res, ok := resultEvent(ts, id, 1)
	if !ok || res.OK == nil || *res.OK || !strings.Contains(res.Error, "outpost[1]") || !strings.Contains(res.Error, "main is frozen") {
		t.Fatalf("result of the refused call: %+v", res)
	}
	evs := approvalEvents(ts, id)
	last := evs[len(evs)-1].Approval
	if last.State != api.ApprovalDenied || last.By != "rule" || last.Rule != "outpost[1]" {
		t.Fatalf("last approval event %+v", last)
	}
}

// The clones of a session's repos, which its creator asked for, pass
// rules that hold every call; the agent's own calls do not.
func TestApprovalClonesPass(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	all := api.ApprovalRule{Action: api.ApprovalAsk, Tool: "*"}
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "guarded", ApprovalRules: []api.ApprovalRule{all}}, nil)
	req := api.CreateSessionRequest{Outpost: "guarded", Repos: []api.Repo{{URL: "https://example.test/r.git", Name: "r"}},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolListDir, Args: json.RawMessage(`{}`)}}}}
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, req, &s)
	id := s.Metadata.SessionID
	r := connect(ts, id)
	call := r.expect(api.FrameCall)
	if call.Seq != 1 || call.Tool != api.ToolGitClone {
		t.Fatalf("first call: %+v", call)
	}
	r.send(api.Frame{Type: api.FrameResult, Seq: 1, OK: true, Value: json.RawMessage(`{}`)})
	r.expect(api.FrameAck)
	waitHeld(ts, id, 2)
}
