package approval

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

func mustCompile(t *testing.T, outpost, session []api.ApprovalRule) *Set {
	t.Helper()
	var err error
	if outpost, err = Validate("approval_rules", outpost); err != nil {
		t.Fatal(err)
	}
	if session, err = Validate("approval_rules", session); err != nil {
		t.Fatal(err)
	}
	s, err := Compile(outpost, session)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestEvaluate(t *testing.T) {
	t.Parallel()
	outpost := []api.ApprovalRule{
		{Action: api.ApprovalAllow, Tool: "read_*"},
		{Action: api.ApprovalAsk, Tool: "exec", Match: map[string]string{"command": `git push .* main`}, Reason: "pushes to main", TimeoutS: 60, OnTimeout: api.ApprovalAllow},
		{Action: api.ApprovalDeny, Tool: "exec", Match: map[string]string{"command": `rm -rf /`}, Reason: "no"},
		{Action: api.ApprovalAsk, Tool: "browser_*"},
	}
	s := mustCompile(t, outpost, nil)
	for _, tc := range []struct {
		tool, args string
		action     string
		rule       string
	}{
		{"exec", `{"command":"git push origin main"}`, api.ApprovalAsk, "outpost[1]"},
		{"exec", `{"command":"git push origin feature"}`, api.ApprovalAllow, ""},
		{"exec", `{"command":"cd / && rm -rf / --no-preserve-root"}`, api.ApprovalDeny, "outpost[2]"},
		// Deny first, whatever the order of the rules.
		{"exec", `{"command":"git push x main; rm -rf /"}`, api.ApprovalDeny, "outpost[2]"},
		{"exec", `{"argv":["git","push","origin","main"]}`, api.ApprovalAllow, ""}, // no command argument: no match
		{"read_file", `{"path":"a"}`, api.ApprovalAllow, "outpost[0]"},
		{"browser_navigate", `{"url":"https://x"}`, api.ApprovalAsk, "outpost[3]"},
		{"exec", `not json`, api.ApprovalAllow, ""},
	} {
		d := s.Evaluate(tc.tool, json.RawMessage(tc.args))
		if d.Action != tc.action || d.Rule != tc.rule {
			t.Errorf("%s %s: got %s by %q, want %s by %q", tc.tool, tc.args, d.Action, d.Rule, tc.action, tc.rule)
		}
	}
	d := s.Evaluate("exec", json.RawMessage(`{"command":"git push origin main"}`))
	if d.Timeout != time.Minute || d.OnTimeout != api.ApprovalAllow || d.Reason != "pushes to main" {
		t.Errorf("ask decision = %+v", d)
	}
	// The default timeout and decision of an ask rule that gives none.
	d = s.Evaluate("browser_click", nil)
	if d.Timeout != api.DefaultApprovalTimeoutS*time.Second || d.OnTimeout != api.ApprovalDeny {
		t.Errorf("default ask decision = %+v", d)
	}
}

func TestEvaluateArgumentText(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, []api.ApprovalRule{
		{Action: api.ApprovalDeny, Tool: "exec", Match: map[string]string{"argv": `"push"`, "cwd": `^repos/prod$`}},
		{Action: api.ApprovalAsk, Tool: "write_file", Match: map[string]string{"path": `\.env$`}},
	}, nil)
	for _, tc := range []struct {
		tool, args, action string
	}{
		// A non-string argument is searched in its JSON; every entry must match.
		{"exec", `{"argv":["git","push"],"cwd":"repos/prod"}`, api.ApprovalDeny},
		{"exec", `{"argv":["git","push"],"cwd":"repos/prod2"}`, api.ApprovalAllow},
		{"exec", `{"argv":["git","pushy"],"cwd":"repos/prod"}`, api.ApprovalAllow},
		{"write_file", `{"path":"app/.env","content":"x"}`, api.ApprovalAsk},
		{"write_file", `{"path":"app/.envrc"}`, api.ApprovalAllow},
	} {
		if d := s.Evaluate(tc.tool, json.RawMessage(tc.args)); d.Action != tc.action {
			t.Errorf("%s %s: got %s (%s), want %s", tc.tool, tc.args, d.Action, d.Rule, tc.action)
		}
	}
}

// A session's rules are added to its outpost's: a session allow rule never
// lifts an outpost's ask or deny, while a session's ask or deny tightens.
func TestSessionCannotLoosen(t *testing.T) {
	t.Parallel()
	outpost := []api.ApprovalRule{
		{Action: api.ApprovalDeny, Tool: "git_push"},
		{Action: api.ApprovalAsk, Tool: "exec"},
	}
	session := []api.ApprovalRule{
		{Action: api.ApprovalAllow, Tool: "*"},
		{Action: api.ApprovalAllow, Tool: "exec", Match: map[string]string{"command": ".*"}},
		{Action: api.ApprovalDeny, Tool: "write_file", Reason: "read only session"},
	}
	s := mustCompile(t, outpost, session)
	for _, tc := range []struct {
		tool, action, rule string
	}{
		{"git_push", api.ApprovalDeny, "outpost[0]"},
		{"exec", api.ApprovalAsk, "outpost[1]"},
		{"write_file", api.ApprovalDeny, "session[2]"},
		{"read_file", api.ApprovalAllow, "session[0]"},
	} {
		d := s.Evaluate(tc.tool, json.RawMessage(`{"command":"ls"}`))
		if d.Action != tc.action || d.Rule != tc.rule {
			t.Errorf("%s: got %s by %q, want %s by %q", tc.tool, d.Action, d.Rule, tc.action, tc.rule)
		}
	}
	// An ask of the session over an outpost that allows everything.
	s = mustCompile(t, []api.ApprovalRule{{Action: api.ApprovalAllow, Tool: "*"}}, []api.ApprovalRule{{Action: api.ApprovalAsk, Tool: "exec"}})
	if d := s.Evaluate("exec", nil); d.Action != api.ApprovalAsk || d.Rule != "session[0]" {
		t.Errorf("session ask: got %+v", d)
	}
	if (*Set)(nil).Evaluate("exec", nil).Action != api.ApprovalAllow {
		t.Error("no rules: want allow")
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", api.MaxApprovalPattern+1)
	for _, tc := range []struct {
		rule api.ApprovalRule
		want string
	}{
		{api.ApprovalRule{Tool: "exec"}, "approval_rules[1].action is missing"},
		{api.ApprovalRule{Action: "maybe", Tool: "exec"}, `approval_rules[1].action "maybe" is unknown`},
		{api.ApprovalRule{Action: api.ApprovalAsk}, "approval_rules[1].tool is missing"},
		{api.ApprovalRule{Action: api.ApprovalAsk, Tool: "exec["}, "approval_rules[1].tool \"exec[\" is not a valid glob"},
		{api.ApprovalRule{Action: api.ApprovalAsk, Tool: long}, "approval_rules[1].tool is 1025 bytes long"},
		{api.ApprovalRule{Action: api.ApprovalAsk, Tool: "exec", Match: map[string]string{"command": "(unclosed"}}, "approval_rules[1].match.command is not a valid RE2"},
		{api.ApprovalRule{Action: api.ApprovalAsk, Tool: "exec", Match: map[string]string{"command": `(?=look)`}}, "approval_rules[1].match.command is not a valid RE2"},
		{api.ApprovalRule{Action: api.ApprovalAsk, Tool: "exec", Match: map[string]string{"": "x"}}, "approval_rules[1].match has an empty argument name"},
		{api.ApprovalRule{Action: api.ApprovalAsk, Tool: "exec", TimeoutS: -1}, "approval_rules[1].timeout_s is -1"},
		{api.ApprovalRule{Action: api.ApprovalAsk, Tool: "exec", TimeoutS: api.MaxApprovalTimeoutS + 1}, "approval_rules[1].timeout_s is"},
		{api.ApprovalRule{Action: api.ApprovalAsk, Tool: "exec", OnTimeout: "ask"}, `approval_rules[1].on_timeout "ask" is unknown`},
		{api.ApprovalRule{Action: api.ApprovalDeny, Tool: "exec", TimeoutS: 5}, "approval_rules[1].timeout_s is for ask rules only"},
		{api.ApprovalRule{Action: api.ApprovalAllow, Tool: "exec", OnTimeout: "deny"}, "approval_rules[1].on_timeout is for ask rules only"},
		{api.ApprovalRule{Action: api.ApprovalDeny, Tool: "exec", Reason: strings.Repeat("r", api.MaxApprovalReason+1)}, "approval_rules[1].reason is 2001 bytes long"},
		{api.ApprovalRule{Action: api.ApprovalDeny, Tool: "exce"}, `approval_rules[1].tool "exce" matches no tool`},
		{api.ApprovalRule{Action: api.ApprovalDeny, Tool: "Exec"}, `approval_rules[1].tool "Exec" matches no tool`},
		{api.ApprovalRule{Action: api.ApprovalAsk, Tool: api.ToolNetworkAccessRequest}, `approval_rules[1].tool "network_access_request" matches only network_access_request, which approval rules do not cover`},
		{api.ApprovalRule{Action: api.ApprovalDeny, Tool: "network_*"}, `approval_rules[1].tool "network_*" matches only network_access_request`},
	} {
		_, err := Validate("approval_rules", []api.ApprovalRule{{Action: api.ApprovalAllow, Tool: "*"}, tc.rule})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.rule, err, tc.want)
		}
	}
	// Globs that match a tool of the machine's are fine, whatever else
	// they match.
	for _, tool := range []string{"*", "*_file", "git_*", "[ew]*", "shell_?un"} {
		if _, err := Validate("approval_rules", []api.ApprovalRule{{Action: api.ApprovalDeny, Tool: tool}}); err != nil {
			t.Errorf("tool %q: %v", tool, err)
		}
	}
	many := make([]api.ApprovalRule, api.MaxApprovalRules+1)
	if _, err := Validate("approval_rules", many); err == nil || !strings.Contains(err.Error(), "at most 100") {
		t.Errorf("too many rules: %v", err)
	}
	got, err := Validate("approval_rules", []api.ApprovalRule{{Action: api.ApprovalAsk, Tool: "exec", Reason: "  why  ", Match: map[string]string{}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := got[0]; r.TimeoutS != api.DefaultApprovalTimeoutS || r.OnTimeout != api.ApprovalDeny || r.Reason != "why" || r.Match != nil {
		t.Errorf("normalized = %+v", r)
	}
}

// A timeout's decision says how long the call waited and what the rule
// did then, in words; the tool error of one that denies gives the rule's
// reason, which says why it asked.
func TestTimeoutWords(t *testing.T) {
	t.Parallel()
	a := api.Approval{CallSeq: 3, Tool: "exec", Rule: "outpost[1]", RuleReason: "Pushes need a person.", State: api.ApprovalTimedOut,
		OnTimeout: api.ApprovalDeny, RequestedAt: 1_000_000, Deadline: 1_090_000}
	if got, want := TimeoutReason(a), "Nobody decided within 1m30s; the rule then denies the call."; got != want {
		t.Errorf("TimeoutReason = %q, want %q", got, want)
	}
	a.Reason = TimeoutReason(a)
	if got, want := ToolError(a), "Nobody approved this call in time, and approval rule outpost[1] denies it then: Pushes need a person. Do not retry it as it is."; got != want {
		t.Errorf("ToolError = %q, want %q", got, want)
	}
	a.OnTimeout = api.ApprovalAllow
	if got, want := TimeoutReason(a), "Nobody decided within 1m30s; the rule then allows the call."; got != want {
		t.Errorf("TimeoutReason (allow) = %q, want %q", got, want)
	}
}

// A rule over every tool with a match on command holds each tool that
// runs a command line, exec and shell_run alike, and no tool without
// that argument.
func TestCommandRuleCoversShells(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, []api.ApprovalRule{{Action: api.ApprovalAsk, Tool: "*", Match: map[string]string{"command": `git push`}}}, nil)
	for _, tc := range []struct {
		tool, args, want string
	}{
		{api.ToolExec, `{"command":"git push origin main"}`, api.ApprovalAsk},
		{api.ToolShellRun, `{"name":"sh","command":"git push origin main"}`, api.ApprovalAsk},
		{api.ToolShellWrite, `{"name":"sh","text":"git push origin main\n"}`, api.ApprovalAllow},
		{api.ToolWriteFile, `{"path":"push.sh","content":"git push origin main"}`, api.ApprovalAllow},
	} {
		if d := s.Evaluate(tc.tool, json.RawMessage(tc.args)); d.Action != tc.want {
			t.Errorf("%s %s: %s, want %s", tc.tool, tc.args, d.Action, tc.want)
		}
	}
}
