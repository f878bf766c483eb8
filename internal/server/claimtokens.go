package server

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/internal/store"
)

// Claims are the one request a fleet sends many of a second whose store
// transaction reads its own token again (store.ClaimSession): a revoked or
// expired token's claim is refused there, ordered with the revocation. So
// a claim may skip the token lookup that every other request makes — a
// round trip and a transaction of its own, the largest cost of a claim on
// PostgreSQL after the claim itself — for a token verified a moment ago.
// Only machine and orchestrator tokens are remembered: a user's token
// stands for what its user may do now, a session's ends with its session,
// and both are read again. A claim-next that makes no claim makes no
// claim transaction: a token revoked on another replica gets what such a
// request gets (204, or 409 outpost_at_capacity), not 401, until its
// entry here is claimTokenTTL old — never a session.

// claimTokenTTL is how long a verified token is taken on its word.
const claimTokenTTL = 5 * time.Second

// maxClaimTokens bounds the tokens remembered; a fleet has a few.
const maxClaimTokens = 1024

// claimTokens remembers the tokens that authenticated claims, by hash.
type claimTokens struct {
	mu     sync.Mutex
	tokens map[string]claimToken
	// forgotten counts the calls of forget: a lookup that began before
	// one may have read a token since revoked, and is not remembered.
	forgotten uint64
}

type claimToken struct {
	t        store.Token
	verified time.Time
}

func newClaimTokens() *claimTokens {
	return &claimTokens{tokens: make(map[string]claimToken)}
}

// get returns the token of hash verified less than claimTokenTTL before
// now.
func (c *claimTokens) get(hash string, now time.Time) (store.Token, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ct, ok := c.tokens[hash]
	if !ok || now.Sub(ct.verified) >= claimTokenTTL || now.Before(ct.verified) {
		return store.Token{}, false
	}
	return ct.t, true
}

// epoch is what put needs to know that no token was forgotten since.
func (c *claimTokens) epoch() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forgotten
}

// put remembers t, verified at now by a lookup that began at epoch, if
// it is a machine's or an orchestrator's token and nothing was forgotten
// since the lookup began.
func (c *claimTokens) put(t store.Token, now time.Time, epoch uint64) {
	if t.UserID != "" || t.SessionID != "" || t.RevokedAt != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.forgotten != epoch {
		return
	}
	if len(c.tokens) >= maxClaimTokens {
		for h, ct := range c.tokens {
			if now.Sub(ct.verified) >= claimTokenTTL {
				delete(c.tokens, h)
			}
		}
		if len(c.tokens) >= maxClaimTokens {
			clear(c.tokens)
		}
	}
	c.tokens[t.Hash] = claimToken{t: t, verified: now}
}

// forget drops the token of id (revoked here) or of hash (a claim found it
// no longer valid).
func (c *claimTokens) forget(id, hash string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgotten++
	if hash != "" {
		delete(c.tokens, hash)
	}
	if id == "" {
		return
	}
	for h, ct := range c.tokens {
		if ct.t.ID == id {
			delete(c.tokens, h)
		}
	}
}

// authenticateClaim is authenticate for a claim request: a token verified
// less than claimTokenTTL ago is not looked up again.
func (s *Server) authenticateClaim(r *http.Request) (principal, error) {
	secret := bearer(r)
	if secret == "" {
		return s.authenticateBearer(r.Context(), secret)
	}
	hash, now := hashSecret(secret), s.now()
	if t, ok := s.claimTokens.get(hash, time.Now()); ok && (t.ExpiresAt == nil || now.Before(*t.ExpiresAt)) {
		s.metrics.claimTokenHits.Inc()
		return tokenPrincipal(t), nil
	}
	// Both before the lookup: the entry is no younger than what it
	// read, and a revocation here while it runs keeps it out.
	verified, epoch := time.Now(), s.claimTokens.epoch()
	p, t, err := s.authenticateToken(r.Context(), hash)
	if err == nil {
		s.claimTokens.put(t, verified, epoch)
	}
	return p, err
}

// authedClaim is authed for the claim routes, authenticating with
// authenticateClaim; a claim refused for its token forgets it.
func (s *Server) authedClaim(h handler, scopes ...string) http.HandlerFunc {
	return s.authedBy(s.authenticateClaim, func(w http.ResponseWriter, r *http.Request) error {
		err := h(w, r)
		if errors.Is(err, store.ErrTokenRevoked) {
			s.claimTokens.forget("", hashSecret(bearer(r)))
		}
		return err
	}, scopes...)
}
