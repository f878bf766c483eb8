package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/outpost-sh/outpost/api"
)

// SessionsService creates, reads, ends and follows sessions.
type SessionsService struct{ c *Client }

// SessionFilter selects sessions. Zero fields do not filter.
type SessionFilter struct {
	// Outpost is an outpost name or id.
	Outpost string
	// Status is a session status such as api.StatusRunning.
	Status string
	// Query keeps sessions whose title contains it.
	Query string
	// Worker keeps sessions whose latest claim was this acceptor's.
	Worker string
	// ForkedFrom keeps the sessions forked from this session.
	ForkedFrom string
	// First is the page size, 1–200; zero means the server default (50).
	First int
	// Cursor continues from an earlier answer's cursor.
	Cursor string
}

// Create starts a session; it waits in its outpost's queue until claimed.
func (s *SessionsService) Create(ctx context.Context, req api.CreateSessionRequest) (*api.Session, error) {
	var out api.Session
	if err := s.c.do(ctx, http.MethodPost, "/v1/sessions", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Get returns one session.
func (s *SessionsService) Get(ctx context.Context, id string) (*api.Session, error) {
	var out api.Session
	if err := s.c.do(ctx, http.MethodGet, sessionPath(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// List returns one page of sessions, newest first.
func (s *SessionsService) List(ctx context.Context, f SessionFilter) (*api.SessionList, error) {
	q := url.Values{}
	for k, v := range map[string]string{"outpost": f.Outpost, "status": f.Status, "q": f.Query, "worker": f.Worker, "forked_from": f.ForkedFrom, "cursor": f.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.First > 0 {
		q.Set("first", strconv.Itoa(f.First))
	}
	var out api.SessionList
	if err := s.c.do(ctx, http.MethodGet, "/v1/sessions", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Update changes a session (PATCH /v1/sessions/{id}): its own network
// policy, or with a nil NetworkPolicy none, so it follows its outpost's.
func (s *SessionsService) Update(ctx context.Context, id string, req api.UpdateSessionRequest) (*api.Session, error) {
	var out api.Session
	if err := s.c.do(ctx, http.MethodPatch, "/v1/sessions/"+url.PathEscape(id), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Rerun creates a new session with the spec and secrets of session id, on
// its outpost; it returns the new session.
func (s *SessionsService) Rerun(ctx context.Context, id string) (*api.Session, error) {
	var out api.Session
	if err := s.c.do(ctx, http.MethodPost, sessionPath(id)+"/rerun", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Fork creates req.Count sessions on the outpost of session id that start
// from its workspace and transcript as they are now; it returns them.
func (s *SessionsService) Fork(ctx context.Context, id string, req api.ForkRequest) (*api.SessionList, error) {
	var out api.SessionList
	if err := s.c.do(ctx, http.MethodPost, sessionPath(id)+"/fork", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Terminate ends a session; reason may be empty.
func (s *SessionsService) Terminate(ctx context.Context, id, reason string) (*api.Session, error) {
	var out api.Session
	err := s.c.do(ctx, http.MethodPost, sessionPath(id)+"/terminate", nil, api.TerminateRequest{Reason: reason}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Suspend suspends a running session: its machine snapshots its workspace
// and is released; the call returns once the session is suspended.
func (s *SessionsService) Suspend(ctx context.Context, id string) (*api.Session, error) {
	var out api.Session
	if err := s.c.do(ctx, http.MethodPost, sessionPath(id)+"/suspend", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SuspendAsync starts a suspend as req says and returns at once (202)
// with where it stands; follow it with SuspendProgress. req.Async is set
// for the caller.
func (s *SessionsService) SuspendAsync(ctx context.Context, id string, req api.SuspendRequest) (*api.SuspendProgress, error) {
	req.Async = true
	var out api.SuspendProgress
	if err := s.c.do(ctx, http.MethodPost, sessionPath(id)+"/suspend", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SuspendProgress says where the suspend of a session stands.
func (s *SessionsService) SuspendProgress(ctx context.Context, id string) (*api.SuspendProgress, error) {
	var out api.SuspendProgress
	if err := s.c.do(ctx, http.MethodGet, sessionPath(id)+"/suspend", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Resume puts a suspended session back in its queue; the next machine
// restores its workspace.
func (s *SessionsService) Resume(ctx context.Context, id string) (*api.Session, error) {
	var out api.Session
	if err := s.c.do(ctx, http.MethodPost, sessionPath(id)+"/resume", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Send delivers a user message to an llm session, which reads it at its
// next turn, and returns the transcript event recording it.
func (s *SessionsService) Send(ctx context.Context, id, text string) (*api.Event, error) {
	var out api.Event
	if err := s.c.do(ctx, http.MethodPost, sessionPath(id)+"/messages", nil, api.MessageRequest{Text: text}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CallTool calls one of an external session's tools as its agent (an
// agent outside Outpost, agent.kind external) and returns the result once
// the call has ended. args are the tool's arguments: a value such as
// api.ExecArgs, a json.RawMessage, or nil for none. A tool that ran and
// failed is a result with OK false and Error saying why, not an error; an
// error means the call was not made or not answered: an unknown tool or
// bad arguments (IsBadRequest), no machine connected yet (IsUnavailable:
// try again), or a session that is not external or has ended. The call
// may run as long as the tool does, so only ctx bounds it, and it is never
// retried: the tool may have run.
func (s *SessionsService) CallTool(ctx context.Context, id, tool string, args any) (*api.ToolResult, error) {
	if args == nil {
		args = struct{}{}
	}
	body, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("encode the arguments of %s: %w", tool, err)
	}
	var out api.ToolResult
	if err := s.c.doOnce(ctx, http.MethodPost, sessionPath(id)+"/tools/"+url.PathEscape(tool), nil, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SpilledOutput writes to w the output of call seq (its transcript event's
// Seq) past the transcript's per-call cap, which the server keeps once the
// call ends and the transcript's note about spilled bytes points to. It is
// IsNotFound when the call spilled nothing or is still running, and IsGone
// once the retention policy deleted it with the session's artifacts.
func (s *SessionsService) SpilledOutput(ctx context.Context, id string, seq int64, w io.Writer) error {
	return s.c.download(ctx, sessionPath(id)+"/output/"+strconv.FormatInt(seq, 10), "spilled output", w)
}

// Events returns one page of a session's transcript: events with a sequence
// number above after, at most limit of them (zero means the server default).
func (s *SessionsService) Events(ctx context.Context, id string, after int64, limit int) (*api.EventList, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.EventList
	if err := s.c.do(ctx, http.MethodGet, sessionPath(id)+"/events", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// maxFollowFailures is how many reconnects in a row may fail, without a
// single event in between, before Follow gives up.
const maxFollowFailures = 10

// Follow streams a session's transcript after sequence number after and
// calls fn for each event, live, until the session's end event, which is
// passed to fn too; then it returns nil. When the stream breaks it
// reconnects and resumes after the last event seen, so fn sees each
// numbered event once. Spilled output chunks (Seq 0) are passed on but are
// not replayed after a reconnect.
//
// It returns fn's error as is when fn fails, ctx.Err() when ctx ends, and the
// last error when the server refuses the stream (4xx) or stays unreachable.
func (s *SessionsService) Follow(ctx context.Context, id string, after int64, fn func(api.Event) error) error {
	last := after
	failures := 0
	for {
		progressed, ended, err := s.followOnce(ctx, id, &last, fn)
		var fe *followFnError
		switch {
		case ended:
			return nil
		case errors.As(err, &fe):
			return fe.err
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !temporary(err):
			return err
		}
		if progressed {
			failures = 0
			continue
		}
		failures++
		if failures > maxFollowFailures {
			if err == nil {
				err = fmt.Errorf("follow session %s: the stream keeps ending without events", id)
			}
			return err
		}
		if err := s.c.retry.wait.Wait(ctx, s.c.clock, failures); err != nil {
			return err
		}
	}
}

// followFnError marks an error returned by Follow's callback.
type followFnError struct{ err error }

func (e *followFnError) Error() string { return e.err.Error() }

func (s *SessionsService) followOnce(ctx context.Context, id string, last *int64, fn func(api.Event) error) (progressed, ended bool, err error) {
	q := url.Values{}
	hdr := http.Header{}
	if *last > 0 {
		q.Set("after", strconv.FormatInt(*last, 10))
		hdr.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	resp, err := s.c.openStream(ctx, sessionPath(id)+"/events", q, hdr)
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	err = readSSE(resp.Body, func(e sseEvent) error {
		var ev api.Event
		if err := api.UnmarshalEvent(e.Data, &ev); err != nil {
			return fmt.Errorf("decode session event: %w", err)
		}
		if ev.Seq > 0 && ev.Seq <= *last {
			return nil // replayed after a reconnect
		}
		progressed = true
		if err := fn(ev); err != nil {
			return &followFnError{err: err}
		}
		if ev.Seq > 0 {
			*last = ev.Seq
		}
		if ev.Type == api.EventEnd {
			ended = true
			return errEnded
		}
		return nil
	})
	switch {
	case ended:
		return progressed, true, nil
	case err == nil:
		return progressed, false, nil
	}
	var fe *followFnError
	if errors.As(err, &fe) || ctx.Err() != nil {
		return progressed, false, err
	}
	return progressed, false, &transportError{op: "follow session " + id, err: err}
}

var errEnded = errors.New("session ended")

func sessionPath(id string) string { return "/v1/sessions/" + url.PathEscape(id) }

// NetworkRequests lists the session's network access requests that wait
// for an answer, oldest first; an ended session has none.
func (s *SessionsService) NetworkRequests(ctx context.Context, id string) ([]api.NetworkRequest, error) {
	var out api.NetworkRequestList
	if err := s.c.do(ctx, http.MethodGet, sessionPath(id)+"/network-requests", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// GrantNetworkRequest grants the session's network access request
// requestID: for the session (scope api.NetworkGrantSession or "") or for
// every session of its outpost (api.NetworkGrantOutpost). It returns the
// answered request.
func (s *SessionsService) GrantNetworkRequest(ctx context.Context, id, requestID, scope string) (*api.NetworkRequest, error) {
	var out api.NetworkRequest
	err := s.c.do(ctx, http.MethodPost, networkRequestPath(id, requestID)+"/grant", nil, api.NetworkGrantRequest{Scope: scope}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// DenyNetworkRequest denies the session's network access request
// requestID; reason, which may be empty, is what the agent reads.
func (s *SessionsService) DenyNetworkRequest(ctx context.Context, id, requestID, reason string) (*api.NetworkRequest, error) {
	var out api.NetworkRequest
	err := s.c.do(ctx, http.MethodPost, networkRequestPath(id, requestID)+"/deny", nil, api.NetworkDenyRequest{Reason: reason}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

func networkRequestPath(id, requestID string) string {
	return sessionPath(id) + "/network-requests/" + url.PathEscape(requestID)
}

// Approvals lists the session's tool calls that approval rules held or
// refused, oldest first; state, when not "", keeps those in that state
// (api.ApprovalPending: those that wait for a decision).
func (s *SessionsService) Approvals(ctx context.Context, id, state string) ([]api.Approval, error) {
	var q url.Values
	if state != "" {
		q = url.Values{"state": {state}}
	}
	var out api.ApprovalList
	if err := s.c.do(ctx, http.MethodGet, sessionPath(id)+"/approvals", q, nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// ApproveCall approves held tool call seq of the session, which then goes
// to its machine; reason may be empty. It returns the decided approval; a
// call decided already is a conflict (IsConflict).
func (s *SessionsService) ApproveCall(ctx context.Context, id string, seq int64, reason string) (*api.Approval, error) {
	return s.decideCall(ctx, id, seq, "approve", reason)
}

// DenyCall denies held tool call seq of the session: the agent gets a tool
// error with reason, and the machine never sees the call.
func (s *SessionsService) DenyCall(ctx context.Context, id string, seq int64, reason string) (*api.Approval, error) {
	return s.decideCall(ctx, id, seq, "deny", reason)
}

func (s *SessionsService) decideCall(ctx context.Context, id string, seq int64, verb, reason string) (*api.Approval, error) {
	var out api.Approval
	path := sessionPath(id) + "/calls/" + strconv.FormatInt(seq, 10) + "/" + verb
	if err := s.c.do(ctx, http.MethodPost, path, nil, api.ApprovalDecisionRequest{Reason: reason}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
