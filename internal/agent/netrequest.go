package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/netpolicy"
	"github.com/outpost-sh/outpost/internal/redact"
	"github.com/outpost-sh/outpost/internal/store"
)

// A network access request (network_access_request) is the one tool call
// the control plane answers itself. The call is recorded like any other,
// with a network_request event (state pending) in the same transaction;
// it never goes to the remote. A person answers through the server, which
// completes the call — result, network_request event, policy change — in
// one transaction under the outposts lock. The runner only waits for that
// result, so a pending request survives restarts of the server and of the
// runner: it is the stored call that has no result yet.

// answerPoll is how often a runner waiting for an answer reads the store,
// a backstop for an answer committed on another replica, whose feed this
// one does not see.
const answerPoll = 2 * time.Second

// networkRequestEvent is the pending network_request event of call seq, or
// false when args are not a valid request (the call then gets an error
// result instead). Domains and reason are shown with secret values
// redacted, as the call's arguments are.
func networkRequestEvent(now time.Time, seq int64, args json.RawMessage, red *redact.Set) (api.Event, bool) {
	a, err := netpolicy.ParseRequest(args)
	if err != nil {
		return api.Event{}, false
	}
	return api.Event{Type: api.EventNetworkRequest, Time: now.UnixMilli(), CallSeq: seq, Tool: api.ToolNetworkAccessRequest,
		NetworkRequest: &api.NetworkRequest{ID: strconv.FormatInt(seq, 10), Domains: redactAll(red, a.Domains), Reason: red.String(a.Reason),
			State: api.NetworkRequestPending}}, true
}

// redactAll is each of list, normalized (lower-case) domains, with secret
// values redacted in any case the agent wrote them.
func redactAll(red *redact.Set, list []string) []string {
	red = red.Folded()
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = red.String(s)
	}
	return out
}

// noConn stands for the remote of a result the runner makes itself; there
// is nothing to acknowledge.
type noConn struct{}

func (noConn) Call(context.Context, int64, string, json.RawMessage) error { return nil }
func (noConn) Ack(context.Context, int64) error                           { return nil }
func (noConn) Done() <-chan struct{}                                      { return nil }

// awaitAnswer is execute for a call the control plane answers: it waits
// until the call has its result in the store. A call whose arguments are
// not a valid request (a script step, checked again here) fails at once.
func (r *runner) awaitAnswer(ctx context.Context, seq int64, st step) (store.Call, bool, error) {
	delete(r.early, seq) // a remote never ran it: whatever it sent is not the answer (its output is written)
	if _, err := netpolicy.ParseRequest(st.args); err != nil {
		f := api.Frame{Seq: seq, OK: false, Error: fmt.Sprintf("The arguments of %s are not valid: %v.", st.tool, err)}
		return r.complete(ctx, seq, st, resultMsg{conn: noConn{}, frame: f}, nil)
	}
	// Subscribed before the first read, so an answer between the two is
	// not missed.
	sub := r.l.opts.Feed.Subscribe(r.sessionID)
	defer func() { sub.Close() }()
	poll := r.l.clock.NewTicker(answerPoll)
	defer poll.Stop()
	for {
		var c store.Call
		if err := r.retry(ctx, "read calls", func() (err error) {
			c, err = r.storedCall(ctx, seq)
			return err
		}); err != nil {
			return store.Call{}, false, err
		}
		if c.Done {
			if r.conv != nil {
				r.conv.takeCalls([]store.Call{c})
			}
			if hook := r.l.opts.OnToolCall; hook != nil {
				hook(st.tool, c.OK)
			}
			return c, false, nil
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return store.Call{}, false, ctx.Err()
			case <-poll.Chan():
				break wait
			case ev := <-sub.Events():
				if ev.Type == api.EventResult && ev.CallSeq == seq {
					break wait
				}
			case <-sub.Lagged():
				sub.Close()
				sub = r.l.opts.Feed.Subscribe(r.sessionID)
				break wait
			case ev := <-r.feedEvents():
				r.conv.take(ev)
			case <-r.feedLagged():
				r.dropFeed(r.conv)
			case msg := <-r.results:
				switch {
				case msg.frame.Seq == seq:
					r.keepOutput(msg)
					_ = msg.conn.Ack(ctx, seq) // not the remote's to answer
				case msg.frame.Seq > seq:
					r.stash(msg)
				default:
					if err := r.lateResult(ctx, msg); err != nil {
						return store.Call{}, false, err
					}
				}
			}
		}
	}
}

// storedCall reads call seq of the session from the store.
func (r *runner) storedCall(ctx context.Context, seq int64) (store.Call, error) {
	calls, err := r.l.opts.Store.ListCalls(ctx, r.sessionID)
	if err != nil {
		return store.Call{}, err
	}
	for _, c := range calls {
		if c.Seq == seq {
			return c, nil
		}
	}
	return store.Call{}, fmt.Errorf("call %d is not in the store", seq)
}
