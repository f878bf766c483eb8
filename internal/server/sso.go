package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/sync/singleflight"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/identity"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/web"
)

// SSOOptions configure sign-in through an OpenID Connect provider.
type SSOOptions struct {
	// Issuer is the provider's issuer URL.
	Issuer string
	// ClientID and ClientSecret are the server's client at the provider.
	// Its redirect URL is <PublicURL>/ui/auth/callback.
	ClientID     string
	ClientSecret string
	// DisplayName names the provider on the sign-in page; "" means
	// "single sign-on".
	DisplayName string
	// Scopes are asked for besides openid; nil means profile, email and
	// offline_access.
	Scopes []string
	// AllowedDomains, when set, admits only these email domains.
	AllowedDomains []string
	// GroupsClaim names the claim listing a user's groups; "" means groups.
	GroupsClaim string
	// GroupRoles give roles to provider groups everywhere, "group=role"
	// each; they add to the role bindings of the API.
	GroupRoles []string
	// RecheckInterval is how often, at most, the provider is asked again
	// whether a signed-in user may still use the server; 0 means 5m.
	RecheckInterval time.Duration
	// SessionLifetime bounds a sign-in; 0 means 12h.
	SessionLifetime time.Duration
	// HTTPClient reaches the provider; nil means http.DefaultClient.
	HTTPClient *http.Client
}

// ssoState is the server's sign-in through its provider.
type ssoState struct {
	opts        SSOOptions
	redirectURL string
	key         []byte // signs the flow cookie
	groupRoles  []store.RoleBinding

	mu       sync.Mutex // guards provider
	provider *identity.Provider

	checks singleflight.Group // one provider check per user at a time
}

// newSSO checks opts and prepares the sign-in; the provider's discovery
// document is read on first use, so a provider that is down at start does
// not keep the server (and its break-glass admin token) from serving.
func newSSO(opts SSOOptions, publicURL string, key []byte) (*ssoState, error) {
	if opts.Issuer == "" || opts.ClientID == "" {
		return nil, errors.New("server: single sign-on needs an issuer and a client id")
	}
	if opts.RecheckInterval <= 0 {
		opts.RecheckInterval = 5 * time.Minute
	}
	if opts.SessionLifetime <= 0 {
		opts.SessionLifetime = 12 * time.Hour
	}
	if opts.DisplayName == "" {
		opts.DisplayName = "single sign-on"
	}
	st := &ssoState{opts: opts, redirectURL: strings.TrimRight(publicURL, "/") + "/ui/auth/callback", key: key}
	if len(st.key) == 0 {
		st.key = make([]byte, 32)
		if _, err := rand.Read(st.key); err != nil {
			return nil, fmt.Errorf("server: sign-in key: %w", err)
		}
	}
	for _, gr := range opts.GroupRoles {
		group, role, ok := strings.Cut(gr, "=")
		if !ok || group == "" || api.RoleRank(role) < 0 {
			return nil, fmt.Errorf("server: group role %q: want group=role, role one of %s", gr, strings.Join(api.Roles, ", "))
		}
		st.groupRoles = append(st.groupRoles, store.RoleBinding{Role: role, SubjectKind: api.SubjectGroup, Subject: group})
	}
	return st, nil
}

// identity returns the provider, reading its discovery document once.
func (st *ssoState) identity(ctx context.Context) (*identity.Provider, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.provider != nil {
		return st.provider, nil
	}
	p, err := identity.New(ctx, identity.Config{
		Issuer: st.opts.Issuer, ClientID: st.opts.ClientID, ClientSecret: st.opts.ClientSecret,
		Scopes: st.opts.Scopes, RedirectURL: st.redirectURL, AllowedDomains: st.opts.AllowedDomains,
		GroupsClaim: st.opts.GroupsClaim, HTTPClient: st.opts.HTTPClient,
	})
	if err != nil {
		return nil, err
	}
	st.provider = p
	return p, nil
}

// recheck asks the provider about u when its last check is older than
// RecheckInterval, and returns u as it then stands. A refusal disables u;
// a provider that does not answer is forgiven for one more interval, then
// the user's tokens stop working until it answers again.
func (st *ssoState) recheck(ctx context.Context, s *Server, u store.User) (store.User, error) {
	now := s.now()
	if u.RefreshToken == "" || now.Sub(u.CheckedAt) < st.opts.RecheckInterval {
		return u, nil
	}
	v, err, _ := st.checks.Do(u.ID, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		p, err := st.identity(ctx)
		var rt string
		if err == nil {
			rt, err = p.Check(ctx, u.RefreshToken)
		}
		switch {
		case errors.Is(err, identity.ErrRefused):
			// Another replica may have just used (and so rotated) the
			// same refresh token: its check stands.
			if cur, gerr := s.store.GetUser(ctx, u.ID); gerr == nil && cur.CheckedAt.After(u.CheckedAt) {
				return cur, nil
			}
			s.log.Info("user refused by the identity provider", "user", u.ID, "email", u.Email, "reason", err)
			u.DisabledAt, u.CheckedAt = &now, now
			if err := s.store.SetUserChecked(ctx, u.ID, now, "", &now); err != nil {
				return u, fmt.Errorf("record the check of user %s: %w", u.ID, err)
			}
			return u, nil
		case err != nil:
			s.log.Warn("identity provider check failed", "user", u.ID, "err", err)
			if now.Sub(u.CheckedAt) >= 2*st.opts.RecheckInterval {
				return u, &httpError{http.StatusUnauthorized, api.CodeUnauthorized, "The identity provider could not confirm this token's user; try again later."}
			}
			return u, nil
		}
		u.CheckedAt, u.RefreshToken = now, rt
		if err := s.store.SetUserChecked(ctx, u.ID, now, rt, nil); err != nil {
			return u, fmt.Errorf("record the check of user %s: %w", u.ID, err)
		}
		return u, nil
	})
	if err != nil {
		return u, err
	}
	return v.(store.User), nil
}

// flowCookieName is the cookie that carries a sign-in's state, nonce and
// PKCE verifier from /ui/auth/login to /ui/auth/callback.
const flowCookieName = "outpost_sso"

// flowLifetime bounds the time between starting a sign-in and its callback.
const flowLifetime = 10 * time.Minute

// flow is the content of the flow cookie.
type flow struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Expires  int64  `json:"e"`
}

func (st *ssoState) sign(b []byte) string {
	m := hmac.New(sha256.New, st.key)
	m.Write([]byte("outpost-sso-flow\x00"))
	m.Write(b)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (s *Server) flowCookie(r *http.Request) string {
	if s.webSecure(r) {
		return "__Host-" + flowCookieName
	}
	return flowCookieName
}

func (s *Server) webSecure(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(strings.ToLower(s.publicURL), "https://")
}

// ssoLogin answers GET /ui/auth/login: it sends the browser to the
// provider, with a fresh state, nonce and PKCE verifier kept in a signed,
// short-lived cookie.
func (s *Server) ssoLogin(w http.ResponseWriter, r *http.Request) {
	p, err := s.sso.identity(r.Context())
	if err != nil {
		s.log.Error("sign-in: identity provider", "err", err)
		http.Redirect(w, r, "/ui/signin?sso=unavailable", http.StatusSeeOther)
		return
	}
	f := flow{State: randomString(24), Nonce: randomString(24), Verifier: oauth2.GenerateVerifier(), Expires: s.now().Add(flowLifetime).Unix()}
	b, _ := json.Marshal(f) // a struct of strings
	v := base64.RawURLEncoding.EncodeToString(b) + "." + s.sso.sign(b)
	http.SetCookie(w, &http.Cookie{Name: s.flowCookie(r), Value: v, Path: "/", MaxAge: int(flowLifetime / time.Second),
		HttpOnly: true, Secure: s.webSecure(r), SameSite: http.SameSiteLaxMode})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, p.AuthCodeURL(f.State, f.Nonce, f.Verifier), http.StatusFound)
}

// readFlow reads and clears the flow cookie: a callback is good once.
func (s *Server) readFlow(w http.ResponseWriter, r *http.Request) (flow, bool) {
	c, err := r.Cookie(s.flowCookie(r))
	http.SetCookie(w, &http.Cookie{Name: s.flowCookie(r), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: s.webSecure(r), SameSite: http.SameSiteLaxMode})
	if err != nil {
		return flow{}, false
	}
	body, mac, ok := strings.Cut(c.Value, ".")
	b, err := base64.RawURLEncoding.DecodeString(body)
	if !ok || err != nil || !hmac.Equal([]byte(mac), []byte(s.sso.sign(b))) {
		return flow{}, false
	}
	var f flow
	if json.Unmarshal(b, &f) != nil || s.now().Unix() > f.Expires {
		return flow{}, false
	}
	return f, true
}

// ssoCallback answers GET /ui/auth/callback: it checks the state against
// the flow cookie, redeems the code with the PKCE verifier, checks the ID
// token and its nonce, records the user and signs the browser in with a
// token of the user's that expires with the sign-in.
func (s *Server) ssoCallback(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	w.Header().Set("Cache-Control", "no-store")
	fail := func(code, why string, args ...any) {
		s.log.Info("sign-in refused", append([]any{"reason", why}, args...)...)
		// A refused sign-in is audited by an anonymous caller, with the
		// code the browser is shown (never the provider's words).
		actx := context.WithValue(withSourceIP(context.WithoutCancel(ctx), r), principalKey{}, principal{})
		if err := s.store.RecordAudit(s.audited(actx, audit.LoginFailed, audit.Object{Kind: audit.ObjectToken},
			map[string]any{"reason": "single sign-on: " + code}, nil)); err != nil {
			s.log.Error("audit: record sign-in", "action", audit.LoginFailed, "err", err)
		}
		http.Redirect(w, r, "/ui/signin?sso="+code, http.StatusSeeOther)
	}
	f, ok := s.readFlow(w, r)
	q := r.URL.Query()
	switch {
	case !ok:
		fail("expired", "no valid flow cookie")
		return
	case !hmac.Equal([]byte(q.Get("state")), []byte(f.State)):
		fail("expired", "state does not match")
		return
	case q.Get("error") != "":
		fail("refused", "provider error", "error", q.Get("error"))
		return
	case q.Get("code") == "":
		fail("expired", "no code")
		return
	}
	p, err := s.sso.identity(ctx)
	if err != nil {
		fail("unavailable", err.Error())
		return
	}
	id, err := p.Exchange(ctx, q.Get("code"), f.Verifier, f.Nonce)
	if errors.Is(err, identity.ErrRefused) {
		fail("refused", err.Error())
		return
	}
	if err != nil {
		fail("failed", err.Error())
		return
	}
	now := s.now()
	u, err := s.store.UpsertUser(ctx, store.User{ID: newID("usr_"), Subject: id.Subject, Email: id.Email, Name: id.Name,
		Groups: id.Groups, CreatedAt: now, LastLoginAt: now, CheckedAt: now, RefreshToken: id.RefreshToken})
	if err != nil {
		s.log.Error("sign-in: record user", "err", err)
		fail("failed", "store")
		return
	}
	g, err := s.userGrants(ctx, u)
	if err != nil {
		s.log.Error("sign-in: roles", "err", err)
		fail("failed", "store")
		return
	}
	if g.Role == "" && len(g.Outposts) == 0 {
		fail("norole", "no role", "user", u.ID, "email", u.Email)
		return
	}
	life := s.sso.opts.SessionLifetime
	if id.RefreshToken == "" {
		// Without a refresh token the provider cannot be asked again,
		// so the sign-in lasts no longer than one check would wait.
		life = min(life, s.sso.opts.RecheckInterval)
	}
	exp := now.Add(life)
	secret := newSecret("opt_")
	t := store.Token{ID: newID("tok_"), Name: "sign-in " + u.Email, Hash: hashSecret(secret), Scopes: []string{},
		CreatedAt: now, ExpiresAt: &exp, UserID: u.ID}
	// The sign-in's token and its login entry, by the person, in one
	// transaction.
	who := principal{tokenID: t.ID, tokenName: t.Name, User: &principalUser{ID: u.ID, Name: u.Name, Email: u.Email}}
	lctx := s.audited(context.WithValue(withSourceIP(ctx, r), principalKey{}, who), audit.Login,
		audit.Object{Kind: audit.ObjectToken, ID: t.ID}, map[string]any{"via": "single sign-on"}, nil)
	if err := s.store.CreateToken(lctx, t); err != nil {
		s.log.Error("sign-in: create token", "err", err)
		fail("failed", "store")
		return
	}
	s.log.Info("signed in", "user", u.ID, "email", u.Email, "token", t.ID, "role", g.Role)
	http.SetCookie(w, &http.Cookie{Name: web.CookieName, Value: secret, Path: "/", MaxAge: int(life / time.Second),
		HttpOnly: true, Secure: s.webSecure(r), SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, "/ui/sessions", http.StatusSeeOther)
}
