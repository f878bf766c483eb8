package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// AuditService reads the audit log; it needs an admin token not limited
// to an outpost.
type AuditService struct{ c *Client }

// AuditListOptions narrow a page of the audit log. Zero values leave a
// filter out.
type AuditListOptions struct {
	// First is the page size, 1 to 200; 0 is the server's default.
	First int
	// After is the EndCursor of the page before.
	After string
	// TimeAfter and TimeBefore bound the entries' times; the window is at
	// most api.MaxAuditWindowDays long.
	TimeAfter, TimeBefore time.Time
	// Action keeps one action (outpost.create, login, …).
	Action string
	// Actor keeps the entries whose actor has this id or name.
	Actor string
}

// List returns a page of the audit log, newest first.
func (s *AuditService) List(ctx context.Context, opts AuditListOptions) (*api.AuditLogList, error) {
	q := url.Values{}
	if opts.First > 0 {
		q.Set("first", strconv.Itoa(opts.First))
	}
	if opts.After != "" {
		q.Set("after", opts.After)
	}
	if !opts.TimeAfter.IsZero() {
		q.Set("time_after", strconv.FormatInt(opts.TimeAfter.Unix(), 10))
	}
	if !opts.TimeBefore.IsZero() {
		q.Set("time_before", strconv.FormatInt(opts.TimeBefore.Unix(), 10))
	}
	if opts.Action != "" {
		q.Set("action", opts.Action)
	}
	if opts.Actor != "" {
		q.Set("actor", opts.Actor)
	}
	var l api.AuditLogList
	if err := s.c.do(ctx, http.MethodGet, api.AuditLogsPath, q, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Verify has the server check the audit log's hash chain.
func (s *AuditService) Verify(ctx context.Context) (*api.AuditVerification, error) {
	var v api.AuditVerification
	if err := s.c.do(ctx, http.MethodGet, api.AuditLogsVerifyPath, nil, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}
