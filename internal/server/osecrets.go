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
	"github.com/outpost-sh/outpost/internal/store"
)

// checkSecretName answers 400 unless name can be a stored secret's: a
// session gets it as an environment variable, so the rules of
// CreateSessionRequest.Secrets apply.
func checkSecretName(name string) error {
	if !envName.MatchString(name) {
		return errBadRequest("Secret name %q is not a valid environment variable name: use letters, digits and '_', not starting with a digit.", name)
	}
	if api.ReservedEnvName(name) {
		return errBadRequest("Secret name %q is reserved: Outpost sets OUTPOST_* names and reads the public contract's names of its variables (such as %s), so a session may not set them.", name, api.EnvConnectToken.Public)
	}
	return nil
}

func toAPIOutpostSecret(o store.Outpost, sec store.OutpostSecret) api.OutpostSecret {
	return api.OutpostSecret{Name: sec.Name, Outpost: o.Name, CreatedAt: sec.CreatedAt.Unix(), UpdatedAt: sec.UpdatedAt.Unix()}
}

// listOutpostSecrets is GET /v1/outposts/{outpost}/secrets: the names,
// never the values.
func (s *Server) listOutpostSecrets(w http.ResponseWriter, r *http.Request) error {
	o, err := s.resolveOutpost(r.Context(), r.PathValue("outpost"))
	if err != nil {
		return err
	}
	secs, err := s.store.ListOutpostSecrets(r.Context(), o.ID)
	if err != nil {
		return fmt.Errorf("list secrets of outpost %s: %w", o.ID, err)
	}
	out := api.OutpostSecretList{Items: make([]api.OutpostSecret, 0, len(secs))}
	for _, sec := range secs {
		out.Items = append(out.Items, toAPIOutpostSecret(o, sec))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// outpostSecret finds one stored secret of the outpost; 404 when absent.
func (s *Server) outpostSecret(ctx context.Context, o store.Outpost, name string) (store.OutpostSecret, error) {
	secs, err := s.store.ListOutpostSecrets(ctx, o.ID)
	if err != nil {
		return store.OutpostSecret{}, fmt.Errorf("list secrets of outpost %s: %w", o.ID, err)
	}
	i := slices.IndexFunc(secs, func(sec store.OutpostSecret) bool { return sec.Name == name })
	if i < 0 {
		return store.OutpostSecret{}, errNotFound("Outpost %s has no secret named %s.", o.Name, name)
	}
	return secs[i], nil
}

// getOutpostSecret is GET /v1/outposts/{outpost}/secrets/{name}: the
// secret's name and times, never its value.
func (s *Server) getOutpostSecret(w http.ResponseWriter, r *http.Request) error {
	o, err := s.resolveOutpost(r.Context(), r.PathValue("outpost"))
	if err != nil {
		return err
	}
	sec, err := s.outpostSecret(r.Context(), o, r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPIOutpostSecret(o, sec))
	return nil
}

// putOutpostSecret is PUT /v1/outposts/{outpost}/secrets/{name}: 201 when
// it created the secret, 200 when it replaced its value. Sessions created
// before keep the value they were given.
func (s *Server) putOutpostSecret(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var req api.PutOutpostSecretRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := checkSecretName(name); err != nil {
		return err
	}
	switch {
	case req.Value == "":
		return errBadRequest("value is required: the secret's value, which is never shown again.")
	case len(req.Value) > maxEnvValue || strings.ContainsRune(req.Value, 0):
		return errBadRequest("value is longer than %d bytes or holds a NUL byte.", maxEnvValue)
	}
	o, err := s.resolveOutpost(ctx, r.PathValue("outpost"))
	if err != nil {
		return err
	}
	now := s.now()
	actx := s.audited(ctx, audit.SecretSet, audit.Object{Kind: audit.ObjectSecret, ID: o.ID + "/" + name}, map[string]string{"name": name}, nil)
	created, err := s.store.PutOutpostSecret(actx, store.OutpostSecret{
		OutpostID: o.ID, Name: name, Value: req.Value, SetBy: principalFrom(ctx).tokenID, CreatedAt: now, UpdatedAt: now,
	})
	if errors.Is(err, store.ErrNotFound) {
		return errNotFound("Outpost %q does not exist.", r.PathValue("outpost"))
	}
	if err != nil {
		return fmt.Errorf("put secret %s of outpost %s: %w", name, o.ID, err)
	}
	s.log.Info("outpost secret set", "outpost", o.Name, "name", name, "created", created)
	sec, err := s.outpostSecret(ctx, o, name)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, toAPIOutpostSecret(o, sec))
	return nil
}

// deleteOutpostSecret is DELETE /v1/outposts/{outpost}/secrets/{name}: 204.
// Sessions created before keep the value they were given.
func (s *Server) deleteOutpostSecret(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	o, err := s.resolveOutpost(ctx, r.PathValue("outpost"))
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	actx := s.audited(ctx, audit.SecretDelete, audit.Object{Kind: audit.ObjectSecret, ID: o.ID + "/" + name}, map[string]string{"name": name}, nil)
	err = s.store.DeleteOutpostSecret(actx, o.ID, name)
	if errors.Is(err, store.ErrNotFound) {
		return errNotFound("Outpost %s has no secret named %s.", o.Name, name)
	}
	if err != nil {
		return fmt.Errorf("delete secret %s of outpost %s: %w", name, o.ID, err)
	}
	s.log.Info("outpost secret deleted", "outpost", o.Name, "name", name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// useOutpostSecrets returns the session's secrets: the values of the
// outpost's stored secrets it names in use, under its own secrets (own
// wins). A name the outpost lacks is a 400 that says how to store it.
func (s *Server) useOutpostSecrets(ctx context.Context, o store.Outpost, use []string, own map[string]string) (map[string]string, error) {
	if len(use) == 0 {
		return own, nil
	}
	vals, err := s.store.OutpostSecretValues(ctx, o.ID, use)
	if err != nil {
		return nil, fmt.Errorf("read secrets of outpost %s: %w", o.ID, err)
	}
	var missing []string
	for _, name := range use {
		if _, ok := vals[name]; !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, errBadRequest("Outpost %s has no stored secret named %s: store it with `outpost secrets set --outpost %s NAME` (the value on stdin), or give it in secrets.",
			o.Name, strings.Join(missing, ", "), o.Name)
	}
	out := make(map[string]string, len(vals)+len(own))
	for k, v := range vals {
		out[k] = v
	}
	for k, v := range own {
		out[k] = v
	}
	if len(out) > maxEnvVars {
		return nil, errBadRequest("secrets and use_secrets together have more than %d variables.", maxEnvVars)
	}
	return out, nil
}

// checkUseSecrets answers 400 for a use_secrets list with a name no
// stored secret can have, or a name twice.
func checkUseSecrets(use []string) error {
	if len(use) > maxEnvVars {
		return errBadRequest("use_secrets has more than %d names.", maxEnvVars)
	}
	seen := make(map[string]bool, len(use))
	for _, name := range use {
		if err := checkSecretName(name); err != nil {
			return err
		}
		if seen[name] {
			return errBadRequest("use_secrets names %s twice.", name)
		}
		seen[name] = true
	}
	return nil
}
