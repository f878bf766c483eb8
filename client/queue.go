package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// QueueService is the fleet API: the queue of sessions waiting for, or held
// by, workers and orchestrators.
type QueueService struct{ c *Client }

// QueueFilter selects queue entries. Zero fields do not filter.
type QueueFilter struct {
	// Outpost is an outpost name or id.
	Outpost string
	// Phase is api.PhasePending or api.PhaseClaimed.
	Phase      string
	AcceptorID string
	// First is the page size, 1–200; zero means the server default (100).
	First int
	// Cursor continues from an earlier answer's cursor.
	Cursor string
	// Order is "" (oldest change first, paged by Cursor) or "priority":
	// the claim order, higher priority first, then oldest, without a
	// Cursor.
	Order string
}

func (f QueueFilter) values() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("outpost", f.Outpost)
	set("phase", f.Phase)
	set("acceptor_id", f.AcceptorID)
	set("cursor", f.Cursor)
	set("order", f.Order)
	if f.First > 0 {
		q.Set("first", strconv.Itoa(f.First))
	}
	return q
}

// List returns one page of queue entries. While the answer's HasNextPage is
// true, pass its Cursor in the next filter; when it is false, its Cursor is
// where to start a Watch.
func (s *QueueService) List(ctx context.Context, f QueueFilter) (*api.QueueList, error) {
	var l api.QueueList
	if err := s.c.do(ctx, http.MethodGet, "/v1/queue", f.values(), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Get returns one queue entry; IsNotFound(err) once it is gone.
func (s *QueueService) Get(ctx context.Context, sessionID string) (*api.QueueEntry, error) {
	var e api.QueueEntry
	if err := s.c.do(ctx, http.MethodGet, "/v1/queue/"+url.PathEscape(sessionID), nil, nil, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// Claim claims a session for acceptorID, or renews the claim when
// acceptorID already holds it. The answer carries the connect token, the
// gateway URL and the claim deadline. IsConflict(err) when another acceptor
// holds it.
func (s *QueueService) Claim(ctx context.Context, sessionID, acceptorID string) (*api.QueueEntry, error) {
	var e api.QueueEntry
	err := s.c.do(ctx, http.MethodPost, "/v1/queue/"+url.PathEscape(sessionID)+"/claim", nil,
		api.ClaimRequest{AcceptorID: acceptorID}, &e)
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// ClaimNext asks the server to claim for req.AcceptorID the next pending
// session of outpost (a name or id) in claim order, and returns it as Claim
// does; nil and no error when none is claimable. Concurrent claimers get
// different sessions, so they never race for one. A server without the
// endpoint answers 404 (IsNotFound), as it does for an unknown outpost.
func (s *QueueService) ClaimNext(ctx context.Context, outpost string, req api.ClaimNextRequest) (*api.QueueEntry, error) {
	var e api.QueueEntry
	err := s.c.do(ctx, http.MethodPost, "/v1/outposts/"+url.PathEscape(outpost)+"/queue:claim", nil, req, &e)
	if err != nil {
		return nil, err
	}
	if e.Metadata.SessionID == "" {
		return nil, nil // 204: nothing to claim
	}
	return &e, nil
}

// ClaimNextWaiting is ClaimNext for a request with a WaitSeconds: the
// server may hold it that long for a session to become pending. waits
// reports whether the server parks such requests (api.HeaderClaimWait on
// its answer); an older one answers at once, and a claimer should then
// not ask again before something changes. ctx's deadline, when it has
// none, is the wait and a minute more.
func (s *QueueService) ClaimNextWaiting(ctx context.Context, outpost string, req api.ClaimNextRequest) (_ *api.QueueEntry, waits bool, _ error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.WaitSeconds)*time.Second+time.Minute)
		defer cancel()
	}
	var a claimAnswer
	err := s.c.do(ctx, http.MethodPost, "/v1/outposts/"+url.PathEscape(outpost)+"/queue:claim", nil, req, &a)
	if err != nil {
		return nil, a.waits, err
	}
	if a.entry.Metadata.SessionID == "" {
		return nil, a.waits, nil // 204: nothing to claim
	}
	return &a.entry, a.waits, nil
}

// claimAnswer is a claim-next's answer and whether its server parks
// requests.
type claimAnswer struct {
	entry api.QueueEntry
	waits bool
}

func (a *claimAnswer) readHeader(h http.Header) { a.waits = h.Get(api.HeaderClaimWait) != "" }

func (a *claimAnswer) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &a.entry) }

// Release gives a claim back so the session requeues at once.
// IsConflict(err) when acceptorID does not hold the claim.
func (s *QueueService) Release(ctx context.Context, sessionID, acceptorID string) (*api.QueueEntry, error) {
	return s.ReleaseWithReason(ctx, sessionID, acceptorID, "")
}

// ReleaseWithReason is Release saying why the claim is given back (for
// example why provisioning failed); the reason goes onto the session's
// status and transcript.
func (s *QueueService) ReleaseWithReason(ctx context.Context, sessionID, acceptorID, reason string) (*api.QueueEntry, error) {
	return s.ReleaseRequest(ctx, sessionID, api.ClaimRequest{AcceptorID: acceptorID, Reason: reason})
}

// ReleaseRequest is Release with the whole request: the acceptor, the
// reason and whether the claimer is shutting down (then the release is not
// a failed attempt of the session).
func (s *QueueService) ReleaseRequest(ctx context.Context, sessionID string, req api.ClaimRequest) (*api.QueueEntry, error) {
	var e api.QueueEntry
	err := s.c.do(ctx, http.MethodPost, "/v1/queue/"+url.PathEscape(sessionID)+"/release", nil, req, &e)
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// MachineEvent puts a provisioning step of the session's machine onto its
// transcript. Only the claim's holder may report; IsConflict(err) otherwise.
func (s *QueueService) MachineEvent(ctx context.Context, sessionID string, req api.MachineEventRequest) (*api.Event, error) {
	var ev api.Event
	err := s.c.do(ctx, http.MethodPost, "/v1/queue/"+url.PathEscape(sessionID)+"/events", nil, req, &ev)
	if err != nil {
		return nil, err
	}
	return &ev, nil
}

// Watch streams the changes of outpost's queue (all outposts when empty)
// after cursor and calls fn for each, in order. An empty cursor replays from
// the beginning, so list first and watch from the list's final cursor. A
// cursor the server did not issue (another deployment's, or one from
// before its database was reset) starts the stream with the current live
// entries instead (see api.HeaderWatchRelist), so treat events as upserts.
//
// Watch returns nil when the server ends the stream, which it does within
// five minutes: callers loop, passing the cursor of the last event they
// processed. It returns fn's error as is when fn fails, and ctx.Err() when
// ctx ends. The connection is not retried here.
func (s *QueueService) Watch(ctx context.Context, outpost, cursor string, fn func(api.WatchEvent) error) error {
	return s.watch(ctx, outpost, cursor, "", fn)
}

// WatchHeld is Watch narrowed to the entries acceptor holds
// (api.QueryHeldBy): the changes of the entries claimed by it, the change
// ending each claim the stream showed, and bookmark events
// (api.WatchBookmark, Cursor alone) past the rest, to resume from. A
// claimer that takes sessions through waiting claim-next requests
// (ClaimNextWaiting) needs nothing more, and a new session then costs the
// server one write, not one for each idle claimer. A server older than
// the parameter sends the whole stream.
func (s *QueueService) WatchHeld(ctx context.Context, outpost, acceptor, cursor string, fn func(api.WatchEvent) error) error {
	if acceptor == "" {
		return errors.New("watch held: no acceptor")
	}
	return s.watch(ctx, outpost, cursor, acceptor, fn)
}

func (s *QueueService) watch(ctx context.Context, outpost, cursor, heldBy string, fn func(api.WatchEvent) error) error {
	q := url.Values{"watch": {"true"}}
	if outpost != "" {
		q.Set("outpost", outpost)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if heldBy != "" {
		q.Set(api.QueryHeldBy, heldBy)
	}
	resp, err := s.c.openStream(ctx, "/v1/queue", q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var fnErr error
	err = readSSE(resp.Body, func(e sseEvent) error {
		var ev api.WatchEvent
		if err := json.Unmarshal(e.Data, &ev); err != nil {
			return fmt.Errorf("decode watch event: %w", err)
		}
		if err := fn(ev); err != nil {
			fnErr = err
			return err
		}
		return nil
	})
	switch {
	case fnErr != nil:
		return fnErr
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return &transportError{op: "watch queue", err: err}
	}
	return nil
}
