package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// whoami answers which token the request was made with: its id, name,
// scopes, outpost restriction and expiry. Any valid token may ask, so a
// machine can check its own before it serves (outpost doctor).
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	t, err := s.store.TokenByHash(ctx, hashSecret(bearer(r)))
	if errors.Is(err, store.ErrNotFound) {
		// Revoked between authentication and now.
		return errUnauthorized("The API token is not valid.")
	}
	if err != nil {
		return fmt.Errorf("look up the caller's token: %w", err)
	}
	me := api.WhoAmI{Token: toAPIToken(t)}
	if p := principalFrom(ctx); p.User != nil {
		// A user's token acts with what its user holds now: its scopes
		// everywhere, and a sign-in's role.
		me.Scopes = append([]string{}, p.scopes...)
		if me.Role == "" {
			me.Role = p.Role
		}
	}
	if t.OutpostID != "" {
		o, err := s.store.GetOutpost(ctx, t.OutpostID)
		switch {
		case err == nil:
			me.Outpost = o.Name
		case !errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("get outpost %s: %w", t.OutpostID, err)
		}
	}
	writeJSON(w, http.StatusOK, me)
	return nil
}
