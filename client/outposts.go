package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/outpost-sh/outpost/api"
)

// OutpostsService manages outposts. Wherever an outpost is named, its name
// or its id is accepted.
type OutpostsService struct{ c *Client }

// List returns every outpost, following pages to the end with the public
// fleet API's paging (first, after and end_cursor), which Outpost answers
// too.
func (s *OutpostsService) List(ctx context.Context) (*api.OutpostList, error) {
	all := &api.OutpostList{Items: []api.Outpost{}}
	cursor := ""
	for {
		q := url.Values{"first": {"200"}}
		if cursor != "" {
			q.Set("after", cursor)
		}
		var page api.OutpostList
		if err := s.c.do(ctx, http.MethodGet, "/v1/outposts", q, nil, &page); err != nil {
			return nil, err
		}
		all.Items = append(all.Items, page.Items...)
		next := page.Cursor
		if page.EndCursor != nil {
			next = *page.EndCursor
		}
		all.Total, all.Cursor, all.EndCursor = page.Total, next, page.EndCursor
		if !page.HasNextPage || next == "" || next == cursor {
			return all, nil
		}
		cursor = next
	}
}

// Get returns one outpost with its live queue depth and claim count.
func (s *OutpostsService) Get(ctx context.Context, nameOrID string) (*api.Outpost, error) {
	var o api.Outpost
	if err := s.c.do(ctx, http.MethodGet, "/v1/outposts/"+url.PathEscape(nameOrID), nil, nil, &o); err != nil {
		return nil, err
	}
	return &o, nil
}

// Create registers an outpost (orchestrator scope).
func (s *OutpostsService) Create(ctx context.Context, req api.CreateOutpostRequest) (*api.Outpost, error) {
	var o api.Outpost
	if err := s.c.do(ctx, http.MethodPost, "/v1/outposts", nil, req, &o); err != nil {
		return nil, err
	}
	return &o, nil
}

// Update changes an outpost's limits (orchestrator scope; a token limited
// to one outpost cannot): the fields req sets change, the others keep
// their values. It returns the outpost as it now is; a limit out of range
// is IsBadRequest and changes nothing.
func (s *OutpostsService) Update(ctx context.Context, nameOrID string, req api.UpdateOutpostRequest) (*api.Outpost, error) {
	var o api.Outpost
	if err := s.c.do(ctx, http.MethodPatch, "/v1/outposts/"+url.PathEscape(nameOrID), nil, req, &o); err != nil {
		return nil, err
	}
	return &o, nil
}

// Delete removes an outpost (orchestrator scope). Without force the server
// refuses (409) while sessions are claimed; with force it ends every
// unfinished session of the outpost.
func (s *OutpostsService) Delete(ctx context.Context, nameOrID string, force bool) error {
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	return s.c.do(ctx, http.MethodDelete, "/v1/outposts/"+url.PathEscape(nameOrID), q, nil, nil)
}

// SetSecret stores a secret of the outpost under name (orchestrator
// scope), replacing the value of one of that name. The answer carries the
// secret's name and times; no call ever returns a value.
func (s *OutpostsService) SetSecret(ctx context.Context, outpost, name, value string) (*api.OutpostSecret, error) {
	var sec api.OutpostSecret
	if err := s.c.do(ctx, http.MethodPut, secretPath(outpost, name), nil, api.PutOutpostSecretRequest{Value: value}, &sec); err != nil {
		return nil, err
	}
	return &sec, nil
}

// ListSecrets lists the outpost's stored secrets by name, without values
// (orchestrator scope).
func (s *OutpostsService) ListSecrets(ctx context.Context, outpost string) (*api.OutpostSecretList, error) {
	var l api.OutpostSecretList
	if err := s.c.do(ctx, http.MethodGet, "/v1/outposts/"+url.PathEscape(outpost)+"/secrets", nil, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// DeleteSecret removes one stored secret of the outpost (orchestrator
// scope); IsNotFound when it has none of that name. Sessions created
// before keep the value they were given.
func (s *OutpostsService) DeleteSecret(ctx context.Context, outpost, name string) error {
	return s.c.do(ctx, http.MethodDelete, secretPath(outpost, name), nil, nil, nil)
}

func secretPath(outpost, name string) string {
	return "/v1/outposts/" + url.PathEscape(outpost) + "/secrets/" + url.PathEscape(name)
}
