// Package identity signs people in through an OpenID Connect provider
// (authorization code with PKCE, state and nonce), asks the provider again
// whether a signed-in person may still use the server, and turns the
// roles bound to a person and its groups into what it may do.
//
// It holds no state: the server keeps the flow's values in a signed
// cookie and the users in its store.
package identity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Config configures a Provider.
type Config struct {
	// Issuer is the provider's issuer URL; its discovery document is read
	// at /.well-known/openid-configuration.
	Issuer string
	// ClientID and ClientSecret are the server's client at the provider;
	// an empty secret makes a public client (PKCE alone).
	ClientID     string
	ClientSecret string
	// Scopes are asked for besides openid; nil means profile, email and
	// offline_access (for a refresh token to check the user again with).
	Scopes []string
	// RedirectURL is the server's callback, registered at the provider.
	RedirectURL string
	// AllowedDomains, when set, admits only users whose verified email is
	// in one of these domains.
	AllowedDomains []string
	// GroupsClaim names the claim that lists the user's groups; "" means
	// groups.
	GroupsClaim string
	// HTTPClient reaches the provider; nil means http.DefaultClient.
	HTTPClient *http.Client
}

// Provider is a configured OpenID Connect provider.
type Provider struct {
	cfg      Config
	oidc     *oidc.Provider
	oauth    oauth2.Config
	verifier *oidc.IDTokenVerifier
}

// Identity is what the provider says about a user.
type Identity struct {
	Subject string
	Email   string
	Name    string
	Groups  []string
	// RefreshToken is "" when the provider gave none.
	RefreshToken string
}

// ErrRefused is returned when the provider refuses the user (disabled,
// deleted, its grant revoked) or the sign-in is not admitted (an email
// outside the allowed domains).
var ErrRefused = errors.New("identity: refused by the provider")

// New reads the provider's discovery document.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" || cfg.RedirectURL == "" {
		return nil, errors.New("identity: an issuer, a client id and a redirect URL are required")
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	if cfg.Scopes == nil {
		cfg.Scopes = []string{oidc.ScopeOfflineAccess, "profile", "email"}
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	ctx = oidc.ClientContext(ctx, cfg.HTTPClient)
	op, err := oidc.NewProvider(ctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("identity: discover %s: %w", cfg.Issuer, err)
	}
	scopes := append([]string{oidc.ScopeOpenID}, slices.DeleteFunc(slices.Clone(cfg.Scopes), func(s string) bool { return s == oidc.ScopeOpenID })...)
	return &Provider{
		cfg:  cfg,
		oidc: op,
		oauth: oauth2.Config{
			ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret,
			Endpoint: op.Endpoint(), RedirectURL: cfg.RedirectURL, Scopes: scopes,
		},
		verifier: op.Verifier(&oidc.Config{ClientID: cfg.ClientID}),
	}, nil
}

// AuthCodeURL is where to send the browser to sign in, bound to state,
// nonce and the PKCE verifier (oauth2.GenerateVerifier).
func (p *Provider) AuthCodeURL(state, nonce, verifier string) string {
	return p.oauth.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier))
}

// Exchange redeems an authorization code with its PKCE verifier, checks
// the ID token (signature, issuer, audience, expiry, nonce) and returns who
// signed in. ErrRefused wraps an email outside the allowed domains.
func (p *Provider) Exchange(ctx context.Context, code, verifier, nonce string) (Identity, error) {
	ctx = oidc.ClientContext(ctx, p.cfg.HTTPClient)
	tok, err := p.oauth.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		return Identity{}, fmt.Errorf("identity: redeem the code: %w", err)
	}
	raw, ok := tok.Extra("id_token").(string)
	if !ok {
		return Identity{}, errors.New("identity: the provider gave no ID token")
	}
	idt, err := p.verifier.Verify(ctx, raw)
	if err != nil {
		return Identity{}, fmt.Errorf("identity: check the ID token: %w", err)
	}
	if idt.Nonce != nonce {
		return Identity{}, errors.New("identity: the ID token's nonce is not this sign-in's")
	}
	claims := map[string]any{}
	if err := idt.Claims(&claims); err != nil {
		return Identity{}, fmt.Errorf("identity: read the ID token: %w", err)
	}
	// The userinfo endpoint often says more (groups, email) than the ID
	// token; its subject must be the token's.
	if ui, err := p.oidc.UserInfo(ctx, oauth2.StaticTokenSource(tok)); err == nil && ui.Subject == idt.Subject {
		more := map[string]any{}
		if err := ui.Claims(&more); err == nil {
			for k, v := range more {
				claims[k] = v
			}
		}
	}
	id := fromClaims(idt.Subject, claims, p.cfg.GroupsClaim)
	id.RefreshToken = tok.RefreshToken
	if err := p.admit(id, claims); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// Check asks the provider whether the user of refreshToken may still sign
// in: it redeems the refresh token and reads the userinfo with the new
// access token. It returns the refresh token to keep (the provider may
// rotate it). ErrRefused wraps a refusal; any other error is the
// provider's or the network's and says nothing about the user.
func (p *Provider) Check(ctx context.Context, refreshToken string) (string, error) {
	ctx = oidc.ClientContext(ctx, p.cfg.HTTPClient)
	tok, err := p.oauth.TokenSource(ctx, &oauth2.Token{RefreshToken: refreshToken}).Token()
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil && re.Response.StatusCode >= 400 && re.Response.StatusCode < 500 {
		return "", fmt.Errorf("%w: refresh: %s", ErrRefused, re.ErrorCode)
	}
	if err != nil {
		return "", fmt.Errorf("identity: refresh: %w", err)
	}
	if _, err := p.oidc.UserInfo(ctx, oauth2.StaticTokenSource(tok)); err != nil {
		// go-oidc words a refusal as "<status> <text>: <body>".
		if s := err.Error(); strings.HasPrefix(s, "401 ") || strings.HasPrefix(s, "403 ") {
			return "", fmt.Errorf("%w: userinfo: %s", ErrRefused, s)
		}
		return "", fmt.Errorf("identity: userinfo: %w", err)
	}
	next := tok.RefreshToken
	if next == "" {
		next = refreshToken
	}
	return next, nil
}

// admit checks the allowed email domains.
func (p *Provider) admit(id Identity, claims map[string]any) error {
	if len(p.cfg.AllowedDomains) == 0 {
		return nil
	}
	if v, ok := claims["email_verified"].(bool); ok && !v {
		return fmt.Errorf("%w: the email address %s is not verified", ErrRefused, id.Email)
	}
	_, domain, ok := strings.Cut(id.Email, "@")
	if !ok || !slices.ContainsFunc(p.cfg.AllowedDomains, func(d string) bool { return strings.EqualFold(d, domain) }) {
		return fmt.Errorf("%w: the email address %q is not in an allowed domain (%s)", ErrRefused, id.Email, strings.Join(p.cfg.AllowedDomains, ", "))
	}
	return nil
}

// fromClaims reads an Identity from ID token and userinfo claims.
func fromClaims(subject string, claims map[string]any, groupsClaim string) Identity {
	id := Identity{Subject: subject}
	id.Email, _ = claims["email"].(string)
	for _, k := range []string{"name", "preferred_username", "email"} {
		if v, _ := claims[k].(string); v != "" {
			id.Name = v
			break
		}
	}
	switch g := claims[groupsClaim].(type) {
	case []any:
		for _, v := range g {
			if s, ok := v.(string); ok && s != "" {
				id.Groups = append(id.Groups, s)
			}
		}
	case string:
		// Some providers send one group, or several separated by spaces.
		id.Groups = strings.Fields(g)
	}
	slices.Sort(id.Groups)
	id.Groups = slices.Compact(id.Groups)
	return id
}
