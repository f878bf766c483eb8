package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// principal is the caller behind an API token.
type principal struct {
	tokenID   string
	tokenName string
	scopes    []string
	outpostID string     // "" when not limited
	sessionID string     // "" when not limited to one session
	expiresAt *time.Time // nil when the token never expires

	// User is the person the token belongs to; nil for a service
	// account's token. Role is the role the token acts with: the user's
	// strongest role everywhere for a sign-in, the token's own role, or "".
	User *principalUser
	Role string
	// outposts, for a user's token, maps an outpost to the scopes held
	// there beyond scopes (which hold everywhere); nil for a service
	// account's token. An outpost missing from it is allowed only as far
	// as scopes go.
	outposts map[string][]string
	// need are the scopes of the route the request came in by (authed).
	need []string
}

// principalUser is the user behind a principal.
type principalUser struct {
	ID    string
	Name  string
	Email string
}

// has reports whether the principal holds scope, counting the implications:
// admin implies everything, orchestrator implies machine, sessions.write
// implies sessions.read.
func (p principal) has(scope string) bool {
	if api.HasScope(p.scopes, scope) {
		return true
	}
	for _, sc := range p.outposts {
		if api.HasScope(sc, scope) {
			return true
		}
	}
	return false
}

// hasAny reports whether the principal holds one of scopes.
func (p principal) hasAny(scopes ...string) bool {
	return slices.ContainsFunc(scopes, p.has)
}

// allowsOutpost reports whether the principal may act on an outpost.
//
// What a token may not see does not exist for it: a resource of another
// outpost answers exactly as a missing one (404, the same body), so a token
// limited to one outpost cannot learn which other outposts, sessions or
// queue entries exist. Its holder learns its own outpost from GET
// /v1/whoami.
//
// A user's token holds some scopes only on some outposts: an outpost is
// allowed when the scopes held there, or everywhere, include one the
// route needs.
func (p principal) allowsOutpost(outpostID string) bool {
	if p.outpostID != "" && p.outpostID != outpostID {
		return false
	}
	if p.outposts == nil || len(p.need) == 0 || slices.ContainsFunc(p.need, func(sc string) bool { return api.HasScope(p.scopes, sc) }) {
		return true
	}
	return slices.ContainsFunc(p.need, func(sc string) bool { return api.HasScope(p.outposts[outpostID], sc) })
}

// limited reports whether the principal may act on some outposts only for
// the scopes the route needs: a token limited to an outpost, or a user
// whose roles for this are per outpost.
func (p principal) limited() bool {
	if p.outpostID != "" {
		return true
	}
	return p.outposts != nil && len(p.need) > 0 && !slices.ContainsFunc(p.need, func(sc string) bool { return api.HasScope(p.scopes, sc) })
}

// hasOn reports whether the principal holds scope on outpost outpostID:
// everywhere, or there by a user's role on that outpost.
func (p principal) hasOn(outpostID, scope string) bool {
	if p.outpostID != "" && p.outpostID != outpostID {
		return false
	}
	return api.HasScope(p.scopes, scope) || api.HasScope(p.outposts[outpostID], scope)
}

// allowsToken reports whether the principal may see and revoke token t. A
// token limited to an outpost manages only the tokens limited to that same
// outpost: an unlimited token, or one of another outpost, does not exist
// for it, so it can neither widen its own reach nor cut off another
// outpost's machines. A user who is admin on some outposts only manages
// the tokens limited to those.
func (p principal) allowsToken(t store.Token) bool {
	if p.outpostID == "" && p.limited() && t.OutpostID == "" {
		return false
	}
	return p.allowsOutpost(t.OutpostID)
}

// sessionRoutesDenied are the routes under a session that a token limited
// to that session may not use: a rerun or a fork makes other sessions, and what a
// person decides for the session — its network policy, its network access
// requests, the calls approval rules hold — is not for the agent it limits.
var sessionRoutesDenied = []string{
	"POST /v1/sessions/{session}/rerun",
	"POST /v1/sessions/{session}/fork",
	"PATCH /v1/sessions/{session}",
	"POST /v1/sessions/{session}/network-requests/{request}/grant",
	"POST /v1/sessions/{session}/network-requests/{request}/deny",
	"POST /v1/sessions/{session}/calls/{seq}/approve",
	"POST /v1/sessions/{session}/calls/{seq}/deny",
}

// allowsRoute reports, as the error to answer, whether the principal may
// use the route of request r at all. A token limited to a session reaches
// that session's routes (its MCP endpoint among them) but
// sessionRoutesDenied, and GET /v1/whoami: another session does not exist
// for it (404), and every other route is forbidden (403).
func (p principal) allowsRoute(r *http.Request) error {
	if p.sessionID == "" || r.Pattern == "GET /v1/whoami" {
		return nil
	}
	id := r.PathValue("session")
	switch {
	case id == "" || slices.Contains(sessionRoutesDenied, r.Pattern):
		return errForbidden("This token is limited to session %s: it reaches that session's routes only.", p.sessionID)
	case id != p.sessionID:
		return errNotFound("Session %s does not exist.", id)
	}
	return nil
}

type principalKey struct{}

func principalFrom(ctx context.Context) principal {
	p, _ := ctx.Value(principalKey{}).(principal)
	return p
}

// bearer returns the bearer token of a request, or "".
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// authenticate resolves the request's API token.
func (s *Server) authenticate(r *http.Request) (principal, error) {
	return s.authenticateBearer(r.Context(), bearer(r))
}

// authenticateBearer resolves the secret of a request's bearer token, ""
// when it sent none.
func (s *Server) authenticateBearer(ctx context.Context, secret string) (principal, error) {
	if secret == "" {
		return principal{}, errUnauthorized("An API token is required: send it as 'Authorization: Bearer <token>'.")
	}
	return s.authenticateSecret(ctx, secret)
}

// authenticateSecret resolves an API token's secret.
func (s *Server) authenticateSecret(ctx context.Context, secret string) (principal, error) {
	p, _, err := s.authenticateToken(ctx, hashSecret(secret))
	return p, err
}

// authenticateToken resolves the API token of hash, and returns its row.
func (s *Server) authenticateToken(ctx context.Context, hash string) (principal, store.Token, error) {
	t, err := s.store.TokenByHash(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return principal{}, t, errUnauthorized("The API token is not valid.")
	}
	if err != nil {
		return principal{}, t, err
	}
	p, err := s.tokenPrincipalNow(ctx, t)
	return p, t, err
}

// tokenPrincipal is the principal of token t, as its row says.
func tokenPrincipal(t store.Token) principal {
	return principal{tokenID: t.ID, tokenName: t.Name, scopes: t.Scopes, outpostID: t.OutpostID, sessionID: t.SessionID, expiresAt: t.ExpiresAt, Role: t.Role}
}

// tokenPrincipalNow is the principal of token t, refused when it is
// revoked or expired, or its session or user no longer allows it.
func (s *Server) tokenPrincipalNow(ctx context.Context, t store.Token) (principal, error) {
	now := s.now()
	if t.RevokedAt != nil {
		return principal{}, errUnauthorized("The API token has been revoked.")
	}
	if t.ExpiresAt != nil && !now.Before(*t.ExpiresAt) {
		return principal{}, errUnauthorized("The API token has expired.")
	}
	p := tokenPrincipal(t)
	if t.SessionID != "" {
		// A session's token ends with its session.
		sess, err := s.store.GetSession(ctx, t.SessionID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return principal{}, errUnauthorized("The API token was limited to session %s, which no longer exists.", t.SessionID)
		case err != nil:
			return principal{}, fmt.Errorf("get session %s: %w", t.SessionID, err)
		case api.IsFinal(sess.Status):
			return principal{}, errUnauthorized("The API token was limited to session %s, which has ended (%s).", t.SessionID, sess.Status)
		}
	}
	if t.UserID != "" {
		// A user's token never does more than its user may now.
		return s.userPrincipal(ctx, p, t)
	}
	return p, nil
}

// handler is an HTTP handler that returns an error to be written as JSON.
type handler func(w http.ResponseWriter, r *http.Request) error

// authed wraps h: the caller must present a valid token holding one of
// scopes.
func (s *Server) authed(h handler, scopes ...string) http.HandlerFunc {
	return s.authedBy(s.authenticate, h, scopes...)
}

// authedBy is authed, resolving the caller's token with authenticate.
func (s *Server) authedBy(authenticate func(*http.Request) (principal, error), h handler, scopes ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() { s.metrics.requestDuration.WithLabelValues(r.Method).Observe(time.Since(start).Seconds()) }()
		p, err := authenticate(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		markAuthenticated(r.Context())
		p.need = scopes
		if !p.hasAny(scopes...) {
			s.writeError(w, r, errForbidden("This token lacks the %s scope.", strings.Join(scopes, " or ")))
			return
		}
		if err := p.allowsRoute(r); err != nil {
			s.writeError(w, r, err)
			return
		}
		ctx, stop := s.whileValid(r.Context(), r, p)
		defer stop()
		r = r.WithContext(withSourceIP(context.WithValue(ctx, principalKey{}, p), r))
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	}
}

// whileValid returns parent (the request's context, or that of a stream
// that outlives the handler), ended (with the refusal as its cause) once
// the token of request r is revoked or expires, so that requests that
// stream for minutes or hours (a transcript follow, a queue watch, a live
// desktop) do not outlive the token that opened them. The token is checked
// again every TokenRecheckInterval and at its expiry, only while the
// request runs: the first check is a timer that a short request stops
// before it fires. stop releases the timer; call it when the stream ends.
//
// The checks keep r's path and token, not r: a watch that outlives its
// handler would otherwise hold the request, its headers and its context
// for as long as it streams.
func (s *Server) whileValid(parent context.Context, r *http.Request, p principal) (ctx context.Context, stop func()) {
	path, secret := r.URL.Path, bearer(r)
	ctx, cancel := context.WithCancelCause(parent)
	next := func() time.Duration {
		d := s.opts.TokenRecheckInterval
		if p.expiresAt != nil {
			d = max(min(d, p.expiresAt.Sub(s.now())), 0)
		}
		return d
	}
	var (
		mu      sync.Mutex // guards timer and stopped
		timer   *time.Timer
		stopped bool
	)
	check := func() {
		if p.expiresAt != nil && !s.now().Before(*p.expiresAt) {
			// Expired, whatever the store says: a store that fails
			// here must not turn the timer, at 0 from now on, into a
			// loop of queries.
			const why = "The API token has expired."
			s.log.Info("request ended: its token is no longer valid", "path", path, "token", p.tokenID, "reason", why)
			cancel(errUnauthorized(why))
			return
		}
		_, err := s.authenticateBearer(ctx, secret)
		var he *httpError
		if errors.As(err, &he) && he.status == http.StatusUnauthorized {
			s.log.Info("request ended: its token is no longer valid", "path", path, "token", p.tokenID, "reason", he.message)
			cancel(err)
			return
		}
		// A store error is not a revocation: check again later.
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			timer.Reset(next())
		}
	}
	mu.Lock()
	timer = time.AfterFunc(next(), check)
	mu.Unlock()
	return ctx, func() {
		mu.Lock()
		stopped = true
		timer.Stop()
		mu.Unlock()
		cancel(nil)
	}
}
