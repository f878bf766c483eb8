package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// reader reads a fake remote's frames in the background, as a live remote
// does (which is also what answers the gateway's pings), until stop.
type reader struct {
	frames chan api.Frame
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *fakeRemote) readInBackground() *reader {
	ctx, cancel := context.WithCancel(context.Background())
	rd := &reader{frames: make(chan api.Frame, 64), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rd.done)
		defer close(rd.frames)
		for {
			_, data, err := r.ws.Read(ctx)
			if err != nil {
				return
			}
			var f api.Frame
			if json.Unmarshal(data, &f) == nil {
				rd.frames <- f
			}
		}
	}()
	return rd
}

// stop ends the background reads; the remote then answers no pings. The
// cancelled read also closes the connection, so stop only when done with it.
func (rd *reader) stop() {
	rd.cancel()
	<-rd.done
}

// liveSession creates a one-call script session on outpost, claims it for
// acceptor and connects a remote that says hello and takes the call but
// never answers it, so the session stays running.
func liveSession(t *testing.T, ts *testServer, outpost, acceptor string) (string, api.QueueEntry, *fakeRemote, *reader) {
	t.Helper()
	return liveSessionVia(t, ts, ts.srv.gatewayURL, outpost, acceptor)
}

// liveSessionVia is liveSession with the remote dialling gatewayURL.
func liveSessionVia(t *testing.T, ts *testServer, gatewayURL, outpost, acceptor string) (string, api.QueueEntry, *fakeRemote, *reader) {
	t.Helper()
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"`+outpost+`","agent":{"kind":"script","steps":[{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, acceptor)
	r, _ := dialGateway(t, gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	rd := r.readInBackground()
	for _, want := range []string{api.FrameWelcome, api.FrameCall} {
		select {
		case f := <-rd.frames:
			if f.Type != want {
				t.Fatalf("got %s frame (%s), want %s", f.Type, f.Reason, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s frame", want)
		}
	}
	return id, claim, r, rd
}

func entry(t *testing.T, ts *testServer, id string) api.QueueEntry {
	t.Helper()
	var e api.QueueEntry
	ts.mustDo(200, "GET", "/v1/queue/"+id, ts.admin, nil, &e)
	return e
}

// TestConnectedRemoteHoldsClaim: a claimer that claims once and never
// renews keeps its claim for as long as its remote is connected, many
// claim TTLs long; nobody else can take it, the connect token stays valid,
// and the holder may still release after the deadline.
func TestConnectedRemoteHoldsClaim(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	ts := startServer(t, Options{ClaimTTL: ttl, ReconnectGrace: 1500 * time.Millisecond, SweepInterval: 20 * time.Millisecond})
	ts.outpost("live")
	id, claim, _, rd := liveSession(t, ts, "live", "sandbox-1")
	defer rd.stop()
	deadline := time.Unix(*claim.Status.ClaimDeadline, 0)

	time.Sleep(4 * ttl) // a claimer that never renews, for four TTLs
	e := entry(t, ts, id)
	if e.Status.Phase != api.PhaseClaimed || e.Status.AcceptorID == nil || *e.Status.AcceptorID != "sandbox-1" {
		t.Fatalf("after four TTLs the entry is %+v, want still claimed by sandbox-1", e.Status)
	}
	if e.Status.ClaimDeadline == nil || !time.Unix(*e.Status.ClaimDeadline, 0).After(deadline) {
		t.Errorf("claim_deadline %v did not move past the first deadline %v while the remote is connected", e.Status.ClaimDeadline, deadline.Unix())
	}
	if code := ts.do("POST", "/v1/queue/"+id+"/claim", ts.admin, api.ClaimRequest{AcceptorID: "thief"}, nil); code != 409 {
		t.Errorf("another acceptor's claim of a live session: %d, want 409", code)
	}
	var o api.Outpost
	ts.mustDo(200, "GET", "/v1/outposts/live", ts.admin, nil, &o)
	if o.Status.ActiveClaims != 1 {
		t.Errorf("active_claims = %d, want 1", o.Status.ActiveClaims)
	}
	if _, code := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken); code != 101 {
		t.Errorf("the claim's connect token after four TTLs: %d, want still valid", code)
	}
	for _, ev := range sessionEvents(t, ts, id) {
		if ev.Type == api.EventRelease {
			t.Errorf("the claim was released or lapsed while its remote was connected: %+v", ev)
		}
	}
	// The rightful holder releases after its deadline.
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/release", ts.admin, api.ClaimRequest{AcceptorID: "sandbox-1"}, nil)
}

// TestLateKeepAliveKeepsConnectedClaim: when the keep-alive writes come
// late (here the clock jumps past the grace between two of them, as a
// stalled disk or a starved process would make it) the sweep does not
// lapse a claim whose remote is connected to this server; it keeps it. The
// same claim lapses once its remote is gone.
func TestLateKeepAliveKeepsConnectedClaim(t *testing.T) {
	t.Parallel()
	const grace = time.Minute // keep-alive every 20 s: none runs in this test
	clock := &testClock{t: time.Now()}
	ts := startServer(t, Options{Now: clock.Now, ClaimTTL: time.Minute, ReconnectGrace: grace, SweepInterval: 20 * time.Millisecond})
	ts.outpost("late")
	id, _, r, rd := liveSession(t, ts, "late", "m-late")

	clock.add(3 * grace) // the claim's LiveUntil and deadline are long past
	time.Sleep(300 * time.Millisecond)
	if e := entry(t, ts, id); e.Status.Phase != api.PhaseClaimed || e.Status.AcceptorID == nil || *e.Status.AcceptorID != "m-late" {
		t.Fatalf("a connected remote's claim after a late keep-alive: %+v, want still claimed by m-late", e.Status)
	}
	for _, ev := range sessionEvents(t, ts, id) {
		if ev.Type == api.EventRelease {
			t.Fatalf("the claim lapsed while its remote was connected: %+v", ev)
		}
	}

	r.close()
	rd.stop()
	waitfor.True(t, "the remote's connection to end", func() bool { return ts.srv.hub.Get(id) == nil })
	clock.add(2 * grace)
	waitLapsed(t, ts, id)
}

// TestRemoteGoneClaimLapsesAfterGrace: when the remote's connection goes —
// closed, or silent past the gateway's ping — the claim lapses a reconnect
// grace later (its deadline long past), and the session returns as resume.
// A remote back within the grace goes on as if nothing happened.
func TestRemoteGoneClaimLapsesAfterGrace(t *testing.T) {
	t.Parallel()
	const ttl, grace = time.Second, 2 * time.Second
	ts := startServer(t, Options{ClaimTTL: ttl, ReconnectGrace: grace, SweepInterval: 20 * time.Millisecond})
	ts.outpost("gone")

	t.Run("closed then back within the grace", func(t *testing.T) {
		t.Parallel()
		// A server of its own with a longer grace: the remote comes back
		// well within it however slowly this machine runs the test, and
		// the check below waits past when the claim would have lapsed.
		const grace = 5 * time.Second
		ts := startServer(t, Options{ClaimTTL: ttl, ReconnectGrace: grace, SweepInterval: 20 * time.Millisecond})
		ts.outpost("back")
		id, claim, r, rd := liveSession(t, ts, "back", "m-back")
		time.Sleep(2 * ttl)
		r.close()
		rd.stop()
		time.Sleep(200 * time.Millisecond)
		r2, code := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
		if code != 101 {
			t.Fatalf("reconnect within the grace: %d, want 101", code)
		}
		r2.send(api.Frame{Type: api.FrameHello, SessionID: id})
		rd2 := r2.readInBackground()
		defer rd2.stop()
		time.Sleep(grace + time.Second)
		if e := entry(t, ts, id); e.Status.Phase != api.PhaseClaimed || e.Spec.Kind != api.KindNew {
			t.Fatalf("after a reconnect within the grace the entry is %+v %+v, want claimed, kind new", e.Spec, e.Status)
		}
	})
	for _, name := range []string{"closed", "silent"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The silent remote's bytes pass a proxy that stops forwarding
			// them without closing anything, as a dropped network does.
			p := newFreezeProxy(t, ts.srv.gatewayURL)
			id, claim, r, rd := liveSessionVia(t, ts, p.url, "gone", "m-"+name)
			defer rd.stop()
			time.Sleep(2 * ttl)
			cutAt := time.Now()
			if name == "closed" {
				r.close()
			} else {
				p.freeze()
			}
			waitLapsed(t, ts, id)
			if waited := time.Since(cutAt); waited < grace {
				t.Errorf("the claim lapsed %v after the remote went, before the %v grace", waited, grace)
			}
			e := entry(t, ts, id)
			if e.Spec.Kind != api.KindResume {
				t.Errorf("lapsed entry kind %q, want resume", e.Spec.Kind)
			}
			if _, code := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken); code != 401 {
				t.Errorf("connect token after the lapse: %d, want 401", code)
			}
			var lapsed bool
			for _, ev := range sessionEvents(t, ts, id) {
				lapsed = lapsed || ev.Type == api.EventRelease && ev.AcceptorID == "m-"+name && strings.Contains(ev.Reason, "reconnect grace")
			}
			if !lapsed {
				t.Error("no release event says the claim lapsed after the reconnect grace")
			}
			// A new holder is free to claim it.
			ts.claimFor(id, "m-next-"+name)
		})
	}
}

// freezeProxy forwards TCP connections to a gateway until frozen; then it
// holds every byte, closing nothing.
type freezeProxy struct {
	url    string
	mu     sync.Mutex
	frozen bool
}

func newFreezeProxy(t *testing.T, gatewayURL string) *freezeProxy {
	t.Helper()
	upstream := strings.TrimPrefix(strings.SplitN(strings.TrimPrefix(gatewayURL, "ws://"), "/", 2)[0], "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{url: strings.Replace(gatewayURL, upstream, ln.Addr().String(), 1)}
	var wg sync.WaitGroup
	var conns []net.Conn
	var connsMu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		connsMu.Lock()
		for _, c := range conns {
			c.Close()
		}
		connsMu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				down.Close()
				continue
			}
			connsMu.Lock()
			conns = append(conns, down, up)
			connsMu.Unlock()
			for _, pair := range [][2]net.Conn{{up, down}, {down, up}} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.pipe(pair[0], pair[1])
				}()
			}
		}
	}()
	return p
}

// pipe copies src to dst until either ends, dropping nothing but holding
// everything once frozen.
func (p *freezeProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		frozen := p.frozen
		p.mu.Unlock()
		if frozen {
			_, _ = io.Copy(io.Discard, src) // held: never delivered
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *freezeProxy) freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

// TestNoRemoteClaimLapsesAtDeadline: a claim whose remote never connects
// lapses at its deadline, as before.
func TestNoRemoteClaimLapsesAtDeadline(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{ClaimTTL: 300 * time.Millisecond, ReconnectGrace: time.Minute, SweepInterval: 20 * time.Millisecond})
	ts.outpost("never")
	s := ts.session("never")
	id := s.Metadata.SessionID
	ts.claimFor(id, "m1")
	start := time.Now()
	waitLapsed(t, ts, id)
	if waited := time.Since(start); waited > 30*time.Second {
		t.Errorf("lapse took %v", waited)
	}
	if code := ts.do("POST", "/v1/queue/"+id+"/release", ts.admin, api.ClaimRequest{AcceptorID: "m1"}, nil); code != 409 {
		t.Errorf("release of a lapsed claim: %d, want 409", code)
	}
}

func sessionEvents(t *testing.T, ts *testServer, id string) []api.Event {
	t.Helper()
	var page api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events", ts.admin, nil, &page)
	return page.Items
}

// TestSecondRemoteInstanceRefused: two remote processes serving one claim
// (two workers sharing an identity) never flap: while the first is alive,
// the second is refused with an error that says why; the first's own
// reconnect replaces it; once the first stops answering, a new instance
// takes over.
func TestSecondRemoteInstanceRefused(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{ClaimTTL: time.Minute, ReconnectGrace: 3 * time.Second, SweepInterval: 20 * time.Millisecond})
	ts.outpost("twice")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"twice","agent":{"kind":"script","steps":[{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, "shared")
	p := newFreezeProxy(t, ts.srv.gatewayURL)
	hello := func(gw, instance string) (*fakeRemote, *reader) {
		r, code := dialGateway(t, gw, id, claim.Status.ConnectToken)
		if code != 101 {
			t.Fatalf("dial: %d", code)
		}
		r.send(api.Frame{Type: api.FrameHello, SessionID: id, Instance: instance})
		return r, r.readInBackground()
	}
	next := func(rd *reader) api.Frame {
		select {
		case f, ok := <-rd.frames:
			if !ok {
				t.Fatal("connection closed")
			}
			return f
		case <-time.After(10 * time.Second):
			t.Fatal("no frame")
		}
		return api.Frame{}
	}

	_, first := hello(p.url, "aaaa")
	defer first.stop()
	if f := next(first); f.Type != api.FrameWelcome {
		t.Fatalf("first remote got %s, want welcome", f.Type)
	}
	if f := next(first); f.Type != api.FrameCall {
		t.Fatalf("first remote got %s, want call", f.Type)
	}
	_, second := hello(ts.srv.gatewayURL, "bbbb")
	if f := next(second); f.Type != api.FrameError || !strings.Contains(f.Reason, "another remote (instance aaaa)") {
		t.Fatalf("second instance got %s %q, want an error naming the serving instance", f.Type, f.Reason)
	}
	second.stop()
	if got := ts.srv.hub.Get(id); got == nil || got.Instance != "aaaa" {
		t.Fatalf("the session's connection after the refusal: %+v, want instance aaaa", got)
	}
	if n := testutil.ToFloat64(ts.srv.metrics.remotesRefused); n != 1 {
		t.Errorf("outpost_gateway_remotes_refused_total = %v after one refusal, want 1", n)
	}
	var connected int
	for _, ev := range sessionEvents(t, ts, id) {
		if ev.Type == api.EventRemoteConnected {
			connected++
		}
	}
	if connected != 1 {
		t.Errorf("%d remote_connected events, want 1 (the refused remote is not recorded)", connected)
	}

	// The first instance reconnecting replaces its own connection.
	p2 := newFreezeProxy(t, ts.srv.gatewayURL)
	_, again := hello(p2.url, "aaaa")
	defer again.stop()
	if f := next(again); f.Type != api.FrameWelcome {
		t.Fatalf("same instance reconnecting got %s, want welcome", f.Type)
	}
	for range first.frames { // replaced: the old connection is closed
	}
	// Once the serving instance stops answering (its network is gone), a
	// new instance takes over at once, without waiting for the grace.
	p2.freeze()
	_, third := hello(ts.srv.gatewayURL, "cccc")
	defer third.stop()
	if f := next(third); f.Type != api.FrameWelcome {
		t.Fatalf("new instance after the old one went silent got %s %q, want welcome", f.Type, f.Reason)
	}
	// The gateway attaches a connection just after its welcome.
	waitfor.True(t, "instance cccc to be the session's connection", func() bool {
		got := ts.srv.hub.Get(id)
		return got != nil && got.Instance == "cccc"
	})
}
