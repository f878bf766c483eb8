package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/outpost-sh/outpost/api"
)

// DeviceGrant shows the device login waiting with userCode (admin): what
// asks, from where, for which scopes and outpost. Each wrong code counts
// against the calling token, which is refused for a while after too many.
func (s *TokensService) DeviceGrant(ctx context.Context, userCode string) (*api.DeviceGrant, error) {
	var g api.DeviceGrant
	if err := s.c.do(ctx, http.MethodGet, api.DeviceGrantPath, url.Values{"user_code": {userCode}}, nil, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// ApproveDevice approves the device login waiting with userCode (admin):
// its client receives a token with the scopes it asked (else the caller's),
// never more than the caller holds, limited as the caller is.
func (s *TokensService) ApproveDevice(ctx context.Context, userCode string) (*api.DeviceGrant, error) {
	var g api.DeviceGrant
	if err := s.c.do(ctx, http.MethodPost, api.DeviceApprovePath, nil, api.DeviceDecisionRequest{UserCode: userCode}, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// DenyDevice denies the device login waiting with userCode (admin).
func (s *TokensService) DenyDevice(ctx context.Context, userCode string) (*api.DeviceGrant, error) {
	var g api.DeviceGrant
	if err := s.c.do(ctx, http.MethodPost, api.DeviceDenyPath, nil, api.DeviceDecisionRequest{UserCode: userCode}, &g); err != nil {
		return nil, err
	}
	return &g, nil
}
