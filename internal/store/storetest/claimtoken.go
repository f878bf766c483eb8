package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// A claim reads the token it was asked with in its own transaction.

// claimWith claims session id (or, with next, the next of outpost op) for
// acceptor with token tokenID, writing the token into the entry as the
// server's claim does.
func claimWith(t *testing.T, s store.Store, id, tokenID string, next bool, now time.Time, during func()) (store.Mutation, error) {
	t.Helper()
	fn := func(_ store.Session, e store.QueueEntry, _ store.OutpostLoad) (store.Mutation, error) {
		if during != nil {
			during()
		}
		claim("acc", now.Add(time.Hour))(&e)
		e.ClaimTokenID = tokenID
		return store.Mutation{Entry: &e}, nil
	}
	if next {
		return s.ClaimNext(ctx(t), "op", now, tokenID, store.NextFilter{}, fn)
	}
	return s.ClaimSession(ctx(t), id, now, tokenID, fn)
}

// testClaimToken: a claim with a revoked, expired or missing token fails
// with ErrTokenRevoked before fn runs and writes nothing, by id and by
// ClaimNext; a valid token's claim, or one with none, commits.
func testClaimToken(t *testing.T, s store.Store) {
	must(t, "create outpost", s.CreateOutpost(ctx(t), newOutpost("op", "o")))
	exp := at(time.Minute)
	for _, tok := range []store.Token{
		{ID: "t-ok", Name: "ok", Hash: "hok", Scopes: []string{api.ScopeMachine}, CreatedAt: base},
		{ID: "t-rev", Name: "rev", Hash: "hrev", Scopes: []string{api.ScopeMachine}, CreatedAt: base},
		{ID: "t-exp", Name: "exp", Hash: "hexp", Scopes: []string{api.ScopeMachine}, CreatedAt: base, ExpiresAt: &exp},
	} {
		must(t, "create token "+tok.ID, s.CreateToken(ctx(t), tok))
	}
	must(t, "revoke", s.RevokeToken(ctx(t), "t-rev", base))
	create(t, s, newSession("s1", "op", "t", 0))

	for _, tc := range []struct {
		name, token string
		now         time.Time
	}{
		{"revoked", "t-rev", base},
		{"expired", "t-exp", exp},
		{"missing", "t-gone", base},
	} {
		for _, next := range []bool{false, true} {
			ran := false
			_, err := claimWith(t, s, "s1", tc.token, next, tc.now, func() { ran = true })
			if !errors.Is(err, store.ErrTokenRevoked) {
				t.Fatalf("%s token, next %v: err = %v, want ErrTokenRevoked", tc.name, next, err)
			}
			if ran {
				t.Errorf("%s token, next %v: fn ran", tc.name, next)
			}
			e, err := s.GetQueueEntry(ctx(t), "s1")
			must(t, "get s1", err)
			equal(t, tc.name+" token: phase", e.Phase, api.PhasePending)
		}
	}
	// A refused token is the answer for a session that is not there too:
	// the token is read first.
	if _, err := claimWith(t, s, "nope", "t-rev", false, base, nil); !errors.Is(err, store.ErrTokenRevoked) {
		t.Fatalf("claim of a missing session with a revoked token: %v, want ErrTokenRevoked", err)
	}
	// Just before its expiry the token still claims.
	m, err := claimWith(t, s, "s1", "t-exp", false, exp.Add(-time.Millisecond), nil)
	must(t, "claim before expiry", err)
	equal(t, "claim token", m.Entry.ClaimTokenID, "t-exp")
	create(t, s, newSession("s2", "op", "t", time.Second))
	m, err = claimWith(t, s, "", "t-ok", true, base, nil)
	must(t, "ClaimNext with a valid token", err)
	equal(t, "picked", m.Entry.SessionID, "s2")
	create(t, s, newSession("s3", "op", "t", 2*time.Second))
	_, err = claimWith(t, s, "s3", "", false, base, nil)
	must(t, "claim without a token", err)
}

// testClaimTokenRevokeOrder: a revocation that comes while a claim with
// its token is in its transaction waits for that claim to commit, so that
// the revocation's release (ClaimsOfToken, read after it) finds the claim;
// a claim after the revocation is refused.
func testClaimTokenRevokeOrder(t *testing.T, s store.Store) {
	must(t, "create outpost", s.CreateOutpost(ctx(t), newOutpost("op", "o")))
	must(t, "create token", s.CreateToken(ctx(t), store.Token{ID: "t-m", Name: "m", Hash: "hm", Scopes: []string{api.ScopeMachine}, CreatedAt: base}))
	create(t, s, newSession("s1", "op", "t", 0))
	create(t, s, newSession("s2", "op", "t", time.Second))

	revoked := make(chan error, 1)
	var early error
	_, err := claimWith(t, s, "s1", "t-m", false, base, func() {
		// fn runs inside the claim's transaction, after its token was
		// read: the revocation must not finish before the claim commits.
		go func() { revoked <- s.RevokeToken(ctx(t), "t-m", at(time.Second)) }()
		select {
		case err := <-revoked:
			early = errors.Join(errors.New("the revocation finished while the claim was in its transaction"), err)
		case <-time.After(300 * time.Millisecond):
		}
	})
	must(t, "claim", err)
	if early != nil {
		t.Fatal(early)
	}
	select {
	case err := <-revoked:
		must(t, "revoke", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the revocation did not finish after the claim committed")
	}
	ids, err := s.ClaimsOfToken(ctx(t), "t-m")
	must(t, "ClaimsOfToken", err)
	equal(t, "claims of the revoked token", ids, []string{"s1"})
	if _, err := claimWith(t, s, "", "t-m", true, at(2*time.Second), nil); !errors.Is(err, store.ErrTokenRevoked) {
		t.Fatalf("claim after the revocation: err = %v, want ErrTokenRevoked", err)
	}
}
