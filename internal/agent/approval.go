package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/approval"
	"github.com/outpost-sh/outpost/internal/store"
)

// Approval rules hold a call before it is sent to the remote. The gate
// reads the rules at each call (an outpost's change applies to running
// sessions at once) and the session's approvals, which are part of the
// session row: a held call is stored (state pending) before anything else
// happens, a person's decision is a transaction of the server under the
// session's lock, and a timeout is the runner's own transaction under the
// same lock, so each call is decided once whichever replica decides. A
// restarted runner finds the call recorded without a result and comes
// through the gate again: the stored approval, not a new one, decides.

// gate applies the approval rules to call seq. It reports false when the
// call may go to the remote; true with the call's stored result when the
// rules refused it (a tool error with the reason, which the agent sees).
func (r *runner) gate(ctx context.Context, seq int64, st step, next *step) (store.Call, bool, bool, error) {
	var sess store.Session
	recorded := r.recorded
	r.recorded = nil
	if recorded != nil && r.recordedSeq == seq {
		sess = *recorded // read with the call's record, just now
	} else if err := r.retry(ctx, "read session", func() (err error) {
		sess, err = r.l.opts.Store.GetSession(ctx, r.sessionID)
		return err
	}); err != nil {
		return store.Call{}, false, true, err
	}
	if api.IsFinal(sess.Status) {
		return store.Call{}, false, true, errSessionEnded
	}
	d, err := r.decide(ctx, sess, st)
	if err != nil {
		return store.Call{}, false, true, err
	}
	held := approval.Find(&sess, seq)
	base := api.Approval{CallSeq: seq, Tool: st.tool, Args: r.secrets.JSON(st.args), Rule: d.Rule, RuleReason: d.Reason}
	switch {
	case d.Action == api.ApprovalDeny && (held == nil || held.State != api.ApprovalDenied):
		// A deny rule wins over any earlier approval, even one given
		// before the rule was added.
		ev := approval.Refusal(base, r.l.clock.Now())
		c, rec, err := r.refuse(ctx, seq, st, next, *ev.Approval, ev)
		return c, rec, true, err
	case held == nil && d.Action == api.ApprovalAllow:
		return store.Call{}, false, false, nil
	case held == nil:
		base.OnTimeout = d.OnTimeout
		base.Deadline = r.l.clock.Now().Add(d.Timeout).UnixMilli()
		if err := r.hold(ctx, base); err != nil {
			return store.Call{}, false, true, err
		}
	}
	a, err := r.awaitDecision(ctx, seq)
	if err != nil {
		return store.Call{}, false, true, err
	}
	if approval.Allowed(a) {
		// A deny rule added while the call waited still refuses it.
		if err := r.retry(ctx, "read session", func() (err error) {
			sess, err = r.l.opts.Store.GetSession(ctx, r.sessionID)
			return err
		}); err != nil {
			return store.Call{}, false, true, err
		}
		if d, err = r.decide(ctx, sess, st); err != nil {
			return store.Call{}, false, true, err
		}
		if d.Action == api.ApprovalDeny {
			base.Rule, base.RuleReason = d.Rule, d.Reason
			ev := approval.Refusal(base, r.l.clock.Now())
			c, rec, err := r.refuse(ctx, seq, st, next, *ev.Approval, ev)
			return c, rec, true, err
		}
		return store.Call{}, false, false, nil
	}
	c, rec, err := r.refuse(ctx, seq, st, next, a)
	return c, rec, true, err
}

// decide evaluates the outpost's rules and the session's on the call. Rules
// that cannot be read or compiled deny it: a gate that fails open would
// let through what a rule was written to stop.
func (r *runner) decide(ctx context.Context, sess store.Session, st step) (approval.Decision, error) {
	var outpost []api.ApprovalRule
	if f := r.l.opts.ApprovalRules; f != nil {
		if err := r.retry(ctx, "read approval rules", func() (err error) {
			outpost, err = f(ctx, sess.OutpostID)
			return err
		}); err != nil {
			return approval.Decision{}, err
		}
	}
	if len(outpost) == 0 && len(sess.Spec.ApprovalRules) == 0 {
		return approval.Decision{Action: api.ApprovalAllow}, nil
	}
	set, err := approval.Compile(outpost, sess.Spec.ApprovalRules)
	if err != nil {
		r.l.log.Error("approval rules do not compile; the call is denied", "session", r.sessionID, "err", err)
		return approval.Decision{Action: api.ApprovalDeny, Rule: "invalid", Reason: "the approval rules cannot be read"}, nil
	}
	return set.Evaluate(st.tool, st.args), nil
}

// hold stores the call's pending approval, unless one is stored already
// (another runner of the session came first).
func (r *runner) hold(ctx context.Context, a api.Approval) error {
	now := r.l.clock.Now()
	var m store.Mutation
	err := r.retry(ctx, "hold call", func() (err error) {
		m, err = r.l.opts.Store.UpdateSession(ctx, r.sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
			if api.IsFinal(sess.Status) {
				return store.Mutation{}, errSessionEnded
			}
			if approval.Find(&sess, a.CallSeq) != nil {
				return store.Mutation{}, nil
			}
			evs := approval.Hold(&sess, a, now)
			return store.Mutation{Session: &sess, Events: evs}, nil
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("hold call %d for approval: %w", a.CallSeq, err)
	}
	r.committed(m)
	r.l.log.Info("tool call waits for approval", "session", r.sessionID, "call", a.CallSeq, "tool", a.Tool, "rule", a.Rule)
	return nil
}

// awaitDecision waits until held call seq is decided — by a person through
// the server, or by its timeout, which the runner decides itself — and
// returns its approval.
func (r *runner) awaitDecision(ctx context.Context, seq int64) (api.Approval, error) {
	// Subscribed before the first read, so a decision between the two is
	// not missed.
	sub := r.l.opts.Feed.Subscribe(r.sessionID)
	defer func() { sub.Close() }()
	poll := r.l.clock.NewTicker(answerPoll)
	defer poll.Stop()
	for {
		var sess store.Session
		if err := r.retry(ctx, "read approvals", func() (err error) {
			sess, err = r.l.opts.Store.GetSession(ctx, r.sessionID)
			return err
		}); err != nil {
			return api.Approval{}, err
		}
		if api.IsFinal(sess.Status) {
			return api.Approval{}, errSessionEnded
		}
		a := approval.Find(&sess, seq)
		if a == nil {
			return api.Approval{}, fmt.Errorf("held call %d has no stored approval", seq)
		}
		if a.State != api.ApprovalPending {
			return *a, nil
		}
		left := time.UnixMilli(a.Deadline).Sub(r.l.clock.Now())
		if left <= 0 {
			if err := r.timeOut(ctx, seq); err != nil {
				return api.Approval{}, err
			}
			continue
		}
		timer := r.l.clock.NewTimer(left)
		err := r.waitApprovalChange(ctx, seq, &sub, poll.Chan(), timer.Chan())
		timer.Stop()
		if err != nil {
			return api.Approval{}, err
		}
	}
}

// waitApprovalChange waits for something that may have decided call seq:
// an approval event of the call, the timeout, or the poll (a decision on
// another replica, whose feed this one does not see). Meanwhile it takes
// results of earlier calls and feeds the conversation, as execute does.
func (r *runner) waitApprovalChange(ctx context.Context, seq int64, sub *Subscription, poll, timeout <-chan time.Time) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-poll:
			return nil
		case <-timeout:
			return nil
		case ev := <-(*sub).Events():
			if ev.Type == api.EventApproval && ev.CallSeq == seq {
				return nil
			}
		case <-(*sub).Lagged():
			(*sub).Close()
			*sub = r.l.opts.Feed.Subscribe(r.sessionID)
			return nil
		case ev := <-r.feedEvents():
			r.conv.take(ev)
		case <-r.feedLagged():
			r.dropFeed(r.conv)
		case msg := <-r.results:
			if msg.frame.Seq >= seq {
				r.stash(msg)
				continue
			}
			if err := r.lateResult(ctx, msg); err != nil {
				return err
			}
		}
	}
}

// timeOut decides held call seq by its timeout, unless it was decided
// meanwhile (a person's decision that committed first stands).
func (r *runner) timeOut(ctx context.Context, seq int64) error {
	now := r.l.clock.Now()
	var m store.Mutation
	err := r.retry(ctx, "time out approval", func() (err error) {
		m, err = r.l.opts.Store.UpdateSession(ctx, r.sessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
			if api.IsFinal(sess.Status) {
				return store.Mutation{}, errSessionEnded
			}
			reason := ""
			if a := approval.Find(&sess, seq); a != nil {
				reason = approval.TimeoutReason(*a)
			}
			evs, err := approval.Decide(&sess, seq, api.ApprovalTimedOut, approval.ByTimeout, reason, now)
			if errors.Is(err, approval.ErrDecided) {
				return store.Mutation{}, nil
			}
			if err != nil {
				return store.Mutation{}, err
			}
			return store.Mutation{Session: &sess, Events: evs}, nil
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("time out the approval of call %d: %w", seq, err)
	}
	r.committed(m)
	return nil
}

// refuse completes call seq, which never reached the machine, with the
// tool error a's decision gives, writing extra events (a deny rule's
// refusal) in the same transaction.
func (r *runner) refuse(ctx context.Context, seq int64, st step, next *step, a api.Approval, extra ...api.Event) (store.Call, bool, error) {
	if msg, ok := r.early[seq]; ok {
		// Whatever a remote sent for it is not its result: it was never sent.
		delete(r.early, seq)
		_ = msg.conn.Ack(ctx, seq)
	}
	f := api.Frame{Seq: seq, OK: false, Error: approval.ToolError(a)}
	return r.complete(ctx, seq, st, resultMsg{conn: noConn{}, frame: f, events: extra}, next)
}
