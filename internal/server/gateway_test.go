package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// fakeRemote speaks the gateway protocol by hand, to test the server's side.
type fakeRemote struct {
	t  *testing.T
	ws *websocket.Conn
}

func dialGateway(t *testing.T, gatewayURL, sessionID, token string) (*fakeRemote, int) {
	t.Helper()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	h.Set(api.HeaderSessionID, sessionID)
	ws, resp, err := websocket.Dial(context.Background(), gatewayURL, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		if resp == nil {
			t.Fatalf("dial gateway: %v", err)
		}
		return nil, resp.StatusCode
	}
	t.Cleanup(func() { ws.CloseNow() })
	return &fakeRemote{t: t, ws: ws}, http.StatusSwitchingProtocols
}

// send sends f, in the current protocol version unless f.V is set. A hello
// of a version that requires an instance names "fake-remote" unless it
// names another: every fake remote is then the same process, as
// instance-less remotes were.
func (r *fakeRemote) send(f api.Frame) {
	r.t.Helper()
	if f.V == 0 {
		f.V = int(api.CurrentProtocolVersion)
	}
	if f.Type == api.FrameHello && f.Instance == "" && api.ProtocolVersion(f.V) >= api.InstanceRequiredSince {
		f.Instance = "fake-remote"
	}
	b, _ := json.Marshal(f)
	if err := r.ws.Write(context.Background(), websocket.MessageText, b); err != nil {
		r.t.Fatalf("send %s: %v", f.Type, err)
	}
}

// recv reads the next JSON frame, failing after 10 s.
func (r *fakeRemote) recv() (api.Frame, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, data, err := r.ws.Read(ctx)
	if err != nil {
		return api.Frame{}, err
	}
	var f api.Frame
	if err := json.Unmarshal(data, &f); err != nil {
		r.t.Fatalf("frame %s: %v", data, err)
	}
	return f, nil
}

func (r *fakeRemote) expect(typ string) api.Frame {
	r.t.Helper()
	f, err := r.recv()
	if err != nil {
		r.t.Fatalf("waiting for %s: %v", typ, err)
	}
	if f.Type != typ {
		r.t.Fatalf("got %s frame, want %s: %+v", f.Type, typ, f)
	}
	return f
}

// close closes the connection at once, as a machine that dies does.
func (r *fakeRemote) close() { r.ws.CloseNow() }

// waitLapsed waits up to 10 s for the session's claim to lapse.
func waitLapsed(t *testing.T, ts *testServer, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var e api.QueueEntry
	if !waitfor.Poll(ctx, func() bool {
		e = api.QueueEntry{}
		code := ts.do("GET", "/v1/queue/"+id, ts.admin, nil, &e)
		return code != 200 || e.Status.Phase == api.PhasePending
	}) {
		t.Fatalf("the claim on %s did not lapse: %+v", id, e.Status)
	}
}

func (ts *testServer) claimFor(id, acceptor string) api.QueueEntry {
	ts.t.Helper()
	var e api.QueueEntry
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/claim", ts.admin, api.ClaimRequest{AcceptorID: acceptor}, &e)
	return e
}

func TestGatewayProtocolAndFencing(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{ClaimTTL: 2 * time.Second, ReconnectGrace: 300 * time.Millisecond, SweepInterval: 50 * time.Millisecond})
	ts.outpost("gw")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"gw","env":{"CI":"1"},"secrets":{"KEY":"v1"},
		"agent":{"kind":"script","steps":[{"tool":"list_dir","args":{"path":"."}},{"tool":"list_dir","args":{"path":"/"}}]}}`, &s)
	id := s.Metadata.SessionID
	gw := ts.srv.gatewayURL

	if _, code := dialGateway(t, gw, id, "opc_not-a-token"); code != 401 {
		t.Fatalf("bad connect token: %d, want 401", code)
	}
	claim := ts.claimFor(id, "m1")
	r, _ := dialGateway(t, gw, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id, Capabilities: &api.Capabilities{OS: "linux", Git: "git 2"}})
	w := r.expect(api.FrameWelcome)
	if w.Env["CI"] != "1" || w.Secrets["KEY"] != "v1" {
		t.Fatalf("welcome %+v", w)
	}
	call := r.expect(api.FrameCall)
	if call.Seq != 1 || call.Tool != api.ToolListDir {
		t.Fatalf("first call %+v", call)
	}
	r.send(api.Frame{Type: api.FrameResult, Seq: 1, OK: true, Value: json.RawMessage(`{"entries":[]}`)})
	if ack := r.expect(api.FrameAck); ack.Seq != 1 {
		t.Fatalf("ack %+v", ack)
	}
	if call := r.expect(api.FrameCall); call.Seq != 2 {
		t.Fatalf("second call %+v", call)
	}
	// A renewal keeps the remote's token valid; only a new holder kills it.
	if renewed := ts.claimFor(id, "m1"); renewed.Status.ConnectToken == claim.Status.ConnectToken {
		t.Fatal("renewal reused the connect token")
	}
	if _, code := dialGateway(t, gw, id, claim.Status.ConnectToken); code != 101 {
		t.Fatalf("old token after renewal: %d, want it still valid", code)
	}
	// The machine dies: its connection goes, the claim lapses after the
	// grace (its deadline passed long ago), and the token is dead.
	r.close()
	waitLapsed(t, ts, id)
	if _, code := dialGateway(t, gw, id, claim.Status.ConnectToken); code != 401 {
		t.Fatalf("token after the claim lapsed: %d, want 401", code)
	}
	var after api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &after)
	if after.Status.Status != api.StatusResuming || after.Status.LastSeq != 1 {
		t.Fatalf("after lapse: %+v", after.Status)
	}
	// The next machine gets the call without a stored result again.
	claim2 := ts.claimFor(id, "m2")
	r2, _ := dialGateway(t, gw, id, claim2.Status.ConnectToken)
	r2.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r2.expect(api.FrameWelcome)
	if call := r2.expect(api.FrameCall); call.Seq != 2 {
		t.Fatalf("resumed call %+v, want seq 2", call)
	}
	r2.send(api.Frame{Type: api.FrameResult, Seq: 2, OK: true, Value: json.RawMessage(`{}`)})
	r2.expect(api.FrameAck)
	end := r2.expect(api.FrameEnd)
	if end.Reason == "" {
		t.Fatal("end frame without a reason")
	}
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &after)
	if after.Status.Status != api.StatusExit || after.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("final: %+v", after.Status)
	}
}

// TestLimitWithoutRemote ends a session past max_duration_s whose remote
// went away and never came back.
func TestLimitWithoutRemote(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{SweepInterval: 50 * time.Millisecond})
	ts.outpost("lim")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"lim","limits":{"max_duration_s":1},"agent":{"kind":"script","steps":[{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, "m")
	r, _ := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r.expect(api.FrameWelcome)
	r.expect(api.FrameCall)
	ts.srv.stopRunner(id) // as after a server restart: nobody watches the session
	r.ws.CloseNow()
	waitfor.True(t, "the limit to end the session", func() bool {
		var got api.Session
		ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &got)
		return got.Status.StatusDetail == api.DetailUsageLimitExceeded
	})
}

// TestNoCallAfterEnd terminates a session while its remote runs a call:
// the late result is acknowledged but recorded nowhere, no further call
// is sent, the transcript ends with the end event, and the holder can
// still renew until it releases.
func TestNoCallAfterEnd(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("end")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"end","agent":{"kind":"script","steps":[{"tool":"list_dir"},{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, "m")
	r, _ := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r.expect(api.FrameWelcome)
	r.expect(api.FrameCall)
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/terminate", ts.admin, nil, nil)
	r.expect(api.FrameEnd)
	r.send(api.Frame{Type: api.FrameResult, Seq: 1, OK: true, Value: json.RawMessage(`{}`)})
	if ack := r.expect(api.FrameAck); ack.Seq != 1 {
		t.Fatalf("ack %+v", ack)
	}
	var evs api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events", ts.admin, nil, &evs)
	if last := evs.Items[len(evs.Items)-1]; last.Type != api.EventEnd {
		t.Fatalf("transcript goes on after the end: last event %+v", last)
	}
	for _, ev := range evs.Items {
		if ev.Type == api.EventResult || ev.Type == api.EventCall && ev.CallSeq == 2 {
			t.Fatalf("event recorded after the end: %+v", ev)
		}
	}
	var e api.QueueEntry
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/claim", ts.admin, api.ClaimRequest{AcceptorID: "m"}, &e)
	if e.Status.SessionStatus != api.QueueSessionTerminated {
		t.Fatalf("renewal of an ended session: %+v", e.Status)
	}
	ts.mustDo(409, "POST", "/v1/queue/"+id+"/claim", ts.admin, api.ClaimRequest{AcceptorID: "other"}, nil)
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/release", ts.admin, api.ClaimRequest{AcceptorID: "m"}, nil)
	// Listed as ended until the retention passes, never claimable again.
	ts.mustDo(200, "GET", "/v1/queue/"+id, ts.admin, nil, &e)
	if e.Status.Phase != api.PhasePending || e.Status.AcceptorID != nil || e.Status.SessionStatus != api.QueueSessionTerminated {
		t.Fatalf("entry of the ended session after its release: %+v", e.Status)
	}
	ts.mustDo(409, "POST", "/v1/queue/"+id+"/claim", ts.admin, api.ClaimRequest{AcceptorID: "m"}, nil)
}
