package api

import "encoding/json"

// Approval rule actions (ApprovalRule.Action) and timeout decisions
// (ApprovalRule.OnTimeout).
const (
	ApprovalAllow = "allow"
	ApprovalAsk   = "ask"
	ApprovalDeny  = "deny"
)

// Approval states (Approval.State).
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalTimedOut = "timed_out"
)

// DetailWaitingForApproval is the status detail of a running session whose
// agent's tool call waits for a person's approval.
const DetailWaitingForApproval = "waiting_for_approval"

// EventApproval records an approval rule's effect on a tool call (its
// CallSeq, with the call's Tool and Args, secrets redacted): an ask (state
// pending), each decision of a person or a timeout, and a denial by a deny
// rule. Approval holds the state, who decided and why.
const EventApproval = "approval"

// Bounds of approval rules.
const (
	// MaxApprovalRules bounds the rules of one outpost and of one session.
	MaxApprovalRules = 100
	// MaxApprovalMatches bounds the arguments one rule matches.
	MaxApprovalMatches = 16
	// MaxApprovalPattern bounds a tool glob, an argument name and a
	// regular expression, in bytes.
	MaxApprovalPattern = 1024
	// MaxApprovalReason bounds a rule's reason and a decision's, in bytes.
	MaxApprovalReason = 2000
	// MaxApprovalTimeoutS bounds an ask rule's timeout_s: a week.
	MaxApprovalTimeoutS = 7 * 24 * 3600
	// DefaultApprovalTimeoutS is an ask rule's timeout when it gives none:
	// an hour.
	DefaultApprovalTimeoutS = 3600
)

// ApprovalRule says what happens to an agent's tool calls that it matches.
// An outpost's rules apply to all its sessions; a session's rules are added
// to them and can never loosen them. For each call every rule of both lists
// is tried: when any matching rule says deny, the call is refused; else when
// any says ask, the call waits for a person; else it runs (allow is the
// default, and an allow rule never overrides a deny or an ask).
type ApprovalRule struct {
	// Action is ApprovalAllow, ApprovalAsk or ApprovalDeny.
	Action string `json:"action"`
	// Tool is a tool name or a glob over tool names (path.Match syntax:
	// *, ?, [a-z]); "*" matches every tool.
	Tool string `json:"tool"`
	// Match narrows the rule to calls whose arguments match: each key names
	// a top-level argument, each value is an RE2 regular expression
	// searched (unanchored) in the argument's text — a string argument's
	// value, any other argument's JSON. Every entry must match; a call
	// without the argument does not match. Empty: every call of Tool.
	Match map[string]string `json:"match,omitempty"`
	// Reason says why, shown to the person asked and to the agent refused.
	Reason string `json:"reason,omitempty"`
	// TimeoutS is how long an ask waits for a person, 1 to
	// MaxApprovalTimeoutS; 0 means DefaultApprovalTimeoutS. Ask rules only.
	TimeoutS int64 `json:"timeout_s,omitempty"`
	// OnTimeout is the decision when nobody answers in time: ApprovalAllow
	// or ApprovalDeny; "" means deny. Ask rules only.
	OnTimeout string `json:"on_timeout,omitempty"`
}

// Approval is one tool call that an ask rule held, or a deny rule refused.
type Approval struct {
	// CallSeq is the call's sequence number, Tool its tool and Args its
	// arguments with the session's secret values redacted.
	CallSeq int64           `json:"call_seq"`
	Tool    string          `json:"tool"`
	Args    json.RawMessage `json:"args,omitempty"`
	// State is ApprovalPending, ApprovalApproved, ApprovalDenied or
	// ApprovalTimedOut.
	State string `json:"state"`
	// Rule names the rule that decided: "outpost[2]" or "session[0]".
	Rule string `json:"rule"`
	// RuleReason is that rule's reason.
	RuleReason string `json:"rule_reason,omitempty"`
	// By is who decided: the id of the API token of a person's decision,
	// "rule" for a deny rule, "timeout" for a timeout; "" while pending.
	By string `json:"by,omitempty"`
	// Reason is the decision's reason.
	Reason string `json:"reason,omitempty"`
	// OnTimeout is the decision a timeout makes (ApprovalAllow,
	// ApprovalDeny), at Deadline (Unix milliseconds).
	OnTimeout string `json:"on_timeout,omitempty"`
	Deadline  int64  `json:"deadline_ms,omitempty"`
	// RequestedAt and DecidedAt are Unix milliseconds; DecidedAt is 0
	// while pending.
	RequestedAt int64 `json:"requested_at_ms"`
	DecidedAt   int64 `json:"decided_at_ms,omitempty"`
}

// ApprovalList is the answer of GET /v1/sessions/{session}/approvals: the
// session's held calls, oldest first.
type ApprovalList struct {
	Items []Approval `json:"items"`
}

// ApprovalDecisionRequest is the optional body of POST
// /v1/sessions/{session}/calls/{seq}/approve and …/deny.
type ApprovalDecisionRequest struct {
	// Reason says why, at most MaxApprovalReason bytes; a denial's reason
	// is what the agent's tool error says.
	Reason string `json:"reason"`
}
