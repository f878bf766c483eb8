// Package approval decides what an agent's tool call needs before it may
// reach the machine: nothing (allow), a person's approval (ask), or nothing
// at all (deny). The rules come from the session's outpost and from the
// session itself; the session's are added to the outpost's and can never
// loosen them, because any matching deny wins over every ask and allow, and
// any matching ask wins over every allow.
package approval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outpost-sh/outpost/api"
)

// Sources of rules, as Decision.Rule names them.
const (
	SourceOutpost = "outpost"
	SourceSession = "session"
)

// Validate checks rules as a request gives them (field names the JSON
// path of the first problem: "approval_rules[2].match.command") and returns
// them normalized: actions and timeouts as given, a missing ask timeout
// filled with the default. A nil or empty list is valid and means none.
func Validate(field string, rules []api.ApprovalRule) ([]api.ApprovalRule, error) {
	if len(rules) > api.MaxApprovalRules {
		return nil, fmt.Errorf("%s has %d rules; at most %d are allowed", field, len(rules), api.MaxApprovalRules)
	}
	if len(rules) == 0 {
		return nil, nil
	}
	out := make([]api.ApprovalRule, len(rules))
	for i, r := range rules {
		at := fmt.Sprintf("%s[%d]", field, i)
		switch r.Action {
		case api.ApprovalAllow, api.ApprovalAsk, api.ApprovalDeny:
		case "":
			return nil, fmt.Errorf("%s.action is missing; use %q, %q or %q", at, api.ApprovalAllow, api.ApprovalAsk, api.ApprovalDeny)
		default:
			return nil, fmt.Errorf("%s.action %q is unknown; use %q, %q or %q", at, r.Action, api.ApprovalAllow, api.ApprovalAsk, api.ApprovalDeny)
		}
		if err := checkText(at+".tool", r.Tool, api.MaxApprovalPattern); err != nil {
			return nil, err
		}
		if r.Tool == "" {
			return nil, fmt.Errorf("%s.tool is missing; give a tool name or a glob (\"*\" for every tool)", at)
		}
		if _, err := path.Match(r.Tool, ""); err != nil {
			return nil, fmt.Errorf("%s.tool %q is not a valid glob: %v", at, r.Tool, err)
		}
		if len(r.Match) > api.MaxApprovalMatches {
			return nil, fmt.Errorf("%s.match has %d arguments; at most %d are allowed", at, len(r.Match), api.MaxApprovalMatches)
		}
		for _, arg := range sortedKeys(r.Match) {
			if arg == "" {
				return nil, fmt.Errorf("%s.match has an empty argument name", at)
			}
			if err := checkText(at+".match", arg, api.MaxApprovalPattern); err != nil {
				return nil, err
			}
			re := r.Match[arg]
			if err := checkText(at+".match."+arg, re, api.MaxApprovalPattern); err != nil {
				return nil, err
			}
			if _, err := regexp.Compile(re); err != nil {
				return nil, fmt.Errorf("%s.match.%s is not a valid RE2 regular expression: %v", at, arg, err)
			}
		}
		if err := checkText(at+".reason", r.Reason, api.MaxApprovalReason); err != nil {
			return nil, err
		}
		r.Reason = strings.TrimSpace(r.Reason)
		if r.Action != api.ApprovalAsk {
			if r.TimeoutS != 0 {
				return nil, fmt.Errorf("%s.timeout_s is for ask rules only", at)
			}
			if r.OnTimeout != "" {
				return nil, fmt.Errorf("%s.on_timeout is for ask rules only", at)
			}
		} else {
			switch {
			case r.TimeoutS < 0 || r.TimeoutS > api.MaxApprovalTimeoutS:
				return nil, fmt.Errorf("%s.timeout_s is %d; give 1 to %d seconds, or 0 for the default of %d", at, r.TimeoutS, api.MaxApprovalTimeoutS, api.DefaultApprovalTimeoutS)
			case r.TimeoutS == 0:
				r.TimeoutS = api.DefaultApprovalTimeoutS
			}
			switch r.OnTimeout {
			case api.ApprovalAllow, api.ApprovalDeny:
			case "":
				r.OnTimeout = api.ApprovalDeny
			default:
				return nil, fmt.Errorf("%s.on_timeout %q is unknown; use %q or %q", at, r.OnTimeout, api.ApprovalAllow, api.ApprovalDeny)
			}
		}
		if err := checkToolPattern(at+".tool", r.Tool); err != nil {
			return nil, err
		}
		if len(r.Match) == 0 {
			r.Match = nil
		}
		out[i] = r
	}
	return out, nil
}

// checkToolPattern refuses a rule's tool pattern under which the rule
// could never apply: one that matches no tool (a misspelt name would make
// a deny rule that never denies), or only tools the control plane answers
// itself, which approval rules do not cover (network_access_request: a
// person answers every request anyway, and the session's network policy
// decides who may grant what).
func checkToolPattern(field, pattern string) error {
	var server []string
	for _, name := range api.ToolNames() {
		if ok, _ := path.Match(pattern, name); !ok {
			continue
		}
		if !api.IsServerTool(name) {
			return nil
		}
		server = append(server, name)
	}
	if len(server) > 0 {
		return fmt.Errorf("%s %q matches only %s, which approval rules do not cover: a person answers each network access request already, granting or denying it, and what a grant may add is bounded by the network policy", field, pattern, strings.Join(server, ", "))
	}
	return fmt.Errorf("%s %q matches no tool; give a tool name (exec, write_file, git_push, …) or a glob over them (\"browser_*\", \"*\")", field, pattern)
}

func checkText(field, s string, limit int) error {
	switch {
	case len(s) > limit:
		return fmt.Errorf("%s is %d bytes long; at most %d are allowed", field, len(s), limit)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Set is the compiled rules of one session: its outpost's, then its own.
type Set struct {
	rules []rule
}

type rule struct {
	api.ApprovalRule
	name    string // "outpost[2]"
	matches []argMatch
}

type argMatch struct {
	arg string
	re  *regexp.Regexp
}

// Compile compiles the outpost's and the session's rules, which Validate
// accepted when they were stored; a rule that no longer compiles is an
// error rather than a rule silently dropped.
func Compile(outpost, session []api.ApprovalRule) (*Set, error) {
	s := &Set{}
	for _, l := range []struct {
		source string
		rules  []api.ApprovalRule
	}{{SourceOutpost, outpost}, {SourceSession, session}} {
		for i, r := range l.rules {
			c := rule{ApprovalRule: r, name: fmt.Sprintf("%s[%d]", l.source, i)}
			for _, arg := range sortedKeys(r.Match) {
				re, err := regexp.Compile(r.Match[arg])
				if err != nil {
					return nil, fmt.Errorf("approval rule %s: match.%s: %w", c.name, arg, err)
				}
				c.matches = append(c.matches, argMatch{arg, re})
			}
			s.rules = append(s.rules, c)
		}
	}
	return s, nil
}

// Empty reports whether the set has no rules: every call is allowed.
func (s *Set) Empty() bool { return s == nil || len(s.rules) == 0 }

// Decision is what the rules say about one call.
type Decision struct {
	// Action is api.ApprovalAllow, api.ApprovalAsk or api.ApprovalDeny.
	Action string
	// Rule names the deciding rule ("outpost[2]", "session[0]"); "" when
	// no rule matched (the default allow).
	Rule string
	// Reason is the deciding rule's.
	Reason string
	// Timeout and OnTimeout are an ask's.
	Timeout   time.Duration
	OnTimeout string
}

// Evaluate decides a call of tool with args: the first matching deny rule
// (the outpost's before the session's), else the first matching ask rule,
// else the first matching allow rule, else allow.
func (s *Set) Evaluate(tool string, args json.RawMessage) Decision {
	if s.Empty() {
		return Decision{Action: api.ApprovalAllow}
	}
	var parsed map[string]json.RawMessage
	parsedOK := false
	found := map[string]*rule{}
	for i := range s.rules {
		r := &s.rules[i]
		if found[r.Action] != nil {
			continue
		}
		if ok, _ := path.Match(r.Tool, tool); !ok {
			continue
		}
		if len(r.matches) > 0 && !parsedOK {
			parsedOK = true
			dec := json.NewDecoder(bytes.NewReader(args))
			dec.UseNumber()
			_ = dec.Decode(&parsed) // arguments that are no object match no argument
		}
		if !r.matchArgs(parsed) {
			continue
		}
		found[r.Action] = r
	}
	for _, action := range []string{api.ApprovalDeny, api.ApprovalAsk, api.ApprovalAllow} {
		if r := found[action]; r != nil {
			d := Decision{Action: action, Rule: r.name, Reason: r.Reason}
			if action == api.ApprovalAsk {
				d.Timeout = time.Duration(r.TimeoutS) * time.Second
				if d.Timeout <= 0 {
					d.Timeout = api.DefaultApprovalTimeoutS * time.Second
				}
				d.OnTimeout = r.OnTimeout
				if d.OnTimeout == "" {
					d.OnTimeout = api.ApprovalDeny
				}
			}
			return d
		}
	}
	return Decision{Action: api.ApprovalAllow}
}

func (r *rule) matchArgs(args map[string]json.RawMessage) bool {
	for _, m := range r.matches {
		raw, ok := args[m.arg]
		if !ok {
			return false
		}
		if !m.re.MatchString(argText(raw)) {
			return false
		}
	}
	return true
}

// argText is the text a rule's regular expression searches: a string
// argument's value, any other argument's JSON as the call sent it.
func argText(raw json.RawMessage) string {
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(bytes.TrimSpace(raw))
}
