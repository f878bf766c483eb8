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

// Goodbye tells the server acceptorID stopped, so it is no longer listed.
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
