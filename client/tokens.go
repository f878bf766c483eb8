package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/outpost-sh/outpost/api"
)

// TokensService manages API tokens; it needs the admin scope, but for
// WhoAmI.
type TokensService struct{ c *Client }

// Create issues a token. The answer's Secret is shown only this once.
func (s *TokensService) Create(ctx context.Context, req api.CreateTokenRequest) (*api.CreateTokenResponse, error) {
	var t api.CreateTokenResponse
	if err := s.c.do(ctx, http.MethodPost, "/v1/tokens", nil, req, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// List returns every token, without secrets.
func (s *TokensService) List(ctx context.Context) (*api.TokenList, error) {
	var l api.TokenList
	if err := s.c.do(ctx, http.MethodGet, "/v1/tokens", nil, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Revoke revokes a token at once.
func (s *TokensService) Revoke(ctx context.Context, id string) error {
	return s.c.do(ctx, http.MethodDelete, "/v1/tokens/"+url.PathEscape(id), nil, nil, nil)
}

// WhoAmI returns the token the client calls with: its scopes, outpost
// restriction and expiry. Any valid token may ask.
func (s *TokensService) WhoAmI(ctx context.Context) (*api.WhoAmI, error) {
	var me api.WhoAmI
	if err := s.c.do(ctx, http.MethodGet, "/v1/whoami", nil, nil, &me); err != nil {
		return nil, err
	}
	return &me, nil
}
