package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
)

// streamEnds reads resp's body in the background and reports on the
// returned channel when it ends.
func streamEnds(resp *http.Response) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		done <- err
	}()
	return done
}

func openTokenFollow(t *testing.T, ts *testServer, id, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", ts.url+"/v1/sessions/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("follow: %d", resp.StatusCode)
	}
	return resp
}

// TestRevokedTokenEndsItsStreams: a transcript follow opened with a token
// ends soon after the token is revoked or expires, and the streams of other
// tokens go on. (TestRevokedTokenEndsQueueWatch covers a queue watch.)
func TestRevokedTokenEndsItsStreams(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{TokenRecheckInterval: 50 * time.Millisecond, KeepaliveInterval: time.Hour})
	ts.outpost("rv")
	id := ts.session("rv").Metadata.SessionID

	reader := ts.token([]string{api.ScopeSessionsRead}, "")
	other := ts.token([]string{api.ScopeSessionsRead}, "")
	follow := streamEnds(openTokenFollow(t, ts, id, reader))
	untouched := streamEnds(openTokenFollow(t, ts, id, other))

	// Still valid: the streams stay open across several checks.
	select {
	case err := <-follow:
		t.Fatalf("the follow ended while its token was valid: %v", err)
	case <-time.After(300 * time.Millisecond):
	}

	ts.mustDo(204, "DELETE", "/v1/tokens/"+ts.tokenIDOf(reader), ts.admin, nil, nil)
	select {
	case <-follow:
	case <-time.After(5 * time.Second):
		t.Error("the follow of a revoked token still streams 5 s later")
	}
	select {
	case err := <-untouched:
		t.Errorf("another token's follow ended: %v", err)
	default:
	}

	// A token that expires ends its stream at its expiry, not a recheck
	// later: the interval here is long, the expiry one second away.
	ts2 := startServer(t, Options{TokenRecheckInterval: time.Hour, KeepaliveInterval: time.Hour})
	ts2.outpost("rv")
	id2 := ts2.session("rv").Metadata.SessionID
	var tok api.CreateTokenResponse
	ts2.mustDo(201, "POST", "/v1/tokens", ts2.admin, api.CreateTokenRequest{Name: "brief", Scopes: []string{api.ScopeSessionsRead}, ExpiresInS: 1}, &tok)
	start := time.Now()
	select {
	case <-streamEnds(openTokenFollow(t, ts2, id2, tok.Secret)):
		if d := time.Since(start); d < 500*time.Millisecond {
			t.Errorf("the follow ended after %v, before its token expired", d)
		}
	case <-time.After(5 * time.Second):
		t.Error("the follow of an expired token still streams 4 s after its expiry")
	}
}

// TestRevokedTokenEndsLiveDesktop: a person watching, and in control of,
// a live desktop is disconnected when their token is revoked, with a close
// reason that says why; control goes back to the agent on the record.
func TestRevokedTokenEndsLiveDesktop(t *testing.T) {
	t.Parallel()
	needDesktop(t)
	ts := startServer(t, Options{TokenRecheckInterval: 50 * time.Millisecond})
	ts.outpost("rd")
	work := t.TempDir()
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"rd","desktop":{"width":320,"height":240},"agent":{"kind":"script","steps":[
		{"tool":"computer","args":{"action":"screenshot"}},
		{"tool":"exec","args":{"command":"while [ ! -f go ]; do sleep 0.05; done"}}]}}`, &s)
	id := s.Metadata.SessionID
	runDesktopRemote(t, ts, id, work)

	person := ts.token([]string{api.ScopeSessionsWrite}, "")
	var v *viewer
	for i := 0; ; i++ { // the remote says it can stream once connected
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		u := "ws" + strings.TrimPrefix(ts.url, "http") + strings.Replace(api.DesktopPath, "{session}", id, 1)
		ws, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + person}}})
		cancel()
		if err == nil {
			ws.CloseNow()
			v, _ = dialViewer(t, ts, id, person)
			break
		}
		if i > 100 {
			t.Fatalf("the live desktop did not open: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	v.send(api.DesktopMessage{Type: api.DesktopMsgTakeControl})
	if m := v.msg(api.DesktopMsgControl); !m.You {
		t.Fatalf("take control: %+v", m)
	}

	ts.mustDo(204, "DELETE", "/v1/tokens/"+ts.tokenIDOf(person), ts.admin, nil, nil)
	deadline := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, ok := <-v.msgs:
			open = ok
		case <-deadline:
			t.Fatal("the viewer of a revoked token is still connected 5 s later")
		}
	}
	var ce websocket.CloseError
	if err := v.closeErr; !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "revoked") {
		t.Errorf("closed with %v, want policy violation saying the token was revoked", err)
	}
	// The hand-back is on the transcript, by the revoked token's holder.
	var l api.EventList
	waitForEvents := time.Now().Add(5 * time.Second)
	for {
		ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events", ts.admin, nil, &l)
		n := 0
		for _, e := range l.Items {
			if e.Type == api.EventDesktop && e.Action == api.DesktopHandBack {
				n++
			}
		}
		if n == 1 {
			break
		}
		if time.Now().After(waitForEvents) {
			t.Fatalf("%d hand_back events after the revocation, want 1", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRevokedTokenEndsQueueWatch: a queue watch over HTTP/1.1, served on
// its hijacked connection after the handler returned, ends soon after
// its token is revoked, well before its WatchMaxDuration; another token's
// watch goes on.
func TestRevokedTokenEndsQueueWatch(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{TokenRecheckInterval: 50 * time.Millisecond, KeepaliveInterval: time.Hour, WatchMaxDuration: time.Hour})
	ts.outpost("rq")
	machine := ts.token([]string{api.ScopeMachine}, "rq")
	other := ts.token([]string{api.ScopeMachine}, "rq")
	open := func(token string) <-chan error {
		req, _ := http.NewRequest("GET", ts.url+"/v1/queue?watch=true&outpost=rq", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != 200 || resp.ProtoMajor != 1 {
			t.Fatalf("watch: %d over HTTP/%d", resp.StatusCode, resp.ProtoMajor)
		}
		return streamEnds(resp)
	}
	watch, untouched := open(machine), open(other)
	select {
	case err := <-watch:
		t.Fatalf("the watch ended while its token was valid: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	ts.mustDo(204, "DELETE", "/v1/tokens/"+ts.tokenIDOf(machine), ts.admin, nil, nil)
	select {
	case <-watch:
	case <-time.After(5 * time.Second):
		t.Error("the queue watch of a revoked token still streams 5 s later")
	}
	select {
	case err := <-untouched:
		t.Errorf("another token's watch ended: %v", err)
	default:
	}
}
