package server

import (
	"context"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// Revoking a machine token releases the claims it holds: a claim whose
// remote is connected would otherwise be kept alive through the gateway
// connection, and the session would go on under a token that no longer
// works.

// claimWith claims session id for acceptor with token, by id.
func (ts *testServer) claimWith(token, id, acceptor string) api.QueueEntry {
	ts.t.Helper()
	var e api.QueueEntry
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/claim", token, api.ClaimRequest{AcceptorID: acceptor}, &e)
	return e
}

// waitReleased waits up to 5 s for session id's entry to be back in the
// queue, and returns it.
func waitReleased(t *testing.T, ts *testServer, id string) api.QueueEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var e api.QueueEntry
	if !waitfor.Poll(ctx, func() bool {
		e = api.QueueEntry{}
		return ts.do("GET", "/v1/queue/"+id, ts.admin, nil, &e) == 200 && e.Status.Phase == api.PhasePending
	}) {
		t.Fatalf("the claim of %s was not released within 5 s: %+v", id, e.Status)
	}
	return e
}

// waitRemoteClosed waits up to 5 s for the remote's connection to be closed by
// the server, and returns the close status.
func waitRemoteClosed(t *testing.T, rem *answeringRemote, what string) websocket.StatusCode {
	t.Helper()
	select {
	case <-rem.done:
		return rem.status
	case <-time.After(5 * time.Second):
		t.Fatalf("the remote of %s is still connected 5 s after its token was revoked", what)
		return 0
	}
}

func TestRevokeTokenReleasesItsClaims(t *testing.T) {
	t.Parallel()
	// The grace is long and the claim TTL longer than the test: only the
	// revocation can end these claims while their remotes are connected.
	ts := startServer(t, Options{ClaimTTL: time.Minute, ReconnectGrace: time.Minute, SweepInterval: 50 * time.Millisecond})
	ts.outpost("rv")
	machine := ts.token([]string{api.ScopeMachine}, "rv")
	other := ts.token([]string{api.ScopeMachine}, "rv")
	byID := ts.session("rv").Metadata.SessionID
	untouched := ts.session("rv").Metadata.SessionID

	// One claim by id, one by claim-next, both with the machine token,
	// and one with another token; each remote connected.
	c1 := ts.claimWith(machine, byID, "m1")
	c3 := ts.claimWith(other, untouched, "m2")
	next := ts.session("rv").Metadata.SessionID
	var c2 api.QueueEntry
	ts.mustDo(200, "POST", "/v1/outposts/rv/queue:claim", machine, api.ClaimNextRequest{AcceptorID: "m1"}, &c2)
	if c2.Metadata.SessionID != next {
		t.Fatalf("claim-next took %s, want %s", c2.Metadata.SessionID, next)
	}
	gw := ts.srv.gatewayURL
	r1 := connectRemoteC(t, gw, byID, c1.Status.ConnectToken, false)
	r2 := connectRemoteC(t, gw, next, c2.Status.ConnectToken, false)
	r3 := connectRemoteC(t, gw, untouched, c3.Status.ConnectToken, false)
	for _, r := range []*answeringRemote{r1, r2, r3} {
		waitFrame(t, r.frames, api.FrameWelcome)
	}
	// Connected, they hold their claims past a sweep or two.
	time.Sleep(200 * time.Millisecond)
	for _, id := range []string{byID, next, untouched} {
		var e api.QueueEntry
		ts.mustDo(200, "GET", "/v1/queue/"+id, ts.admin, nil, &e)
		if e.Status.Phase != api.PhaseClaimed {
			t.Fatalf("%s before the revocation: %+v, want claimed", id, e.Status)
		}
	}

	ts.mustDo(204, "DELETE", "/v1/tokens/"+ts.tokenIDOf(machine), ts.admin, nil, nil)
	for _, c := range []struct {
		id    string
		claim api.QueueEntry
		rem   *answeringRemote
	}{{byID, c1, r1}, {next, c2, r2}} {
		e := waitReleased(t, ts, c.id)
		if e.Status.AcceptorID != nil || e.Status.Attempts != 0 {
			t.Errorf("%s released: %+v, want no acceptor and no failed attempt", c.id, e.Status)
		}
		if st := waitRemoteClosed(t, c.rem, c.id); st != websocket.StatusPolicyViolation {
			t.Errorf("the remote of %s closed with %v, want %v (its claim is over)", c.id, st, websocket.StatusPolicyViolation)
		}
		if _, code := dialGateway(t, gw, c.id, c.claim.Status.ConnectToken); code != 401 {
			t.Errorf("the connect token of %s after the revocation: %d, want 401", c.id, code)
		}
		var sess api.Session
		ts.mustDo(200, "GET", "/v1/sessions/"+c.id, ts.admin, nil, &sess)
		if api.IsFinal(sess.Status.Status) {
			t.Errorf("%s ended on the revocation: %+v, want it back in the queue", c.id, sess.Status)
		}
	}
	// The other token's claim goes on, its remote connected.
	var e api.QueueEntry
	ts.mustDo(200, "GET", "/v1/queue/"+untouched, ts.admin, nil, &e)
	if e.Status.Phase != api.PhaseClaimed || e.Status.AcceptorID == nil || *e.Status.AcceptorID != "m2" {
		t.Errorf("the other token's claim after the revocation: %+v, want claimed by m2", e.Status)
	}
	select {
	case <-r3.done:
		t.Errorf("the other token's remote was closed: %v", r3.status)
	default:
	}

	// The revoked token cannot claim again; another token can, and its
	// remote is served.
	if code := ts.do("POST", "/v1/queue/"+byID+"/claim", machine, api.ClaimRequest{AcceptorID: "m1"}, nil); code != 401 {
		t.Errorf("claim with the revoked token: %d, want 401", code)
	}
	again := ts.claimWith(other, byID, "m3")
	r4 := connectRemoteC(t, gw, byID, again.Status.ConnectToken, false)
	waitFrame(t, r4.frames, api.FrameWelcome)
	// Revoking it again releases nothing more and still answers 204.
	ts.mustDo(204, "DELETE", "/v1/tokens/"+ts.tokenIDOf(other), ts.admin, nil, nil)
	waitReleased(t, ts, byID)
	waitReleased(t, ts, untouched)
}

// TestRevokeTokenReleasesClaimsAcrossReplicas: the token is revoked on one
// replica; the remote of its claim, connected to the other, is closed
// there, as the release reaches it by the change feed.
func TestRevokeTokenReleasesClaimsAcrossReplicas(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{})
	rs := startReplicaSetC(t, pg.Database(t), 2, Options{ClaimTTL: time.Minute, ReconnectGrace: time.Minute, SweepInterval: 50 * time.Millisecond})
	a, b := rs[0], rs[1]
	a.outpost("rv")
	machine := a.token([]string{api.ScopeMachine}, "rv")
	id := a.session("rv").Metadata.SessionID
	claim := b.claimWith(machine, id, "m1")
	rem := connectRemoteC(t, b.srv.gatewayURL, id, claim.Status.ConnectToken, false)
	waitFrame(t, rem.frames, api.FrameWelcome)
	if got := ownerOf(t, a.testServer, id); got != "r1" {
		t.Fatalf("owner %q, want r1", got)
	}

	a.mustDo(204, "DELETE", "/v1/tokens/"+a.tokenIDOf(machine), a.admin, nil, nil)
	waitReleased(t, a.testServer, id)
	if st := waitRemoteClosed(t, rem, id); st != websocket.StatusPolicyViolation {
		t.Errorf("the remote closed with %v, want %v", st, websocket.StatusPolicyViolation)
	}
	other := a.token([]string{api.ScopeMachine}, "rv")
	again := a.claimWith(other, id, "m2")
	r2 := connectRemoteC(t, a.srv.gatewayURL, id, again.Status.ConnectToken, false)
	waitFrame(t, r2.frames, api.FrameWelcome)
}
