package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/identity"
	"github.com/outpost-sh/outpost/internal/store"
)

// userPrincipal narrows p, made from token t of a user, to what that user
// may do now: a user refused by the identity provider has no valid token,
// a sign-in token (no scopes of its own) acts with the user's roles, and
// any other token keeps only the scopes its user still holds.
func (s *Server) userPrincipal(ctx context.Context, p principal, t store.Token) (principal, error) {
	u, err := s.store.GetUser(ctx, t.UserID)
	if errors.Is(err, store.ErrNotFound) {
		return principal{}, errUnauthorized("The user of this API token no longer exists.")
	}
	if err != nil {
		return principal{}, fmt.Errorf("get user %s: %w", t.UserID, err)
	}
	if u.DisabledAt == nil && s.sso != nil {
		if u, err = s.sso.recheck(ctx, s, u); err != nil {
			return principal{}, err
		}
	}
	if u.DisabledAt != nil {
		return principal{}, errUnauthorized("The identity provider no longer admits the user of this API token; sign in again.")
	}
	g, err := s.userGrants(ctx, u)
	if err != nil {
		return principal{}, err
	}
	p.User = &principalUser{ID: u.ID, Name: u.Name, Email: u.Email}
	global := api.RoleScopes(g.Role)
	per := make(map[string][]string, len(g.Outposts))
	for id, r := range g.Outposts {
		per[id] = api.RoleScopes(r)
	}
	if len(t.Scopes) == 0 && t.OutpostID != "" {
		// A token of the person's limited to one outpost: what the person
		// may do there, and nowhere else.
		p.scopes, p.Role = append(slices.Clone(global), per[t.OutpostID]...), g.Role
		return p, nil
	}
	if len(t.Scopes) == 0 {
		p.scopes, p.outposts, p.Role = global, per, g.Role
		return p, nil
	}
	keep := func(allowed []string) []string {
		return slices.DeleteFunc(slices.Clone(t.Scopes), func(sc string) bool { return !api.HasScope(allowed, sc) })
	}
	if t.OutpostID != "" {
		p.scopes = keep(append(slices.Clone(global), per[t.OutpostID]...))
		return p, nil
	}
	p.scopes, p.outposts = keep(global), map[string][]string{}
	for id, sc := range per {
		if k := keep(sc); len(k) > 0 {
			p.outposts[id] = k
		}
	}
	return p, nil
}

// userGrants resolves the roles of user u: its bindings, its groups' and
// the groups' roles of the server's configuration.
func (s *Server) userGrants(ctx context.Context, u store.User) (identity.Grants, error) {
	bs, err := s.roleBindings(ctx)
	if err != nil {
		return identity.Grants{}, err
	}
	list := make([]identity.Binding, 0, len(bs))
	for _, b := range bs {
		list = append(list, identity.Binding{Role: b.Role, SubjectKind: b.SubjectKind, Subject: b.Subject, OutpostID: b.OutpostID})
	}
	return identity.Resolve(list, u.ID, u.Groups), nil
}

// roleBindings are the stored role bindings and those of the server's
// configuration (no id).
func (s *Server) roleBindings(ctx context.Context) ([]store.RoleBinding, error) {
	bs, err := s.store.ListRoleBindings(ctx)
	if err != nil {
		return nil, fmt.Errorf("list role bindings: %w", err)
	}
	if s.sso != nil {
		bs = append(bs, s.sso.groupRoles...)
	}
	return bs, nil
}

// oneOrEvery wraps h, whose answers are scoped by a token's one outpost
// (principal.outpostID) or else cover every outpost: a user whose scopes
// hold on some outposts only, by roles there, is refused, as it would
// otherwise see and change every outpost's.
func oneOrEvery(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if p := principalFrom(r.Context()); p.outpostID == "" && p.limited() {
			return errForbidden("This needs the %s scope on every outpost, or a token limited to one outpost; this one holds it on some only.", strings.Join(p.need, " or "))
		}
		return h(w, r)
	}
}

// everywhere wraps h, a route about the whole server (users, roles): a
// caller who holds its scope on some outposts only, by a token limited to
// one or by a user's per-outpost role, is refused, so an admin of one
// outpost cannot make itself an admin of all.
func everywhere(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if principalFrom(r.Context()).limited() {
			return errForbidden("This needs the %s scope on every outpost; this token holds it on some only.", strings.Join(principalFrom(r.Context()).need, " or "))
		}
		return h(w, r)
	}
}

// onlyOutpost is the outpost a principal whose roles are per outpost
// lists by default: its one outpost, or none when it has several.
func (s *Server) onlyOutpost(p principal) (string, error) {
	var ids []string
	for id, sc := range p.outposts {
		if slices.ContainsFunc(p.need, func(n string) bool { return api.HasScope(sc, n) }) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 1 {
		return ids[0], nil
	}
	return "", errBadRequest("Your roles for this are per outpost: name the outpost with the outpost query parameter.")
}

// listUsers answers GET /v1/users: every user with the bindings that apply
// to it.
func (s *Server) listUsers(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	users, err := s.store.ListUsers(ctx)
	if err != nil {
		return fmt.Errorf("list users: %w", err)
	}
	bs, err := s.roleBindings(ctx)
	if err != nil {
		return err
	}
	names, err := s.outpostNamesByID(ctx)
	if err != nil {
		return err
	}
	list := api.UserList{Items: []api.User{}}
	for _, u := range users {
		au := api.User{ID: u.ID, Subject: u.Subject, Email: u.Email, Name: u.Name, Groups: u.Groups,
			CreatedAt: u.CreatedAt.Unix(), LastLoginAt: u.LastLoginAt.Unix(), DisabledAt: unixPtr(u.DisabledAt), Roles: []api.RoleBinding{}}
		for _, b := range bs {
			if (b.SubjectKind == api.SubjectUser && b.Subject == u.ID) || (b.SubjectKind == api.SubjectGroup && slices.Contains(u.Groups, b.Subject)) {
				au.Roles = append(au.Roles, toAPIRoleBinding(b, names))
			}
		}
		list.Items = append(list.Items, au)
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// outpostNamesByID maps outpost ids to names.
func (s *Server) outpostNamesByID(ctx context.Context) (map[string]string, error) {
	all, err := s.store.ListOutposts(ctx)
	if err != nil {
		return nil, fmt.Errorf("list outposts: %w", err)
	}
	names := make(map[string]string, len(all))
	for _, o := range all {
		names[o.ID] = o.Name
	}
	return names, nil
}

func toAPIRoleBinding(b store.RoleBinding, names map[string]string) api.RoleBinding {
	return api.RoleBinding{ID: b.ID, Role: b.Role, SubjectKind: b.SubjectKind, Subject: b.Subject,
		OutpostID: b.OutpostID, Outpost: names[b.OutpostID], CreatedAt: b.CreatedAt.Unix()}
}

// listRoleBindings answers GET /v1/role-bindings.
func (s *Server) listRoleBindings(w http.ResponseWriter, r *http.Request) error {
	bs, err := s.roleBindings(r.Context())
	if err != nil {
		return err
	}
	names, err := s.outpostNamesByID(r.Context())
	if err != nil {
		return err
	}
	list := api.RoleBindingList{Items: []api.RoleBinding{}}
	for _, b := range bs {
		list.Items = append(list.Items, toAPIRoleBinding(b, names))
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// createRoleBinding answers POST /v1/role-bindings.
func (s *Server) createRoleBinding(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var req api.CreateRoleBindingRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if api.RoleRank(req.Role) < 0 {
		return errBadRequest("role %q is unknown; roles are %s.", req.Role, strings.Join(api.Roles, ", "))
	}
	if (req.User == "") == (req.Group == "") {
		return errBadRequest("Give exactly one of user (a user's id or email) and group (a group's name as the identity provider sends it).")
	}
	if len(req.Group) > 200 {
		return errBadRequest("group is longer than 200 characters.")
	}
	b := store.RoleBinding{ID: newID("rb_"), Role: req.Role, SubjectKind: api.SubjectGroup, Subject: req.Group, CreatedAt: s.now()}
	if req.User != "" {
		u, err := s.findUser(ctx, req.User)
		if err != nil {
			return err
		}
		b.SubjectKind, b.Subject = api.SubjectUser, u.ID
	}
	names := map[string]string{}
	if req.Outpost != "" {
		o, err := s.resolveOutpost(ctx, req.Outpost)
		if err != nil {
			return err
		}
		b.OutpostID, names[o.ID] = o.ID, o.Name
	}
	actx := s.audited(ctx, audit.RoleGrant, audit.Object{Kind: audit.ObjectRoleBinding, ID: b.ID},
		map[string]string{"role": b.Role, "subject_kind": b.SubjectKind, "subject": b.Subject, "outpost_id": b.OutpostID}, nil)
	if err := s.store.CreateRoleBinding(actx, b); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return errConflict("This role is already given to this %s there.", b.SubjectKind)
		}
		return fmt.Errorf("create role binding: %w", err)
	}
	s.log.Info("role granted", "id", b.ID, "role", b.Role, "subject_kind", b.SubjectKind, "subject", b.Subject, "outpost", b.OutpostID)
	writeJSON(w, http.StatusCreated, toAPIRoleBinding(b, names))
	return nil
}

// findUser finds a user by id or email.
func (s *Server) findUser(ctx context.Context, ref string) (store.User, error) {
	users, err := s.store.ListUsers(ctx)
	if err != nil {
		return store.User{}, fmt.Errorf("list users: %w", err)
	}
	for _, u := range users {
		if u.ID == ref || (u.Email != "" && strings.EqualFold(u.Email, ref)) {
			return u, nil
		}
	}
	return store.User{}, errNotFound("User %q does not exist: a user exists once it has signed in.", ref)
}

// deleteRoleBinding answers DELETE /v1/role-bindings/{binding}.
func (s *Server) deleteRoleBinding(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("binding")
	actx := s.audited(r.Context(), audit.RoleRevoke, audit.Object{Kind: audit.ObjectRoleBinding, ID: id}, nil, nil)
	if err := s.store.DeleteRoleBinding(actx, id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errNotFound("Role binding %s does not exist.", id)
		}
		return fmt.Errorf("delete role binding %s: %w", id, err)
	}
	s.log.Info("role revoked", "id", id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// endSignIn answers DELETE /v1/auth/session: it revokes the caller's token
// when it is a sign-in's (the web UI's sign-out), and refuses any other, so
// that signing out of the UI with a pasted token does not revoke it.
func (s *Server) endSignIn(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	t, err := s.store.TokenByHash(ctx, hashSecret(bearer(r)))
	if err != nil {
		return fmt.Errorf("look up the caller's token: %w", err)
	}
	if t.UserID == "" || len(t.Scopes) > 0 {
		return errBadRequest("This API token is not a sign-in's; revoke it with DELETE /v1/tokens/%s.", t.ID)
	}
	if err := s.store.RevokeToken(ctx, t.ID, s.now()); err != nil {
		return fmt.Errorf("revoke token %s: %w", t.ID, err)
	}
	s.log.Info("signed out", "token", t.ID, "user", t.UserID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
