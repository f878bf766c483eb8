package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
)

// A claim skips the token lookup for a machine token this server verified
// a moment ago, and reads the token in its own transaction instead: a
// token revoked through another replica, still remembered here, claims
// nothing — by id or by claim-next — and is then forgotten.
func TestClaimTokenRevokedOnAnotherReplica(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{})
	rs := startReplicaSetC(t, pg.Database(t), 2, Options{ClaimTTL: time.Minute})
	a, b := rs[0], rs[1]
	a.outpost("ct")
	machine := a.token([]string{api.ScopeMachine}, "ct")
	first := a.session("ct").Metadata.SessionID
	byID := a.session("ct").Metadata.SessionID

	hits := func() float64 { return testutil.ToFloat64(b.srv.metrics.claimTokenHits) }
	b.claimWith(machine, first, "m1")
	b.claimWith(machine, first, "m1") // a renewal, with the token remembered
	if hits() != 1 {
		t.Fatalf("claims with the token remembered = %v, want 1", hits())
	}

	a.mustDo(204, "DELETE", "/v1/tokens/"+a.tokenIDOf(machine), a.admin, nil, nil)
	before := hits()
	code, msg := b.errorWith("POST", "/v1/queue/"+byID+"/claim", machine, api.ClaimRequest{AcceptorID: "m1"})
	if code != http.StatusUnauthorized || !strings.Contains(msg, "the claim was not made") {
		t.Fatalf("claim by id after the revocation on another replica: %d %q, want 401 from the claim's transaction", code, msg)
	}
	if hits() != before+1 {
		t.Fatalf("the refused claim did not use the remembered token (reuses %v → %v): the test proves nothing", before, hits())
	}
	var e api.QueueEntry
	a.mustDo(200, "GET", "/v1/queue/"+byID, a.admin, nil, &e)
	if e.Status.Phase != api.PhasePending {
		t.Fatalf("%s after the refused claim: %+v, want pending", byID, e.Status)
	}
	// Forgotten: the next request looks the token up and is refused there.
	code, msg = b.errorWith("POST", "/v1/outposts/ct/queue:claim", machine, api.ClaimNextRequest{AcceptorID: "m1"})
	if code != http.StatusUnauthorized || msg != "The API token has been revoked." {
		t.Fatalf("claim-next after the refused claim: %d %q, want 401 from the lookup", code, msg)
	}
	if hits() != before+1 {
		t.Fatalf("a refused token was used again (reuses %v)", hits())
	}
}

// A revocation through this server forgets the token at once; a claim-next
// that finds a session with a remembered, since revoked token is refused
// by its transaction, like a claim by id.
func TestClaimTokenForgottenOnRevoke(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{ClaimTTL: time.Minute})
	ts.outpost("cf")
	machine := ts.token([]string{api.ScopeMachine}, "cf")
	id := ts.session("cf").Metadata.SessionID
	ts.claimWith(machine, id, "m1")

	// Revoked in the store, as another replica would: claim-next is
	// refused by its transaction, the session left pending.
	next := ts.session("cf").Metadata.SessionID
	if err := ts.srv.store.RevokeToken(t.Context(), ts.tokenIDOf(machine), time.Now()); err != nil {
		t.Fatal(err)
	}
	code, msg := ts.errorWith("POST", "/v1/outposts/cf/queue:claim", machine, api.ClaimNextRequest{AcceptorID: "m1"})
	if code != http.StatusUnauthorized || !strings.Contains(msg, "the claim was not made") {
		t.Fatalf("claim-next with a remembered, revoked token: %d %q, want 401 from the claim's transaction", code, msg)
	}
	var e api.QueueEntry
	ts.mustDo(200, "GET", "/v1/queue/"+next, ts.admin, nil, &e)
	if e.Status.Phase != api.PhasePending {
		t.Fatalf("%s: %+v, want pending", next, e.Status)
	}

	// Through the API: forgotten before the DELETE answers.
	other := ts.token([]string{api.ScopeMachine}, "cf")
	third := ts.session("cf").Metadata.SessionID
	ts.claimWith(other, next, "m2")
	ts.mustDo(204, "DELETE", "/v1/tokens/"+ts.tokenIDOf(other), ts.admin, nil, nil)
	code, msg = ts.errorWith("POST", "/v1/queue/"+third+"/claim", other, api.ClaimRequest{AcceptorID: "m2"})
	if code != http.StatusUnauthorized || msg != "The API token has been revoked." {
		t.Fatalf("claim after DELETE: %d %q, want 401 from the lookup", code, msg)
	}
}

// Only machine and orchestrator tokens are remembered, and an entry
// lasts claimTokenTTL.
func TestClaimTokensRemember(t *testing.T) {
	c := newClaimTokens()
	now := time.Now()
	e := c.epoch()
	c.put(store.Token{ID: "m", Hash: "hm"}, now, e)
	c.put(store.Token{ID: "u", Hash: "hu", UserID: "user"}, now, e)
	c.put(store.Token{ID: "s", Hash: "hs", SessionID: "sess"}, now, e)
	revoked := now
	c.put(store.Token{ID: "r", Hash: "hr", RevokedAt: &revoked}, now, e)
	for _, h := range []string{"hu", "hs", "hr"} {
		if _, ok := c.get(h, now); ok {
			t.Errorf("%s remembered", h)
		}
	}
	if _, ok := c.get("hm", now.Add(claimTokenTTL-time.Millisecond)); !ok {
		t.Error("a machine token was not remembered")
	}
	if _, ok := c.get("hm", now.Add(claimTokenTTL)); ok {
		t.Error("a machine token was remembered past claimTokenTTL")
	}
	c.forget("m", "")
	if _, ok := c.get("hm", now); ok {
		t.Error("a forgotten token was remembered")
	}
	// A lookup that began before a token was forgotten (it may have
	// read that token before its revocation) is not remembered.
	c.put(store.Token{ID: "m", Hash: "hm"}, now, e)
	if _, ok := c.get("hm", now); ok {
		t.Error("a lookup from before a forget was remembered")
	}
	e = c.epoch()
	for i := range maxClaimTokens + 10 {
		c.put(store.Token{ID: "x", Hash: strings.Repeat("h", i+1)}, now, e)
	}
	if n := len(c.tokens); n > maxClaimTokens {
		t.Errorf("%d tokens remembered, at most %d", n, maxClaimTokens)
	}
}

// A parked claim-next whose token was revoked while it waited (on another
// replica: nothing told this server) is woken for a new session first,
// refused by the claim's transaction, and passes the wake on: the next
// claimer on the list gets the session at once, not when its wait ends.
func TestClaimWaitRevokedPassesTheWake(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{TokenRecheckInterval: time.Hour})
	ts.outpost("dev") // askNext's
	revoked := ts.token([]string{api.ScopeMachine}, "dev")
	other := ts.token([]string{api.ScopeMachine}, "dev")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	t.Cleanup(hc.CloseIdleConnections)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	answers := make([]chan claimWaitAnswer, 2)
	for i, tok := range []string{revoked, other} {
		answers[i] = make(chan claimWaitAnswer, 1)
		before := ts.srv.claimWaits.idle("")
		go func() {
			answers[i] <- askNext(ctx, hc, ts.url, tok, api.ClaimNextRequest{AcceptorID: fmt.Sprint("w", i), WaitSeconds: 30})
		}()
		waitUntil(t, "the claimer parks", func() bool {
			select {
			case a := <-answers[i]:
				t.Fatalf("claimer %d answered %d (%v) instead of parking", i, a.code, a.err)
			default:
			}
			return ts.srv.claimWaits.idle("") == before+1
		})
	}
	if err := ts.srv.store.RevokeToken(t.Context(), ts.tokenIDOf(revoked), time.Now()); err != nil {
		t.Fatal(err)
	}
	id := ts.session("dev").Metadata.SessionID
	if a := <-answers[0]; a.code != http.StatusUnauthorized {
		t.Fatalf("the parked request of the revoked token: %d %+v, want 401", a.code, a.entry.Status)
	}
	select {
	case a := <-answers[1]:
		if a.code != 200 || a.entry.Metadata.SessionID != id {
			t.Fatalf("the next claimer: %d %q, want 200 %s", a.code, a.entry.Metadata.SessionID, id)
		}
		t.Logf("took %s", a.took)
		if a.took > 20*time.Second {
			t.Fatalf("the next claimer got the session after %s: the wake was not passed on", a.took)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the next claimer did not get the session: the wake was not passed on")
	}
}
