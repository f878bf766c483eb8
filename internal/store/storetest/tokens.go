package storetest

import (
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

func testTokens(t *testing.T, s store.Store) {
	n, err := s.CountTokens(ctx(t))
	must(t, "count of empty store", err)
	if n != 0 {
		t.Errorf("CountTokens of empty store = %d", n)
	}
	a := store.Token{ID: "t-a", Name: "admin", Hash: "ha", Scopes: []string{api.ScopeAdmin}, CreatedAt: base}
	b := store.Token{ID: "t-b", Name: "machine", Hash: "hb", Scopes: []string{api.ScopeMachine, api.ScopeSessionsRead},
		OutpostID: "op", CreatedAt: at(time.Minute), ExpiresAt: ptr(at(time.Hour))}
	c := store.Token{ID: "t-c", Name: "none", Hash: "hc", Scopes: []string{}, CreatedAt: at(2 * time.Minute)}
	for _, tok := range []store.Token{a, b, c} {
		must(t, "create "+tok.ID, s.CreateToken(ctx(t), tok))
	}
	wantErr(t, "duplicate hash", s.CreateToken(ctx(t), store.Token{ID: "t-d", Hash: "ha", CreatedAt: base}), store.ErrConflict)

	got, err := s.TokenByHash(ctx(t), "hb")
	must(t, "by hash", err)
	equal(t, "by hash", got, b)
	_, err = s.TokenByHash(ctx(t), "nope")
	wantErr(t, "by missing hash", err, store.ErrNotFound)

	list, err := s.ListTokens(ctx(t))
	must(t, "list", err)
	equal(t, "list newest first", list, []store.Token{c, b, a})

	must(t, "revoke", s.RevokeToken(ctx(t), "t-b", at(time.Hour)))
	wantErr(t, "revoke missing", s.RevokeToken(ctx(t), "nope", at(time.Hour)), store.ErrNotFound)
	got, err = s.TokenByHash(ctx(t), "hb")
	must(t, "by hash after revoke", err)
	b.RevokedAt = ptr(at(time.Hour))
	equal(t, "revoked", got, b)

	n, err = s.CountTokens(ctx(t))
	must(t, "count", err)
	if n != 3 {
		t.Errorf("CountTokens = %d, want 3", n)
	}
}
