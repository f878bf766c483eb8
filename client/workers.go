package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/outpost-sh/outpost/api"
)

// WorkersService announces workers and orchestrators to the server and
// lists the connected ones. Presence is live state: an acceptor heartbeats
// every api.WorkerHeartbeatInterval (30 s) and is forgotten api.WorkerTTL
// (90 s) after its last heartbeat, or at once when it says goodbye.
type WorkersService struct{ c *Client }

func workerPath(outpost, acceptorID string) string {
	return "/v1/outposts/" + url.PathEscape(outpost) + "/workers/" + url.PathEscape(acceptorID)
}

// Heartbeat announces acceptorID as connected to outpost (a name or id),
// or refreshes it (outposts.machine scope). Call it on start and then
// every answer's HeartbeatIntervalS seconds. The answer says when the
// server forgets the acceptor without another heartbeat.
func (s *WorkersService) Heartbeat(ctx context.Context, outpost, acceptorID string, info api.WorkerInfo) (*api.Worker, error) {
	var out api.Worker
	if err := s.c.do(ctx, http.MethodPut, workerPath(outpost, acceptorID), nil, info, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Goodbye tells the server acceptorID stopped: it is listed as offline
// (with ?offline=true) from then on, for a day.
// Saying goodbye twice, or after the server forgot the acceptor, is no
// error.
func (s *WorkersService) Goodbye(ctx context.Context, outpost, acceptorID string) error {
	return s.c.do(ctx, http.MethodDelete, workerPath(outpost, acceptorID), nil, nil, nil)
}

// GoodbyeInstance is Goodbye from the process that announced instance
// (api.WorkerInfo.Instance): the server forgets the acceptor only while
// that instance holds its entry, so a process refused as a duplicate never
// removes the holder.
func (s *WorkersService) GoodbyeInstance(ctx context.Context, outpost, acceptorID, instance string) error {
	return s.c.do(ctx, http.MethodDelete, workerPath(outpost, acceptorID), url.Values{"instance": {instance}}, nil, nil)
}

// List returns the workers and orchestrators connected to outpost, sorted
// by acceptor id (outposts.machine or sessions.read scope).
func (s *WorkersService) List(ctx context.Context, outpost string) (*api.WorkerList, error) {
	var l api.WorkerList
	if err := s.c.do(ctx, http.MethodGet, "/v1/outposts/"+url.PathEscape(outpost)+"/workers", nil, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// WorkerListOptions select what ListAll returns.
type WorkerListOptions struct {
	// Outpost limits the list to one outpost (a name or id); "" lists
	// every outpost's the token may read.
	Outpost string
	// Offline adds the acceptors that went offline in the last day
	// (api.Worker.Online false), with their last heartbeat.
	Offline bool
}

// ListAll returns the workers and orchestrators of every outpost, or of
// one, sorted by outpost and acceptor id (GET /v1/workers).
func (s *WorkersService) ListAll(ctx context.Context, opts WorkerListOptions) (*api.WorkerList, error) {
	q := url.Values{}
	if opts.Outpost != "" {
		q.Set("outpost", opts.Outpost)
	}
	if opts.Offline {
		q.Set("offline", "true")
	}
	var l api.WorkerList
	if err := s.c.do(ctx, http.MethodGet, "/v1/workers", q, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Get returns one acceptor of outpost, live or offline for less than a day.
func (s *WorkersService) Get(ctx context.Context, outpost, acceptorID string) (*api.Worker, error) {
	var w api.Worker
	if err := s.c.do(ctx, http.MethodGet, workerPath(outpost, acceptorID), nil, nil, &w); err != nil {
		return nil, err
	}
	return &w, nil
}
