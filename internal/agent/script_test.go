package agent

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestScriptStepFailure runs scripts whose remote fails chosen calls: by
// default the first failed step ends the session in error and later steps
// never run; stop_on_error false runs every step and still ends in error;
// continue_on_error lets a step fail and the session finish. Repos are
// cloned first, and a failed clone stops the session.
func TestScriptStepFailure(t *testing.T) {
	t.Parallel()
	exec := func(cmd string) api.Step {
		args, _ := json.Marshal(api.ExecArgs{Command: cmd})
		return api.Step{Tool: api.ToolExec, Args: args}
	}
	tolerated := func(st api.Step) api.Step { st.ContinueOnError = true; return st }
	no, yes := false, true
	for _, tc := range []struct {
		name      string
		repos     []api.Repo
		agent     api.Agent
		fail      map[int64]bool // calls answered with a failure
		calls     int64          // calls the loop sends
		status    string
		detail    string
		reasonHas []string
	}{
		{
			name:   "default stops at the first failure",
			agent:  api.Agent{Kind: api.AgentScript, Steps: []api.Step{exec("echo one"), exec("make test"), exec("echo three")}},
			fail:   map[int64]bool{2: true},
			calls:  2,
			status: api.StatusError, detail: api.DetailError,
			reasonHas: []string{`Step 2 of 3 (exec "make test") failed: exit code 1.`, "step 3 did not run"},
		},
		{
			name:   "explicit stop_on_error true",
			agent:  api.Agent{Kind: api.AgentScript, StopOnError: &yes, Steps: []api.Step{exec("false"), exec("echo b"), exec("echo c")}},
			fail:   map[int64]bool{1: true},
			calls:  1,
			status: api.StatusError, detail: api.DetailError,
			reasonHas: []string{`Step 1 of 3 (exec "false") failed: exit code 1.`, "steps 2 and 3 did not run"},
		},
		{
			name:   "stop_on_error false runs every step and fails",
			agent:  api.Agent{Kind: api.AgentScript, StopOnError: &no, Steps: []api.Step{exec("false"), exec("echo b"), exec("exit 1")}},
			fail:   map[int64]bool{1: true, 3: true},
			calls:  3,
			status: api.StatusError, detail: api.DetailError,
			reasonHas: []string{`2 of 3 steps failed: step 1 (exec "false"): exit code 1; step 3 (exec "exit 1"): exit code 1.`},
		},
		{
			name:   "continue_on_error tolerates a step",
			agent:  api.Agent{Kind: api.AgentScript, Steps: []api.Step{tolerated(exec("lint")), exec("echo b")}},
			fail:   map[int64]bool{1: true},
			calls:  2,
			status: api.StatusExit, detail: api.DetailFinished,
			reasonHas: []string{"The script finished: 2 steps; 1 failed and had continue_on_error."},
		},
		{
			name:   "all steps pass",
			agent:  api.Agent{Kind: api.AgentScript, Steps: []api.Step{exec("echo a")}},
			calls:  1,
			status: api.StatusExit, detail: api.DetailFinished,
			reasonHas: []string{"The script finished: 1 step."},
		},
		{
			name:   "a failed clone stops before the steps",
			repos:  []api.Repo{{URL: "https://example.com/app.git", Name: "app"}},
			agent:  api.Agent{Kind: api.AgentScript, Steps: []api.Step{exec("echo a")}},
			fail:   map[int64]bool{1: true},
			calls:  1,
			status: api.StatusError, detail: api.DetailError,
			reasonHas: []string{"Cloning repo 1 failed: exit code 1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil)
			c := h.session("ses_script", api.SessionSpec{Repos: tc.repos, Agent: tc.agent})
			for seq := int64(1); seq <= tc.calls; seq++ {
				call := c.expectCall(t)
				if call.Seq != seq {
					t.Fatalf("call %+v, want seq %d", call, seq)
				}
				if tc.fail[seq] {
					h.answer(c, seq, false, `{"exit_code":1}`, "exit code 1")
				} else {
					h.answer(c, seq, true, `{"exit_code":0}`, "")
				}
			}
			sess := h.waitEnd("ses_script")
			if sess.Status != tc.status || sess.StatusDetail != tc.detail {
				t.Errorf("status %s/%s, want %s/%s: %s", sess.Status, sess.StatusDetail, tc.status, tc.detail, sess.Reason)
			}
			for _, want := range tc.reasonHas {
				if !strings.Contains(sess.Reason, want) {
					t.Errorf("reason %q lacks %q", sess.Reason, want)
				}
			}
			if sess.LastSeq != tc.calls {
				t.Errorf("last stored result %d, want %d", sess.LastSeq, tc.calls)
			}
			var last int64
			for _, ev := range h.events("ses_script") {
				if ev.Type == api.EventCall {
					last = max(last, ev.CallSeq)
				}
			}
			if last != tc.calls {
				t.Errorf("calls recorded up to %d, want %d", last, tc.calls)
			}
			select {
			case f := <-c.calls:
				t.Errorf("a call after the end: %+v", f)
			default:
			}
		})
	}
}

// TestScriptEndsWithItsLastResult: a one-step script session takes two
// transactions of the runner — the call's record and its result, which
// also ends the session, one commit less per session — and its transcript
// reads in order: the result, then the final status, then the end.
func TestScriptEndsWithItsLastResult(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	args, _ := json.Marshal(api.ExecArgs{Command: "true"})
	c := h.session("ses_one", api.SessionSpec{Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: args}}}})
	call := c.expectCall(t) // recorded before it was sent
	before := h.store.updates.Load()
	h.answer(c, call.Seq, true, `{"exit_code":0}`, "")
	sess := h.waitEnd("ses_one")
	if sess.Status != api.StatusExit || sess.StatusDetail != api.DetailFinished || sess.EndedAt == nil {
		t.Fatalf("session %s/%s ended %v, want exit/finished", sess.Status, sess.StatusDetail, sess.EndedAt)
	}
	if n := h.store.updates.Load() - before; n != 1 {
		t.Errorf("%d session transactions after the call was sent, want 1 (its result, with the end)", n)
	}
	var types []string
	for _, ev := range h.events("ses_one") {
		types = append(types, ev.Type)
	}
	if got := strings.Join(types, " "); !strings.HasSuffix(got, api.EventCall+" "+api.EventResult+" "+api.EventStatus+" "+api.EventEnd) {
		t.Errorf("transcript %q, want it to end with call, result, status, end", got)
	}
}

// TestScriptResumesAfterRestart stops the loop while a call waits for its
// result and starts a new one on the same store, as after a server
// restart: the new runner sends the same call again (the remote answers it
// from its journal), then goes on with the next, and a result the remote
// resends for a call already stored is acknowledged without being stored
// twice.
func TestScriptResumesAfterRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	steps := []api.Step{}
	for i := range 3 {
		args, _ := json.Marshal(api.ExecArgs{Command: fmt.Sprintf("echo %d", i+1)})
		steps = append(steps, api.Step{Tool: api.ToolExec, Args: args})
	}
	c := h.session("ses_restart", api.SessionSpec{Agent: api.Agent{Kind: api.AgentScript, Steps: steps}})
	c.expectCall(t)
	h.answer(c, 1, true, `{"exit_code":0}`, "")
	if call := c.expectCall(t); call.Seq != 2 {
		t.Fatalf("call %+v, want 2", call)
	}
	h.stop()

	h.start(nil)
	c2 := h.connect("ses_restart")
	if call := c2.expectCall(t); call.Seq != 2 || !strings.Contains(string(call.Args), "echo 2") {
		t.Fatalf("first call after the restart %+v, want call 2 again", call)
	}
	// A resend of result 1, stored already: acknowledged, not stored again.
	h.answer(c2, 1, true, `{"exit_code":0}`, "")
	h.answer(c2, 2, true, `{"exit_code":0}`, "")
	if call := c2.expectCall(t); call.Seq != 3 {
		t.Fatalf("call %+v, want 3", call)
	}
	h.answer(c2, 3, true, `{"exit_code":0}`, "")
	if sess := h.waitEnd("ses_restart"); sess.StatusDetail != api.DetailFinished {
		t.Fatalf("session %s/%s: %s", sess.Status, sess.StatusDetail, sess.Reason)
	}
	results := map[int64]int{}
	for _, ev := range h.events("ses_restart") {
		if ev.Type == api.EventResult {
			results[ev.CallSeq]++
		}
	}
	if results[1] != 1 || results[2] != 1 || results[3] != 1 {
		t.Fatalf("results per call %v, want one each", results)
	}
}

// TestStepLabel checks the names failed steps get in a session's reason:
// the tool and what its call works on, as api.CallTarget says it.
func TestStepLabel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tool string
		args any
		want string
	}{
		{api.ToolExec, api.ExecArgs{Command: "make test"}, `exec "make test"`},
		{api.ToolExec, api.ExecArgs{Argv: []string{"echo", "a b"}}, `exec "echo 'a b'"`},
		{api.ToolExec, api.ExecArgs{Command: strings.Repeat("x", 100)}, fmt.Sprintf("exec %q", strings.Repeat("x", 79)+"…")},
		{api.ToolReadFile, api.ReadFileArgs{Path: "go.mod"}, "read_file go.mod"},
		{api.ToolBrowserNavigate, api.BrowserNavigateArgs{URL: "http://127.0.0.1/"}, "browser_navigate http://127.0.0.1/"},
		{api.ToolGitClone, api.GitCloneArgs{URL: "/srv/app.git", Name: "app"}, "git_clone app ← /srv/app.git"},
		{api.ToolGitCommit, api.GitCommitArgs{Repo: "app", Message: "fix"}, "git_commit app: fix"},
		{api.ToolBrowserConsole, api.BrowserConsoleArgs{}, "browser_console"},
		{"no_such_tool", map[string]string{"path": "x"}, "no_such_tool"},
	} {
		args, _ := json.Marshal(tc.args)
		if got := stepLabel(tc.tool, args); got != tc.want {
			t.Errorf("stepLabel(%s, %s) = %q, want %q", tc.tool, args, got, tc.want)
		}
	}
}
