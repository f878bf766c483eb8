package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/store"
)

// maxExpiresInS bounds expires_in_s: a larger value would overflow the
// duration it becomes and give a token that expires at a wrong time.
const maxExpiresInS = 100 * 365 * 24 * 60 * 60

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var req api.CreateTokenRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.Session != "" {
		return s.createSessionToken(w, r, req)
	}
	// Only a session's token may be made with sessions.write (the route
	// takes either): any other needs admin.
	p := principalFrom(ctx)
	if !p.has(api.ScopeAdmin) {
		return errForbidden("This token lacks the admin scope.")
	}
	p.need = []string{api.ScopeAdmin}
	ctx = context.WithValue(ctx, principalKey{}, p)
	if req.Role != "" {
		if api.RoleRank(req.Role) < 0 {
			return errBadRequest("role %q is unknown; roles are %s.", req.Role, strings.Join(api.Roles, ", "))
		}
		if len(req.Scopes) > 0 {
			return errBadRequest("Give scopes or a role, not both: a role stands for its scopes.")
		}
		req.Scopes = api.RoleScopes(req.Role)
	}
	if len(req.Scopes) == 0 {
		return errBadRequest("scopes or role is required; scopes are %s, roles %s.", strings.Join(api.Scopes, ", "), strings.Join(api.Roles, ", "))
	}
	for _, sc := range req.Scopes {
		if !slices.Contains(api.Scopes, sc) {
			return errBadRequest("Scope %q is unknown; scopes are %s.", sc, strings.Join(api.Scopes, ", "))
		}
	}
	if len(req.Name) > 200 {
		return errBadRequest("name is longer than 200 characters.")
	}
	if req.ExpiresInS < 0 || req.ExpiresInS > maxExpiresInS {
		return errBadRequest("expires_in_s must be between 0 and %d (100 years).", int64(maxExpiresInS))
	}
	if p.User != nil && req.ServiceAccount && !api.HasScope(p.scopes, api.ScopeAdmin) {
		return errForbidden("Only an admin everywhere may create a service account's token.")
	}
	var o store.Outpost
	if req.Outpost != "" {
		var err error
		if o, err = s.resolveOutpost(ctx, req.Outpost); err != nil {
			return err
		}
	}
	for _, sc := range req.Scopes {
		if p.User != nil {
			// A user's token never exceeds the user: what it holds
			// everywhere, and on the token's outpost.
			held := p.scopes
			if o.ID != "" {
				held = append(slices.Clone(p.scopes), p.outposts[o.ID]...)
			}
			if !api.HasScope(held, sc) {
				where := "everywhere (set outpost to limit the token to an outpost where you hold it)"
				if o.ID != "" {
					where = "on outpost " + o.Name
				}
				return errForbidden("You (%s) do not hold the %s scope %s, so a token you create cannot hold it.", p.User.Email, sc, where)
			}
			continue
		}
		if !p.has(sc) {
			return errForbidden("This token does not hold the %s scope, so it cannot give it to another token.", sc)
		}
	}
	if p.outpostID != "" && req.Outpost == "" {
		own, err := s.ownOutpostName(ctx, p)
		if err != nil {
			return err
		}
		return errForbidden("This token is limited to outpost %s, so every token it creates must be limited to that outpost too: set outpost to %q.", own, own)
	}
	now := s.now()
	t := store.Token{ID: newID("tok_"), Name: req.Name, Scopes: slices.Compact(slices.Sorted(slices.Values(req.Scopes))), CreatedAt: now, Role: req.Role}
	if p.User != nil && !req.ServiceAccount {
		t.UserID = p.User.ID
	}
	t.OutpostID = o.ID
	outpost := o.Name
	if req.ExpiresInS > 0 {
		exp := now.Add(time.Duration(req.ExpiresInS) * time.Second)
		t.ExpiresAt = &exp
	}
	// A token cannot outlive itself through the tokens it creates.
	if p.expiresAt != nil && (t.ExpiresAt == nil || t.ExpiresAt.After(*p.expiresAt)) {
		left := int64(p.expiresAt.Sub(now) / time.Second)
		return errForbidden("This token expires at %s, so every token it creates must expire by then: set expires_in_s to at most %d.", p.expiresAt.UTC().Format(time.RFC3339), left)
	}
	secret := newSecret("opt_")
	t.Hash = hashSecret(secret)
	// The entry holds what the token may do, never its secret.
	details := map[string]any{"name": t.Name, "scopes": t.Scopes, "outpost_id": t.OutpostID}
	if t.ExpiresAt != nil {
		details["expires_at"] = t.ExpiresAt.Unix()
	}
	actx := s.audited(ctx, audit.TokenCreate, audit.Object{Kind: audit.ObjectToken, ID: t.ID}, details, nil)
	if err := s.store.CreateToken(actx, t); err != nil {
		return fmt.Errorf("create token: %w", err)
	}
	s.log.Info("token created", "id", t.ID, "name", t.Name, "scopes", t.Scopes, "role", t.Role, "user", t.UserID, "outpost", t.OutpostID)
	at := toAPIToken(t)
	at.Outpost = outpost
	writeJSON(w, http.StatusCreated, api.CreateTokenResponse{Token: at, Secret: secret})
	return nil
}

// ownOutpostName is the name of the outpost p is limited to, or its id when
// that outpost was deleted.
func (s *Server) ownOutpostName(ctx context.Context, p principal) (string, error) {
	o, err := s.store.GetOutpost(ctx, p.outpostID)
	if errors.Is(err, store.ErrNotFound) {
		return p.outpostID, nil
	}
	if err != nil {
		return "", fmt.Errorf("get outpost %s: %w", p.outpostID, err)
	}
	return o.Name, nil
}

// listTokens lists the tokens the caller may see: every token for an
// unlimited one, the tokens limited to the same outpost for a limited one.
func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	all, err := s.store.ListTokens(r.Context())
	if err != nil {
		return fmt.Errorf("list tokens: %w", err)
	}
	outposts, err := s.store.ListOutposts(r.Context())
	if err != nil {
		return fmt.Errorf("list outposts: %w", err)
	}
	names := make(map[string]string, len(outposts))
	for _, o := range outposts {
		names[o.ID] = o.Name
	}
	list := api.TokenList{Items: []api.Token{}}
	for _, t := range all {
		if !p.allowsToken(t) {
			continue
		}
		at := toAPIToken(t)
		at.Outpost = names[t.OutpostID]
		list.Items = append(list.Items, at)
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// revokeToken revokes a token the caller may see; any other answers as a
// missing one. A token's outpost never changes, so checking it before the
// revocation cannot be raced.
func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("token")
	if p := principalFrom(r.Context()); p.limited() {
		all, err := s.store.ListTokens(r.Context())
		if err != nil {
			return fmt.Errorf("list tokens: %w", err)
		}
		i := slices.IndexFunc(all, func(t store.Token) bool { return t.ID == id })
		if i < 0 || !p.allowsToken(all[i]) {
			return errNotFound("Token %s does not exist.", id)
		}
	}
	actx := s.audited(r.Context(), audit.TokenRevoke, audit.Object{Kind: audit.ObjectToken, ID: id}, nil, nil)
	if err := s.store.RevokeToken(actx, id, s.now()); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errNotFound("Token %s does not exist.", id)
		}
		return fmt.Errorf("revoke token %s: %w", id, err)
	}
	s.log.Info("token revoked", "id", id)
	s.claimTokens.forget(id, "")
	if err := s.releaseClaimsOf(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// releaseClaimsOf releases the claims that token id took or last renewed,
// now that it is revoked: a machine's sessions must not go on under a
// token that no longer works. Each goes back to the queue, its epoch over,
// so its remote's connection is closed wherever it is held (here at once,
// on another replica by the change feed). It runs on even if the caller
// goes away; when it fails the token stays revoked and revoking it again
// retries the release.
func (s *Server) releaseClaimsOf(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	released, err := s.life.RevokeClaims(ctx, id)
	if len(released) > 0 {
		s.log.Info("released the claims of a revoked token", "id", id, "sessions", released)
	}
	if err != nil {
		return fmt.Errorf("token %s is revoked, but not every claim it holds was released (revoke it again to retry): %w", id, err)
	}
	return nil
}

// createSessionToken makes a token limited to one session (req.Session),
// for an outside agent: it reaches that session's routes only, holds
// sessions scopes only (sessions.write unless req.Scopes say otherwise),
// and stops working when the session ends. The caller needs sessions.write
// on the session's outpost; the token belongs to the caller's user, if
// any, so it never does more than that user may.
func (s *Server) createSessionToken(w http.ResponseWriter, r *http.Request, req api.CreateTokenRequest) error {
	ctx := r.Context()
	p := principalFrom(ctx)
	switch {
	case req.Role != "":
		return errBadRequest("A token limited to a session takes scopes (sessions.read or sessions.write), not a role.")
	case req.ServiceAccount:
		return errBadRequest("A token limited to a session cannot be a service account's.")
	case len(req.Name) > 200:
		return errBadRequest("name is longer than 200 characters.")
	case req.ExpiresInS < 0 || req.ExpiresInS > maxExpiresInS:
		return errBadRequest("expires_in_s must be between 0 and %d (100 years).", int64(maxExpiresInS))
	}
	if len(req.Scopes) == 0 {
		req.Scopes = []string{api.ScopeSessionsWrite}
	}
	for _, sc := range req.Scopes {
		if sc != api.ScopeSessionsRead && sc != api.ScopeSessionsWrite {
			return errBadRequest("Scope %q cannot be given to a token limited to a session; it may hold %s or %s.", sc, api.ScopeSessionsRead, api.ScopeSessionsWrite)
		}
	}
	sess, err := s.sessionFor(ctx, req.Session)
	if err != nil {
		return err
	}
	if !p.hasOn(sess.OutpostID, api.ScopeSessionsWrite) {
		return errForbidden("This token lacks the sessions.write scope on the outpost of session %s, so it cannot make a token for it.", sess.ID)
	}
	if api.IsFinal(sess.Status) {
		return errConflict("Session %s has ended (%s); a token limited to it would never work.", sess.ID, sess.Status)
	}
	o, err := s.store.GetOutpost(ctx, sess.OutpostID)
	if err != nil {
		return fmt.Errorf("get outpost %s: %w", sess.OutpostID, err)
	}
	if req.Outpost != "" && req.Outpost != o.Name && req.Outpost != o.ID {
		return errBadRequest("Session %s is in outpost %s, not %s: leave outpost out, or name that one.", sess.ID, o.Name, req.Outpost)
	}
	now := s.now()
	t := store.Token{ID: newID("tok_"), Name: req.Name, Scopes: slices.Compact(slices.Sorted(slices.Values(req.Scopes))),
		CreatedAt: now, OutpostID: sess.OutpostID, SessionID: sess.ID}
	if t.Name == "" {
		t.Name = "session " + sess.ID
	}
	if p.User != nil {
		t.UserID = p.User.ID
	}
	if req.ExpiresInS > 0 {
		exp := now.Add(time.Duration(req.ExpiresInS) * time.Second)
		t.ExpiresAt = &exp
	}
	if p.expiresAt != nil && (t.ExpiresAt == nil || t.ExpiresAt.After(*p.expiresAt)) {
		// A token cannot outlive itself through the tokens it creates.
		t.ExpiresAt = p.expiresAt
	}
	secret := newSecret("opt_")
	t.Hash = hashSecret(secret)
	details := map[string]any{"name": t.Name, "scopes": t.Scopes, "outpost_id": t.OutpostID, "session_id": t.SessionID}
	if t.ExpiresAt != nil {
		details["expires_at"] = t.ExpiresAt.Unix()
	}
	actx := s.audited(ctx, audit.TokenCreate, audit.Object{Kind: audit.ObjectToken, ID: t.ID}, details, nil)
	if err := s.store.CreateToken(actx, t); err != nil {
		return fmt.Errorf("create token: %w", err)
	}
	s.log.Info("token created", "id", t.ID, "name", t.Name, "scopes", t.Scopes, "user", t.UserID, "outpost", t.OutpostID, "session", t.SessionID)
	at := toAPIToken(t)
	at.Outpost = o.Name
	writeJSON(w, http.StatusCreated, api.CreateTokenResponse{Token: at, Secret: secret})
	return nil
}
