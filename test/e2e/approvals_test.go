//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// Approval rules end to end: a real server, a real worker whose remote
// runs each call as a shell command, and commands that leave a marker
// file, so the file itself says whether a call reached the machine.

// heldFor is how long a test watches a held call's marker stay absent:
// long enough for a call that slipped through to have run on a worker
// that runs the calls before and after it within milliseconds.
const heldFor = 2 * time.Second

// approvalOutpost creates outpost name with rules, set through the CLI as
// an operator would, and returns a machine token for its worker.
func approvalOutpost(t *testing.T, c *cluster, name string, rules []api.ApprovalRule) string {
	t.Helper()
	token := setupOutpost(t, c, name)
	b, err := json.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "rules.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, c.env(c.admin), "outposts", "update", name, "--approval-rules", file)
	var o api.Outpost
	if code := c.api("GET", "/v1/outposts/"+name, c.admin, nil, &o); code != 200 || len(o.Spec.ApprovalRules) != len(rules) {
		t.Fatalf("outpost %s after setting its rules (%d): %+v", name, code, o.Spec.ApprovalRules)
	}
	return token
}

// touch is a command that creates the marker file path and says so.
func touch(path string) string {
	return fmt.Sprintf("touch %s && echo made %s", path, filepath.Base(path))
}

// waitHeldCall waits until call seq of session id waits for approval, and
// returns it as `outpost sessions approvals` lists it.
func waitHeldCall(t *testing.T, c *cluster, id string, seq int64) api.Approval {
	t.Helper()
	waitfor.Within(t, 60*time.Second, fmt.Sprintf("call %d of %s to wait for approval", seq, id), func() bool {
		var l api.ApprovalList
		c.api("GET", "/v1/sessions/"+id+"/approvals?state=pending", c.admin, nil, &l)
		return len(l.Items) > 0 && l.Items[len(l.Items)-1].CallSeq == seq
	})
	var l api.ApprovalList
	if err := json.Unmarshal([]byte(run(t, c.env(c.admin), "sessions", "approvals", id, "-o", "json")), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || l.Items[0].CallSeq != seq || l.Items[0].State != api.ApprovalPending {
		t.Fatalf("sessions approvals lists %+v, want call %d pending", l.Items, seq)
	}
	if s := c.session(id); s.Status.StatusDetail != api.DetailWaitingForApproval {
		t.Fatalf("a session with a held call: %+v", s.Status)
	}
	return l.Items[0]
}

// staysAbsent checks, for the whole of heldFor, that path does not exist:
// the held call has not run.
func staysAbsent(t *testing.T, path string) {
	t.Helper()
	for end := time.Now().Add(heldFor); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			t.Fatalf("%s exists: a held call reached the machine", path)
		}
	}
}

// waitExists waits for the marker file path.
func waitExists(t *testing.T, path string) {
	t.Helper()
	waitfor.Within(t, 60*time.Second, filepath.Base(path)+" to be made", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}

// absent fails the test when the marker file path exists.
func absent(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		t.Errorf("%s exists: a refused call reached the machine", path)
	}
}

// callResult is the result event of call seq of session id.
func callResult(t *testing.T, c *cluster, id string, seq int64) api.Event {
	t.Helper()
	var found []api.Event
	for _, ev := range c.events(id) {
		if ev.Type == api.EventResult && ev.CallSeq == seq {
			found = append(found, ev)
		}
	}
	if len(found) != 1 {
		t.Fatalf("session %s has %d results of call %d, want 1: %+v", id, len(found), seq, found)
	}
	return found[0]
}

// refused checks that call seq of session id was answered with a tool
// error saying want.
func refused(t *testing.T, c *cluster, id string, seq int64, want string) {
	t.Helper()
	ev := callResult(t, c, id, seq)
	if ev.OK == nil || *ev.OK || !strings.Contains(ev.Error, want) {
		t.Errorf("result of call %d: ok=%v error %q, want a tool error saying %q", seq, ev.OK, ev.Error, want)
	}
}

// succeeded checks that call seq of session id ran and succeeded.
func succeeded(t *testing.T, c *cluster, id string, seq int64) {
	t.Helper()
	if ev := callResult(t, c, id, seq); ev.OK == nil || !*ev.OK {
		t.Errorf("result of call %d: ok=%v error %q, want success", seq, ev.OK, ev.Error)
	}
}

// approvalTrail is each approval event of call seq of session id, as
// "state by rule".
func approvalTrail(c *cluster, id string, seq int64) []string {
	var out []string
	for _, ev := range c.events(id) {
		if a := ev.Approval; ev.Type == api.EventApproval && a != nil && a.CallSeq == seq {
			by := a.By
			if a.State != api.ApprovalPending && by != approvalByRule && by != approvalByTimeout {
				by = "person"
			}
			out = append(out, strings.Join(strings.Fields(a.State+" "+by+" "+a.Rule), " "))
		}
	}
	return out
}

// countEvents counts the events of type typ of session id.
func countEvents(c *cluster, id, typ string) int {
	n := 0
	for _, ev := range c.events(id) {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// Who decided, as approval events name a rule's and a timeout's decision.
const (
	approvalByRule    = "rule"
	approvalByTimeout = "timeout"
)

func checkTrail(t *testing.T, c *cluster, id string, seq int64, want ...string) {
	t.Helper()
	if got := approvalTrail(c, id, seq); strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("approval events of call %d: %q, want %q", seq, got, want)
	}
}

// TestApprovalScriptMarkers runs a script session on a real worker under
// an outpost's rules: an allowed call runs, an asked one does not reach
// the machine while it waits and runs once `outpost sessions approve`
// approves it, one that `outpost sessions deny --reason` denies never
// runs and the agent gets the reason, and one a deny rule matches is
// refused at once.
func TestApprovalScriptMarkers(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := approvalOutpost(t, c, "guarded", []api.ApprovalRule{
		{Action: api.ApprovalDeny, Tool: "exec", Match: map[string]string{"command": `rm -rf /`}, Reason: "Never wipe a disk."},
		{Action: api.ApprovalAsk, Tool: "exec", Match: map[string]string{"command": `marker-(approve|deny)`}, Reason: "Markers need a person."},
	})
	startWorker(t, c, "guarded", token)
	dir := t.TempDir()
	allowed, approved, denied, wiped := filepath.Join(dir, "allowed"), filepath.Join(dir, "marker-approve"),
		filepath.Join(dir, "marker-deny"), filepath.Join(dir, "wiped")
	stop := false
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "guarded", Title: "markers", Agent: api.Agent{Kind: api.AgentScript, StopOnError: &stop,
		Steps: []api.Step{
			execStep(touch(allowed)),
			execStep(touch(approved)),
			execStep(touch(denied)),
			execStep("rm -rf /nonexistent-outpost-e2e && " + touch(wiped)),
			execStep("echo last"),
		}}})

	held := waitHeldCall(t, c, id, 2)
	if _, err := os.Stat(allowed); err != nil {
		t.Fatalf("the allowed call before the held one did not run: %v", err)
	}
	if held.Tool != api.ToolExec || held.Rule != "outpost[1]" || held.RuleReason != "Markers need a person." || !strings.Contains(string(held.Args), "marker-approve") {
		t.Fatalf("held call %+v", held)
	}
	staysAbsent(t, approved)
	out := run(t, c.env(c.admin), "sessions", "approve", id, "2", "--reason", "looks fine")
	if !strings.Contains(out, "Approved call 2 (exec)") {
		t.Errorf("sessions approve printed %q", out)
	}
	waitExists(t, approved)

	waitHeldCall(t, c, id, 3)
	staysAbsent(t, denied)
	out = run(t, c.env(c.admin), "sessions", "deny", id, "3", "--reason", "no third marker")
	if !strings.Contains(out, "Denied call 3 (exec)") {
		t.Errorf("sessions deny printed %q", out)
	}
	// A decided call cannot be decided again.
	if msg := runFail(t, c.env(c.admin), "sessions", "approve", id, "3"); !strings.Contains(msg, "decided already") {
		t.Errorf("approving a denied call: %q", msg)
	}

	// A refused call is a failed step; the script goes on past it.
	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusError || !strings.Contains(s.Status.Reason, "2 of 5 steps failed") {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	absent(t, denied)
	absent(t, wiped)
	succeeded(t, c, id, 1)
	succeeded(t, c, id, 2)
	refused(t, c, id, 3, "A person denied this call: no third marker")
	refused(t, c, id, 4, "Never wipe a disk")
	succeeded(t, c, id, 5)
	checkTrail(t, c, id, 1)
	checkTrail(t, c, id, 2, "pending outpost[1]", "approved person outpost[1]")
	checkTrail(t, c, id, 3, "pending outpost[1]", "denied person outpost[1]")
	checkTrail(t, c, id, 4, "denied rule outpost[0]")
}

// TestApprovalLLMMarkers: a model's calls go through the same rules. The
// model gets a denial's reason as its tool result, and a deny rule's; an
// approved call runs once the API approves it, not before.
func TestApprovalLLMMarkers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	approved, denied, wiped := filepath.Join(dir, "marker-approve"), filepath.Join(dir, "marker-deny"), filepath.Join(dir, "wiped")
	cmd := func(s string) string { b, _ := json.Marshal(api.ExecArgs{Command: s}); return string(b) }
	var sawDenied, sawApproved, sawWiped map[string]any
	fake := newFakeOpenAI(t,
		func(req map[string]any) map[string]any { return toolCall("c1", "exec", cmd(touch(denied))) },
		func(req map[string]any) map[string]any {
			sawDenied = lastMessage(req)
			return toolCall("c2", "exec", cmd(touch(approved)))
		},
		func(req map[string]any) map[string]any {
			sawApproved = lastMessage(req)
			return toolCall("c3", "exec", cmd("rm -rf /nonexistent-outpost-e2e && "+touch(wiped)))
		},
		func(req map[string]any) map[string]any {
			sawWiped = lastMessage(req)
			return say("Done.")
		},
	)
	c := startClusterEnv(t, []string{"OUTPOST_LLM_PROVIDER=openai", "OUTPOST_LLM_BASE_URL=" + fake.srv.URL + "/v1", "OUTPOST_LLM_MODEL=m"})
	token := approvalOutpost(t, c, "guarded-llm", []api.ApprovalRule{
		{Action: api.ApprovalDeny, Tool: "exec", Match: map[string]string{"command": `rm -rf /`}, Reason: "Never wipe a disk."},
		{Action: api.ApprovalAsk, Tool: "exec", Match: map[string]string{"command": `marker-`}, Reason: "Markers need a person."},
	})
	startWorker(t, c, "guarded-llm", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "guarded-llm", Prompt: "make markers", Agent: api.Agent{Kind: api.AgentLLM}})

	waitHeldCall(t, c, id, 1)
	staysAbsent(t, denied)
	if n := len(fake.requests()); n != 1 {
		t.Fatalf("the model was asked %d times while its call waited, want 1", n)
	}
	run(t, c.env(c.admin), "sessions", "deny", id, "1", "--reason", "no markers from models")

	waitHeldCall(t, c, id, 2)
	staysAbsent(t, approved)
	var decided api.Approval
	if code := c.api("POST", "/v1/sessions/"+id+"/calls/2/approve", c.admin, api.ApprovalDecisionRequest{Reason: "this one is fine"}, &decided); code != 200 {
		t.Fatalf("approve: %d", code)
	}
	waitExists(t, approved)

	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	absent(t, denied)
	absent(t, wiped)
	for _, tc := range []struct {
		name string
		msg  map[string]any
		want string
	}{
		{"denied", sawDenied, "A person denied this call: no markers from models"},
		{"approved", sawApproved, "made marker-approve"},
		{"deny rule", sawWiped, "Approval rule outpost[0] denies this call: Never wipe a disk"},
	} {
		if tc.msg["role"] != "tool" || !strings.Contains(fmt.Sprint(tc.msg["content"]), tc.want) {
			t.Errorf("the model got %v for the %s call, want a tool result saying %q", tc.msg, tc.name, tc.want)
		}
	}
	refused(t, c, id, 1, "no markers from models")
	succeeded(t, c, id, 2)
	refused(t, c, id, 3, "Never wipe a disk")
	checkTrail(t, c, id, 1, "pending outpost[1]", "denied person outpost[1]")
	checkTrail(t, c, id, 2, "pending outpost[1]", "approved person outpost[1]")
	checkTrail(t, c, id, 3, "denied rule outpost[0]")
}

// TestApprovalTimeouts: nobody answers. A session's own ask rule that
// denies on timeout answers the agent with a tool error and the call
// never runs; one that allows on timeout lets it run after the wait.
func TestApprovalTimeouts(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "slow")
	startWorker(t, c, "slow", token)
	dir := t.TempDir()
	deniedM, allowedM := filepath.Join(dir, "marker-deny"), filepath.Join(dir, "marker-allow")
	stop := false
	start := time.Now()
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "slow", Title: "timeouts",
		Agent: api.Agent{Kind: api.AgentScript, StopOnError: &stop, Steps: []api.Step{execStep(touch(deniedM)), execStep(touch(allowedM))}},
		ApprovalRules: []api.ApprovalRule{
			{Action: api.ApprovalAsk, Tool: "exec", Match: map[string]string{"command": `marker-deny`}, TimeoutS: 1, OnTimeout: api.ApprovalDeny, Reason: "Quick or never."},
			{Action: api.ApprovalAsk, Tool: "exec", Match: map[string]string{"command": `marker-allow`}, TimeoutS: 2, OnTimeout: api.ApprovalAllow},
		}})
	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusError || !strings.Contains(s.Status.Reason, "1 of 2 steps failed") {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("the session ended %s after it was created; its calls should have waited 1 s and 2 s", took)
	}
	absent(t, deniedM)
	if _, err := os.Stat(allowedM); err != nil {
		t.Errorf("the call allowed on timeout did not run: %v", err)
	}
	refused(t, c, id, 1, "Nobody approved this call in time, and approval rule session[0] denies it then: Quick or never.")
	for _, ev := range c.events(id) {
		if a := ev.Approval; ev.Type == api.EventApproval && a != nil && a.CallSeq == 1 && a.State == api.ApprovalTimedOut &&
			a.Reason != "Nobody decided within 1s; the rule then denies the call." {
			t.Errorf("reason of the timeout's decision: %q", a.Reason)
		}
	}
	succeeded(t, c, id, 2)
	checkTrail(t, c, id, 1, "pending session[0]", "timed_out timeout session[0]")
	checkTrail(t, c, id, 2, "pending session[1]", "timed_out timeout session[1]")
	for _, ev := range c.events(id) {
		if a := ev.Approval; ev.Type == api.EventApproval && a != nil && a.State == api.ApprovalTimedOut {
			if want := map[int64]string{1: api.ApprovalDeny, 2: api.ApprovalAllow}[a.CallSeq]; a.OnTimeout != want {
				t.Errorf("timed out call %d: on_timeout %q, want %q", a.CallSeq, a.OnTimeout, want)
			}
		}
	}
	// Decided by its timeout: a person comes too late.
	if msg := runFail(t, c.env(c.admin), "sessions", "deny", id, "2"); !strings.Contains(msg, "ended") && !strings.Contains(msg, "decided already") {
		t.Errorf("denying a call its timeout decided: %q", msg)
	}
}

// TestApprovalServerRestart restarts the server while a call waits, once
// stopped gracefully and once killed with SIGKILL: each time the approval
// is still pending afterwards with its deadline, the machine (its remote
// reconnected) has not run the call, and approving it then runs it
// exactly once.
func TestApprovalServerRestart(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := approvalOutpost(t, c, "restarts", []api.ApprovalRule{
		{Action: api.ApprovalAsk, Tool: "exec", Match: map[string]string{"command": `marker`}, OnTimeout: api.ApprovalAllow},
	})
	startWorker(t, c, "restarts", token)
	dir := t.TempDir()
	markers := []string{filepath.Join(dir, "marker-1"), filepath.Join(dir, "marker-2")}
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "restarts", Title: "restart",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep("echo ran >> " + markers[0]), execStep("echo ran >> " + markers[1]), execStep("echo after")}}})

	for i, stop := range []func(){
		func() {
			if err := c.server.stop(syscall.SIGTERM, 20*time.Second); err != nil {
				t.Fatalf("server exit after SIGTERM: %v", err)
			}
		},
		func() { c.server.kill9() }, // the server of the moment, not the first
	} {
		seq := int64(i + 1)
		before := waitHeldCall(t, c, id, seq)
		connected := countEvents(c, id, api.EventRemoteConnected)
		if connected == 0 {
			t.Fatal("the held call waits but no remote connected")
		}
		stop()
		c.startServer()
		after := waitHeldCall(t, c, id, seq)
		if after.Deadline != before.Deadline || after.RequestedAt != before.RequestedAt {
			t.Errorf("the restart changed held call %d: %+v, was %+v", seq, after, before)
		}
		waitfor.Within(t, 60*time.Second, "the remote to reconnect", func() bool {
			return countEvents(c, id, api.EventRemoteConnected) > connected
		})
		staysAbsent(t, markers[i])
		run(t, c.env(c.admin), "sessions", "approve", id, fmt.Sprint(seq))
		waitExists(t, markers[i])
	}
	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusExit {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	for i, m := range markers {
		b, err := os.ReadFile(m)
		if err != nil || string(b) != "ran\n" {
			t.Errorf("marker %d after the approval holds %q (%v), want the call run exactly once", i+1, b, err)
		}
		seq := int64(i + 1)
		succeeded(t, c, id, seq)
		checkTrail(t, c, id, seq, "pending outpost[0]", "approved person outpost[0]")
	}
	if calls := countEvents(c, id, api.EventCall); calls != 3 {
		t.Errorf("%d calls on the transcript, want 3", calls)
	}
}

// TestApprovalSessionCannotLoosen tries to loosen an outpost's rules from
// a session: its own allow rules for what the outpost denies and asks, an
// ask of its own with a short timeout that allows, a PATCH of the
// session's rules, and a sessions.write token changing the outpost's. The
// outpost's deny still refuses, its ask still holds with its own timeout,
// and both requests are refused.
func TestApprovalSessionCannotLoosen(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := approvalOutpost(t, c, "strict", []api.ApprovalRule{
		{Action: api.ApprovalDeny, Tool: "exec", Match: map[string]string{"command": `marker-deny`}, Reason: "The outpost forbids it."},
		{Action: api.ApprovalAsk, Tool: "exec", Match: map[string]string{"command": `marker-ask`}, Reason: "The outpost asks."},
	})
	startWorker(t, c, "strict", token)
	var writer api.CreateTokenResponse
	if code := c.api("POST", "/v1/tokens", c.admin, api.CreateTokenRequest{Name: "writer", Scopes: []string{api.ScopeSessionsWrite}}, &writer); code != 201 {
		t.Fatalf("create token: %d", code)
	}
	dir := t.TempDir()
	deniedM, askedM := filepath.Join(dir, "marker-deny"), filepath.Join(dir, "marker-ask")
	stop := false
	var s api.Session
	if code := c.api("POST", "/v1/sessions", writer.Secret, api.CreateSessionRequest{Outpost: "strict", Title: "loosen",
		Agent: api.Agent{Kind: api.AgentScript, StopOnError: &stop, Steps: []api.Step{execStep(touch(deniedM)), execStep(touch(askedM))}},
		ApprovalRules: []api.ApprovalRule{
			{Action: api.ApprovalAllow, Tool: "*"},
			{Action: api.ApprovalAllow, Tool: "exec", Match: map[string]string{"command": `marker`}, Reason: "The session trusts itself."},
			{Action: api.ApprovalAsk, Tool: "exec", Match: map[string]string{"command": `marker`}, TimeoutS: 1, OnTimeout: api.ApprovalAllow},
		}}, &s); code != 201 {
		t.Fatalf("create session: %d", code)
	}
	id := s.Metadata.SessionID

	held := waitHeldCall(t, c, id, 2)
	refused(t, c, id, 1, "The outpost forbids it.")
	checkTrail(t, c, id, 1, "denied rule outpost[0]")
	absent(t, deniedM)
	if held.Rule != "outpost[1]" || held.OnTimeout != api.ApprovalDeny || held.Deadline-held.RequestedAt < int64(api.DefaultApprovalTimeoutS-60)*1000 {
		t.Fatalf("held call %+v: want the outpost's rule, its timeout and its on_timeout", held)
	}
	// Past the session's own one-second timeout that would allow it.
	staysAbsent(t, askedM)
	if got := c.session(id); got.Status.StatusDetail != api.DetailWaitingForApproval {
		t.Fatalf("after the session's own timeout: %+v", got.Status)
	}

	for _, tc := range []struct {
		method, path, token string
		body                any
		want                int
	}{
		{"PATCH", "/v1/sessions/" + id, writer.Secret, map[string]any{"approval_rules": []api.ApprovalRule{}}, 400},
		{"PATCH", "/v1/outposts/strict", writer.Secret, api.UpdateOutpostRequest{ApprovalRules: &[]api.ApprovalRule{}}, 403},
	} {
		if code := c.api(tc.method, tc.path, tc.token, tc.body, nil); code != tc.want {
			t.Errorf("%s %s by a sessions.write token: %d, want %d", tc.method, tc.path, code, tc.want)
		}
	}
	var o api.Outpost
	if c.api("GET", "/v1/outposts/strict", c.admin, nil, &o); len(o.Spec.ApprovalRules) != 2 {
		t.Fatalf("the outpost's rules after the refused requests: %+v", o.Spec.ApprovalRules)
	}
	staysAbsent(t, askedM)

	if code := c.api("POST", "/v1/sessions/"+id+"/calls/2/deny", writer.Secret, api.ApprovalDecisionRequest{Reason: "not today"}, nil); code != 200 {
		t.Fatalf("deny: %d", code)
	}
	c.waitFinal(id, 60*time.Second)
	absent(t, askedM)
	refused(t, c, id, 2, "not today")
}
