package approval

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// Errors of Decide.
var (
	// ErrUnknown: the session holds no call with that sequence number.
	ErrUnknown = errors.New("no such held call")
	// ErrDecided: the call was decided already.
	ErrDecided = errors.New("the call was decided already")
)

// Who decided, besides a person's token id (Approval.By).
const (
	ByRule    = "rule"
	ByTimeout = "timeout"
)

// Find returns the session's approval of call seq, or nil.
func Find(sess *store.Session, seq int64) *api.Approval {
	for i := range sess.Approvals {
		if sess.Approvals[i].CallSeq == seq {
			return &sess.Approvals[i]
		}
	}
	return nil
}

// Pending reports whether any call of the session waits for approval.
func Pending(sess *store.Session) bool {
	for _, a := range sess.Approvals {
		if a.State == api.ApprovalPending {
			return true
		}
	}
	return false
}

// Hold records a held call on sess (a transaction's copy of the session,
// read under its lock), with the session's status detail
// DetailWaitingForApproval, and returns the events to write with it.
func Hold(sess *store.Session, a api.Approval, now time.Time) []api.Event {
	a.State, a.RequestedAt = api.ApprovalPending, now.UnixMilli()
	sess.Approvals = append(sess.Approvals, a)
	sess.UpdatedAt = now
	sess.StatusDetail = api.DetailWaitingForApproval
	sess.Reason = fmt.Sprintf("Tool call %d (%s) waits for a person's approval.", a.CallSeq, a.Tool)
	return []api.Event{approvalEvent(a, now), statusEvent(sess, now)}
}

// Decide decides held call seq of sess (a transaction's copy of the
// session, read under its lock) as state (ApprovalApproved,
// ApprovalDenied, ApprovalTimedOut), by and for reason, and returns the
// events to write with it. Once no call waits any more the session's
// status detail is DetailWorking again. ErrUnknown and ErrDecided change
// nothing.
func Decide(sess *store.Session, seq int64, state, by, reason string, now time.Time) ([]api.Event, error) {
	a := Find(sess, seq)
	switch {
	case a == nil:
		return nil, ErrUnknown
	case a.State != api.ApprovalPending:
		return nil, ErrDecided
	}
	a.State, a.By, a.Reason, a.DecidedAt = state, by, reason, now.UnixMilli()
	sess.UpdatedAt = now
	evs := []api.Event{approvalEvent(*a, now)}
	if !Pending(sess) && sess.StatusDetail == api.DetailWaitingForApproval {
		sess.StatusDetail = api.DetailWorking
		sess.Reason = fmt.Sprintf("Tool call %d was %s; working.", seq, stateWords(*a))
		evs = append(evs, statusEvent(sess, now))
	}
	return evs, nil
}

// Refusal records a call that a deny rule refused before it was held;
// nothing waits for it, so the session's status is left alone.
func Refusal(a api.Approval, now time.Time) api.Event {
	a.State, a.By, a.RequestedAt, a.DecidedAt = api.ApprovalDenied, ByRule, now.UnixMilli(), now.UnixMilli()
	if a.Reason == "" {
		a.Reason = a.RuleReason
	}
	return approvalEvent(a, now)
}

// Allowed reports whether a decided approval lets its call run.
func Allowed(a api.Approval) bool {
	return a.State == api.ApprovalApproved || (a.State == api.ApprovalTimedOut && a.OnTimeout == api.ApprovalAllow)
}

// TimeoutReason is the reason of a held call's decision by its timeout:
// how long it waited and what the rule does then.
func TimeoutReason(a api.Approval) string {
	then := "denies"
	if a.OnTimeout == api.ApprovalAllow {
		then = "allows"
	}
	waited := ""
	if d := time.Duration(a.Deadline-a.RequestedAt) * time.Millisecond; a.Deadline > 0 && a.RequestedAt > 0 && d > 0 {
		waited = " within " + d.Round(time.Second).String()
	}
	return fmt.Sprintf("Nobody decided%s; the rule then %s the call.", waited, then)
}

// ToolError is the error a refused call returns to the agent: who refused
// it and why.
func ToolError(a api.Approval) string {
	why := ""
	if r := strings.TrimRight(cmp.Or(a.Reason, a.RuleReason), "."); r != "" {
		why = ": " + r
	}
	switch {
	case a.State == api.ApprovalTimedOut:
		// The decision's reason only says that time ran out; the rule's
		// says why it asked.
		why = ""
		if r := strings.TrimRight(a.RuleReason, "."); r != "" {
			why = ": " + r
		}
		return fmt.Sprintf("Nobody approved this call in time, and approval rule %s denies it then%s. Do not retry it as it is.", a.Rule, why)
	case a.By == ByRule:
		return fmt.Sprintf("Approval rule %s denies this call%s. Do not retry it as it is.", a.Rule, why)
	default:
		return fmt.Sprintf("A person denied this call%s. Do not retry it as it is.", why)
	}
}

func stateWords(a api.Approval) string {
	switch a.State {
	case api.ApprovalApproved:
		return "approved"
	case api.ApprovalTimedOut:
		if Allowed(a) {
			return "allowed when its approval timed out"
		}
		return "denied when its approval timed out"
	default:
		return "denied"
	}
}

func approvalEvent(a api.Approval, now time.Time) api.Event {
	return api.Event{Type: api.EventApproval, Time: now.UnixMilli(), CallSeq: a.CallSeq, Tool: a.Tool, Args: a.Args, Approval: &a}
}

func statusEvent(sess *store.Session, now time.Time) api.Event {
	return api.Event{Type: api.EventStatus, Time: now.UnixMilli(), Status: sess.Status, StatusDetail: sess.StatusDetail, Reason: sess.Reason}
}
