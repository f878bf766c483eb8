package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/outpost-sh/outpost/api"
)

// UsersService lists the users who signed in through the server's
// OpenID Connect provider and manages role bindings; it needs the admin
// scope.
type UsersService struct{ c *Client }

// List returns every user with the roles that apply to it.
func (s *UsersService) List(ctx context.Context) (*api.UserList, error) {
	var l api.UserList
	if err := s.c.do(ctx, http.MethodGet, "/v1/users", nil, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Roles returns every role binding, those of the server's configuration
// (without an id) included.
func (s *UsersService) Roles(ctx context.Context) (*api.RoleBindingList, error) {
	var l api.RoleBindingList
	if err := s.c.do(ctx, http.MethodGet, "/v1/role-bindings", nil, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Grant gives a role to a user or a group.
func (s *UsersService) Grant(ctx context.Context, req api.CreateRoleBindingRequest) (*api.RoleBinding, error) {
	var b api.RoleBinding
	if err := s.c.do(ctx, http.MethodPost, "/v1/role-bindings", nil, req, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// Revoke removes a role binding.
func (s *UsersService) Revoke(ctx context.Context, id string) error {
	return s.c.do(ctx, http.MethodDelete, "/v1/role-bindings/"+url.PathEscape(id), nil, nil, nil)
}
