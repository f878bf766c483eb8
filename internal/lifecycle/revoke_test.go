package lifecycle_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// A claim remembers the token it was made (or last renewed) with, and
// revoking that token releases it: the session is back in the queue, its
// epoch over, with no failed attempt counted.
func TestMachineRevokeClaims(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0, 0)
	ctx := t.Context()
	for _, id := range []string{"s1", "s2", "s3", "s4"} {
		r.session(t, id)
	}
	// A claim reads its token in its transaction: the tokens exist.
	for _, id := range []string{"tokA", "tokB", "tokC"} {
		if err := r.st.CreateToken(ctx, store.Token{ID: id, Name: id, Hash: "h" + id, Scopes: []string{api.ScopeMachine}, CreatedAt: r.clock.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	g1, err := r.m.ClaimWith(ctx, "s1", "w1", "tokA")
	if err != nil {
		t.Fatal(err)
	}
	if g1.Entry.ClaimTokenID != "tokA" || r.entry(t, "s1").ClaimTokenID != "tokA" {
		t.Fatalf("claim token of s1: granted %q, stored %q; want tokA", g1.Entry.ClaimTokenID, r.entry(t, "s1").ClaimTokenID)
	}
	g2, ok, err := r.m.ClaimNext(ctx, "o1", "w1", "tokA", store.NextFilter{}, nil)
	if err != nil || !ok {
		t.Fatalf("claim next: %v %v", ok, err)
	}
	if g2.Entry.ClaimTokenID != "tokA" {
		t.Fatalf("claim next stored token %q, want tokA", g2.Entry.ClaimTokenID)
	}
	// Another token's claim, and one renewed under a new token (the
	// machine's token was rotated), are not tokA's to release.
	if _, err := r.m.ClaimWith(ctx, "s3", "w2", "tokB"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.m.ClaimWith(ctx, "s4", "w1", "tokA"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.m.ClaimWith(ctx, "s4", "w1", "tokC"); err != nil {
		t.Fatal(err)
	}
	if got := r.entry(t, "s4").ClaimTokenID; got != "tokC" {
		t.Fatalf("renewed claim's token = %q, want tokC", got)
	}
	ids, err := r.st.ClaimsOfToken(ctx, "tokA")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"s1", g2.Entry.SessionID}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("claims of tokA = %v, want %v", ids, want)
	}
	r.rec.take()

	r.clock.Add(time.Second)
	released, err := r.m.RevokeClaims(ctx, "tokA")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(released)
	if !slices.Equal(released, want) {
		t.Fatalf("released %v, want %v", released, want)
	}
	for _, id := range released {
		e := r.entry(t, id)
		if e.Phase != api.PhasePending || e.AcceptorID != "" || e.ClaimTokenID != "" || e.Attempts != 0 {
			t.Errorf("%s after revoke: phase %s acceptor %q token %q attempts %d; want pending, none, none, 0", id, e.Phase, e.AcceptorID, e.ClaimTokenID, e.Attempts)
		}
		if e.Epoch != 3 {
			t.Errorf("%s epoch = %d, want 3 (claimed at 2, released)", id, e.Epoch)
		}
		sess, err := r.st.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if sess.Status != api.StatusNew {
			t.Errorf("%s status = %s, want new", id, sess.Status)
		}
	}
	calls := r.rec.take()
	if n := len(calls); n != 4 || calls[0] != "claims released" || calls[2] != "claims released" {
		t.Errorf("hooks = %q, want released and committed for each (no failed attempt)", calls)
	}
	for _, id := range []string{"s3", "s4"} {
		if e := r.entry(t, id); e.Phase != api.PhaseClaimed {
			t.Errorf("%s phase = %s after revoking tokA, want claimed", id, e.Phase)
		}
	}
	// Again: nothing left to release. The session claims anew, under
	// another token.
	if released, err := r.m.RevokeClaims(ctx, "tokA"); err != nil || len(released) != 0 {
		t.Fatalf("revoke again: %v %v, want nothing", released, err)
	}
	if g, err := r.m.ClaimWith(ctx, "s1", "w3", "tokB"); err != nil || g.Entry.ClaimTokenID != "tokB" || g.Entry.AcceptorID != "w3" {
		t.Fatalf("claim after revoke: %+v %v", g.Entry, err)
	}
	if released, err := r.m.RevokeClaims(ctx, ""); err != nil || len(released) != 0 {
		t.Fatalf("revoke of no token: %v %v, want nothing", released, err)
	}
	// The revoked token itself claims nothing more, counted as refused.
	if err := r.st.RevokeToken(ctx, "tokA", r.clock.Now()); err != nil {
		t.Fatal(err)
	}
	r.rec.take()
	if _, err := r.m.ClaimWith(ctx, "s2", "w1", "tokA"); !errors.Is(err, store.ErrTokenRevoked) {
		t.Fatalf("claim with the revoked token: %v, want ErrTokenRevoked", err)
	}
	if _, ok, err := r.m.ClaimNext(ctx, "o1", "w1", "tokA", store.NextFilter{}, nil); ok || !errors.Is(err, store.ErrTokenRevoked) {
		t.Fatalf("claim-next with the revoked token: %v %v, want ErrTokenRevoked", ok, err)
	}
	wantCalls(t, r.rec.take(), "claims unauthorized", "claims unauthorized")
}
