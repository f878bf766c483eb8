package server

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/remote"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
	"github.com/outpost-sh/outpost/internal/tlsconfig/tlstest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// Tests of several replicas on one PostgreSQL database: the owner of a
// running session, forwarding and the hand-over.

// replicaServer is one replica of a test's set: a testServer that the test
// may stop gracefully (stop) before its cleanup.
type replicaServer struct {
	*testServer
	stop func()
}

// startReplicaSetC starts n servers on database db, sharing one secret key,
// with replica ids r0, r1, …; every one uses the first one's admin token.
// configure, when given, changes the options of replica i. It returns once
// every replica is ready.
func startReplicaSetC(t *testing.T, db string, n int, opts Options, configure ...func(i int, o *Options)) []*replicaServer {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	var out []*replicaServer
	for i := range n {
		o := opts
		o.DatabaseURL, o.SecretKey, o.ReplicaID = db, key, fmt.Sprintf("r%d", i)
		o.DataDir = t.TempDir()
		o.Listen = "127.0.0.1:0"
		o.Stdout = io.Discard
		if o.Logger == nil {
			o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		}
		for _, c := range configure {
			c(i, &o)
		}
		ctx, cancel := context.WithCancel(context.Background())
		srv, err := New(ctx, o)
		if err != nil {
			t.Fatalf("new replica %d: %v", i, err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx) }()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("serve replica %s: %v", o.ReplicaID, err)
				}
			})
		}
		t.Cleanup(stop)
		ts := &testServer{t: t, srv: srv, url: srv.URL(), admin: srv.AdminToken()}
		if i > 0 {
			ts.admin = out[0].admin
		}
		out = append(out, &replicaServer{testServer: ts, stop: stop})
		waitfor.True(t, "replica ready", srv.ready.Load)
	}
	return out
}

// answeringRemote is a fake remote that answers every call it gets (when
// answer is set) and records what it saw.
type answeringRemote struct {
	r      *fakeRemote
	calls  chan api.Frame // every call frame
	frames chan api.Frame // every other frame
	done   chan struct{}  // closed when the connection ended
	status websocket.StatusCode
	ended  time.Time
}

// connectRemoteC dials gatewayURL for session id with the claim's connect
// token and says hello.
func connectRemoteC(t *testing.T, gatewayURL, id, token string, answer bool) *answeringRemote {
	t.Helper()
	return connectRemoteClientC(t, nil, gatewayURL, id, token, answer)
}

// connectRemoteClientC is connectRemoteC dialling with hc (nil: the
// default client).
func connectRemoteClientC(t *testing.T, hc *http.Client, gatewayURL, id, token string, answer bool) *answeringRemote {
	t.Helper()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	h.Set(api.HeaderSessionID, id)
	ws, _, err := websocket.Dial(context.Background(), gatewayURL, &websocket.DialOptions{HTTPClient: hc, HTTPHeader: h})
	if err != nil {
		t.Fatalf("dial %s: %v", gatewayURL, err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	r := &fakeRemote{t: t, ws: ws}
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	a := &answeringRemote{r: r, calls: make(chan api.Frame, 64), frames: make(chan api.Frame, 64), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for {
			_, data, err := r.ws.Read(context.Background())
			if err != nil {
				a.status, a.ended = websocket.CloseStatus(err), time.Now()
				return
			}
			var f api.Frame
			if json.Unmarshal(data, &f) != nil {
				continue
			}
			if f.Type != api.FrameCall {
				a.frames <- f
				continue
			}
			a.calls <- f
			if answer {
				b, _ := json.Marshal(api.Frame{V: int(api.CurrentProtocolVersion), Type: api.FrameResult, Seq: f.Seq, OK: true,
					Value: json.RawMessage(fmt.Sprintf(`{"answer":%d}`, f.Seq))})
				_ = r.ws.Write(context.Background(), websocket.MessageText, b)
			}
		}
	}()
	return a
}

// next returns the next frame of ch, failing after 10 s.
func nextFrame(t *testing.T, ch <-chan api.Frame, what string) api.Frame {
	t.Helper()
	select {
	case f := <-ch:
		return f
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
		return api.Frame{}
	}
}

// waitFrame skips frames of ch until one of type typ.
func waitFrame(t *testing.T, ch <-chan api.Frame, typ string) api.Frame {
	t.Helper()
	for {
		if f := nextFrame(t, ch, typ+" frame"); f.Type == typ {
			return f
		}
	}
}

// ownerOf reads the session's owner from the store of ts.
func ownerOf(t *testing.T, ts *testServer, id string) string {
	t.Helper()
	e, err := ts.srv.store.GetQueueEntry(t.Context(), id)
	if err != nil {
		t.Fatalf("get queue entry %s: %v", id, err)
	}
	return e.Owner
}

// externalSessionC creates an external session on outpost o through ts,
// claims it and returns it with its connect token.
func externalSessionC(t *testing.T, ts *testServer, o string) (string, string) {
	t.Helper()
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"`+o+`","agent":{"kind":"external"}}`, &s)
	id := s.Metadata.SessionID
	return id, ts.claimFor(id, "m-"+id).Status.ConnectToken
}

// toolCallC posts a list_dir call of the session to ts, again while it is
// answered 503: the session's runner starts just after its remote's
// welcome, and a call refused for that ran nowhere.
func toolCallC(t *testing.T, ts *testServer, id string) api.ToolResult {
	t.Helper()
	var res api.ToolResult
	waitfor.True(t, "a tool call of "+id+" through "+ts.srv.opts.ReplicaID, func() bool {
		code := ts.do("POST", "/v1/sessions/"+id+"/tools/list_dir", ts.admin, map[string]any{}, &res)
		if code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Fatalf("tool call: %d", code)
		}
		return code == http.StatusOK
	})
	return res
}

// waitRunning waits for the session to be running.
func waitRunning(t *testing.T, ts *testServer, id string) {
	t.Helper()
	waitfor.True(t, "session "+id+" running", func() bool {
		var s api.Session
		return ts.do("GET", "/v1/sessions/"+id, ts.admin, nil, &s) == 200 && s.Status.Status == api.StatusRunning
	})
}

// TestReplicas runs the replica scenarios on one PostgreSQL server, each on
// its own database.
func TestReplicas(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{})
	t.Run("ForwardToOwner", func(t *testing.T) { t.Parallel(); testForwardToOwner(t, pg.Database(t)) })
	t.Run("ForgedForwardGainsNothing", func(t *testing.T) { t.Parallel(); testForgedForward(t, pg.Database(t)) })
	t.Run("RemoteMovesTheLoop", func(t *testing.T) { t.Parallel(); testRemoteMoves(t, pg.Database(t)) })
	t.Run("GracefulStopHandsOver", func(t *testing.T) { t.Parallel(); testGracefulHandOver(t, pg.Database(t)) })
	t.Run("RealRemoteThroughBalancer", func(t *testing.T) { t.Parallel(); testRealRemoteHandOver(t, pg.Database(t)) })
	t.Run("KilledReplica", func(t *testing.T) { t.Parallel(); testKilledReplica(t, pg.Database(t)) })
	t.Run("Heartbeats", func(t *testing.T) { t.Parallel(); testHeartbeats(t, pg.Database(t)) })
	t.Run("HandOverMany", func(t *testing.T) { t.Parallel(); testHandOverMany(t, pg.Database(t)) })
	t.Run("ForwardOverTLS", func(t *testing.T) { t.Parallel(); testForwardOverTLS(t, pg.Database(t)) })
	t.Run("SuspendThroughOther", func(t *testing.T) { t.Parallel(); testSuspendThroughOther(t, pg.Database(t)) })
	t.Run("LiveDesktopThroughOther", func(t *testing.T) { t.Parallel(); testLiveDesktopThroughOther(t, pg.Database(t)) })
}

// testForwardToOwner: an external tool call, an MCP call and a terminate
// sent to the replica that does not hold the remote are served by the one
// that does; the remote hears the end.
func testForwardToOwner(t *testing.T, db string) {
	rs := startReplicaSetC(t, db, 2, Options{})
	a, b := rs[0], rs[1]
	a.outpost("fw")
	id, token := externalSessionC(t, a.testServer, "fw")
	rem := connectRemoteC(t, a.srv.gatewayURL, id, token, true)
	waitFrame(t, rem.frames, api.FrameWelcome)
	waitRunning(t, b.testServer, id)
	if got := ownerOf(t, b.testServer, id); got != "r0" {
		t.Fatalf("owner %q, want r0", got)
	}

	// A tool call through b runs on the remote connected to a.
	res := toolCallC(t, b.testServer, id)
	if !res.OK || !strings.Contains(string(res.Value), `"answer":1`) {
		t.Fatalf("tool call through the other replica: %+v", res)
	}
	if call := nextFrame(t, rem.calls, "call 1"); call.Seq != 1 || call.Tool != api.ToolListDir {
		t.Fatalf("remote got %+v", call)
	}

	// An MCP call through b, likewise.
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_dir","arguments":{}}}`
	req, _ := http.NewRequest("POST", b.url+"/v1/sessions/"+id+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+b.admin)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `answer\":2`) || strings.Contains(string(raw), `"isError":true`) {
		t.Fatalf("MCP call through the other replica: %d %s", resp.StatusCode, raw)
	}
	if call := nextFrame(t, rem.calls, "call 2"); call.Seq != 2 {
		t.Fatalf("remote got %+v", call)
	}
	if n := counterValue(b.srv.metrics.forwarded); n < 2 {
		t.Errorf("b forwarded %v requests, want at least 2", n)
	}

	// Terminate through b: the remote, on a, hears the end.
	var s api.Session
	b.mustDo(200, "POST", "/v1/sessions/"+id+"/terminate", b.admin, nil, &s)
	if s.Status.Status != api.StatusExit {
		t.Fatalf("terminated session %+v", s.Status)
	}
	waitFrame(t, rem.frames, api.FrameEnd)
}

// testForwardOverTLS: replicas serving TLS with one certificate forward to
// each other at their own addresses (https://<ip>:<port>), trusting the
// peer that presents that certificate.
func testForwardOverTLS(t *testing.T, db string) {
	ca := tlstest.NewCA(t, "outpost test CA")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca.Issue(t).Write(t, certFile, keyFile)
	rs := startReplicaSetC(t, db, 2, Options{TLSCertFile: certFile, TLSKeyFile: keyFile}, func(_ int, o *Options) {
		o.PublicURL = "https://outpost.example.test" // not the replicas' own addresses
	})
	tr, err := tlsconfig.Transport(ca.WriteCA(t, dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: tr}
	a, b := rs[0], rs[1]
	for _, r := range rs {
		r.client = hc
		r.url = r.srv.opts.ReplicaURL
		if !strings.HasPrefix(r.url, "https://127.0.0.1:") {
			t.Fatalf("replica URL %q with TLS", r.url)
		}
	}
	a.outpost("tls")
	id, token := externalSessionC(t, a.testServer, "tls")
	rem := connectRemoteClientC(t, hc, "wss://"+strings.TrimPrefix(a.url, "https://")+api.GatewayPath, id, token, true)
	waitFrame(t, rem.frames, api.FrameWelcome)
	waitRunning(t, b.testServer, id)
	res := toolCallC(t, b.testServer, id)
	if !res.OK || !strings.Contains(string(res.Value), `"answer":1`) || counterValue(b.srv.metrics.forwarded) < 1 {
		t.Fatalf("tool call forwarded over TLS: %+v (forwarded %v)", res, counterValue(b.srv.metrics.forwarded))
	}
}

// testForgedForward: a request that says it was forwarded is served where
// it arrives — still authenticated, and without the owner's connection.
func testForgedForward(t *testing.T, db string) {
	rs := startReplicaSetC(t, db, 2, Options{})
	a, b := rs[0], rs[1]
	a.outpost("forge")
	id, token := externalSessionC(t, a.testServer, "forge")
	rem := connectRemoteC(t, a.srv.gatewayURL, id, token, true)
	waitFrame(t, rem.frames, api.FrameWelcome)
	waitRunning(t, b.testServer, id)

	send := func(token string) int {
		req, _ := http.NewRequest("POST", b.url+"/v1/sessions/"+id+"/tools/list_dir", strings.NewReader(`{}`))
		req.Header.Set(HeaderForwardedBy, "r0")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := send(""); code != http.StatusUnauthorized {
		t.Errorf("forged forward without a token: %d, want 401", code)
	}
	reader := b.token([]string{api.ScopeSessionsRead}, "")
	if code := send(reader); code != http.StatusForbidden {
		t.Errorf("forged forward with a read-only token: %d, want 403", code)
	}
	// Served on b, which holds no connection: as one server without one.
	if code := send(b.admin); code != http.StatusServiceUnavailable {
		t.Errorf("forged forward with a good token: %d, want 503 (served where it arrived)", code)
	}
	select {
	case f := <-rem.calls:
		t.Errorf("a forged forward reached the remote: %+v", f)
	default:
	}

	// The drop endpoint takes only requests signed with the shared key.
	drop := func(auth string) int {
		req, _ := http.NewRequest("POST", a.url+dropPath(id), nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	now := time.Now().Unix()
	otherKey := replicaAuthKey(make([]byte, 32))
	for name, auth := range map[string]string{
		"none":        "",
		"admin token": "Bearer " + a.admin,
		"wrong key":   fmt.Sprintf("%s r1 %d %s", replicaAuthScheme, now, replicaMAC(otherKey, "POST", dropPath(id), "r1", now)),
		"stale":       fmt.Sprintf("%s r1 %d %s", replicaAuthScheme, now-300, replicaMAC(a.srv.replicaKey, "POST", dropPath(id), "r1", now-300)),
		"other path":  fmt.Sprintf("%s r1 %d %s", replicaAuthScheme, now, replicaMAC(a.srv.replicaKey, "POST", dropPath("other"), "r1", now)),
	} {
		if code := drop(auth); code != http.StatusUnauthorized {
			t.Errorf("drop signed %s: %d, want 401", name, code)
		}
	}
	// Signed rightly, a drop of a session the store says a owns is refused.
	good := fmt.Sprintf("%s r1 %d %s", replicaAuthScheme, now, replicaMAC(a.srv.replicaKey, "POST", dropPath(id), "r1", now))
	if code := drop(good); code != http.StatusConflict {
		t.Errorf("drop of a session owned here: %d, want 409", code)
	}
	if a.srv.hub.Get(id) == nil {
		t.Fatal("a refused drop closed the connection")
	}
}

// testRemoteMoves: a remote that reconnects through the other replica
// moves the agent loop there. The old replica drops its connection and
// runner at once, any write its runner tries is refused, and every call
// gets exactly one result.
func testRemoteMoves(t *testing.T, db string) {
	rs := startReplicaSetC(t, db, 2, Options{})
	a, b := rs[0], rs[1]
	a.outpost("mv")
	var s api.Session
	a.mustDo(201, "POST", "/v1/sessions", a.admin, `{"outpost":"mv","agent":{"kind":"script","steps":[
		{"tool":"list_dir"},{"tool":"list_dir"},{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	token := a.claimFor(id, "m1").Status.ConnectToken

	// Call 1 reaches the remote on a, which does not answer it.
	r1 := connectRemoteC(t, a.srv.gatewayURL, id, token, false)
	if c := nextFrame(t, r1.calls, "call 1 on a"); c.Seq != 1 {
		t.Fatalf("first call %+v", c)
	}
	// The remote comes back through b (its link to a died unseen).
	r2 := connectRemoteC(t, b.srv.gatewayURL, id, token, true)
	select {
	case <-r1.done:
	case <-time.After(5 * time.Second):
		t.Fatal("a kept the remote's old connection after it connected through b")
	}
	if r1.status != websocket.StatusPolicyViolation {
		t.Errorf("a closed the old connection with %v", r1.status)
	}
	if ownerOf(t, a.testServer, id) != "r1" {
		t.Fatalf("owner %q after the move, want r1", ownerOf(t, a.testServer, id))
	}
	if a.srv.hub.Get(id) != nil {
		t.Error("a still holds a connection of the session")
	}
	// b's loop resends call 1 and goes on; each call reaches the remote once.
	for want := int64(1); want <= 3; want++ {
		if c := nextFrame(t, r2.calls, fmt.Sprintf("call %d on b", want)); c.Seq != want {
			t.Fatalf("call on b %+v, want seq %d", c, want)
		}
	}
	waitFrame(t, r2.frames, api.FrameEnd)
	// Whatever a's loop would still write is refused.
	err := a.srv.loopStore().AppendEvents(t.Context(), id, []api.Event{{Type: api.EventMessage, Text: "stale"}})
	if _, ok := errors.AsType[errNotOwner](err); !ok {
		t.Fatalf("a stale loop's write: %v, want errNotOwner", err)
	}
	_, err = a.srv.loopStore().UpdateSession(t.Context(), id, func(store.Session, store.QueueEntry) (store.Mutation, error) {
		t.Error("fn of a refused write ran")
		return store.Mutation{}, nil
	})
	if _, ok := errors.AsType[errNotOwner](err); !ok {
		t.Fatalf("a stale loop's update: %v, want errNotOwner", err)
	}
	var sess api.Session
	b.mustDo(200, "GET", "/v1/sessions/"+id, b.admin, nil, &sess)
	if sess.Status.Status != api.StatusExit {
		t.Fatalf("session %+v", sess.Status)
	}
	checkOneResultEach(t, a.testServer, id, 3)
}

// checkOneResultEach checks the transcript has exactly one call and one
// result of each seq from 1 to n.
func checkOneResultEach(t *testing.T, ts *testServer, id string, n int64) {
	t.Helper()
	evs := sessionEvents(t, ts, id)
	calls, results := map[int64]int{}, map[int64]int{}
	for _, ev := range evs {
		switch ev.Type {
		case api.EventCall:
			calls[ev.CallSeq]++
		case api.EventResult:
			results[ev.CallSeq]++
		}
	}
	for seq := int64(1); seq <= n; seq++ {
		if calls[seq] != 1 || results[seq] != 1 {
			t.Errorf("call %d: %d call events and %d results, want one each", seq, calls[seq], results[seq])
		}
	}
	if len(calls) != int(n) || len(results) != int(n) {
		t.Errorf("calls %v, results %v, want seqs 1 to %d", calls, results, n)
	}
}

// testGracefulHandOver: a replica that stops gracefully closes its remotes
// with "reconnect now", clears its sessions' owner and deletes its row; the
// remote reconnecting to the other replica goes on at once.
func testGracefulHandOver(t *testing.T, db string) {
	rs := startReplicaSetC(t, db, 2, Options{ReconnectGrace: 30 * time.Second})
	a, b := rs[0], rs[1]
	a.outpost("ho")
	var s api.Session
	a.mustDo(201, "POST", "/v1/sessions", a.admin, `{"outpost":"ho","agent":{"kind":"script","steps":[{"tool":"list_dir"},{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	token := a.claimFor(id, "m1").Status.ConnectToken
	r1 := connectRemoteC(t, a.srv.gatewayURL, id, token, false)
	nextFrame(t, r1.calls, "call 1 on a")

	start := time.Now()
	go a.stop()
	select {
	case <-r1.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stopping replica did not close the remote's connection")
	}
	closed := r1.ended.Sub(start)
	if r1.status != websocket.StatusCode(api.CloseReconnectNow) {
		t.Fatalf("closed with %v, want %d (reconnect now)", r1.status, api.CloseReconnectNow)
	}
	r2 := connectRemoteC(t, b.srv.gatewayURL, id, token, true)
	if c := nextFrame(t, r2.calls, "call 1 on b"); c.Seq != 1 {
		t.Fatalf("first call on b %+v", c)
	}
	moved := time.Since(start)
	t.Logf("graceful stop: remote closed after %s, call resent by the other replica after %s", closed.Round(time.Millisecond), moved.Round(time.Millisecond))
	if c := nextFrame(t, r2.calls, "call 2 on b"); c.Seq != 2 {
		t.Fatalf("second call on b %+v", c)
	}
	waitFrame(t, r2.frames, api.FrameEnd)
	checkOneResultEach(t, b.testServer, id, 2)
	a.stop()
	replicas, err := b.srv.store.ListReplicas(t.Context(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range replicas {
		if r.ID == "r0" {
			t.Errorf("the stopped replica's row is still there: %+v", r)
		}
	}
}

// testHandOverMany: a replica holding many sessions hands every one over
// when it stops; each remote, reconnecting at once to the other replica,
// gets its pending call again there.
func testHandOverMany(t *testing.T, db string) {
	const n = 25
	rs := startReplicaSetC(t, db, 2, Options{ReconnectGrace: 30 * time.Second})
	a, b := rs[0], rs[1]
	a.outpost("many")
	type live struct {
		id, token string
		r         *answeringRemote
	}
	var ls []live
	for range n {
		var s api.Session
		a.mustDo(201, "POST", "/v1/sessions", a.admin, `{"outpost":"many","agent":{"kind":"script","steps":[{"tool":"list_dir"}]}}`, &s)
		id := s.Metadata.SessionID
		token := a.claimFor(id, "m-"+id).Status.ConnectToken
		r := connectRemoteC(t, a.srv.gatewayURL, id, token, false)
		nextFrame(t, r.calls, "call 1 on a")
		ls = append(ls, live{id, token, r})
	}
	start := time.Now()
	go a.stop()
	var wg sync.WaitGroup
	moved := make(chan time.Duration, n)
	for _, l := range ls {
		wg.Go(func() {
			<-l.r.done
			if l.r.status != websocket.StatusCode(api.CloseReconnectNow) {
				t.Errorf("session %s closed with %v", l.id, l.r.status)
			}
			r2 := connectRemoteC(t, b.srv.gatewayURL, l.id, l.token, true)
			select {
			case c := <-r2.calls:
				if c.Seq != 1 {
					t.Errorf("session %s: call %d on b, want 1", l.id, c.Seq)
				}
				moved <- time.Since(start)
			case <-time.After(10 * time.Second):
				t.Errorf("session %s: no call on b", l.id)
			}
		})
	}
	wg.Wait()
	close(moved)
	var last time.Duration
	for d := range moved {
		last = max(last, d)
	}
	t.Logf("graceful stop with %d sessions: the last one's call was resent by the other replica after %s", n, last.Round(time.Millisecond))
}

// testKilledReplica: a replica cut off without a hand-over (its listener
// and remote connections cut, its loop still running, its row still live):
// the other replica serves what the dead owner cannot, and the session
// goes on there once its remote reconnects; the cut-off loop writes
// nothing.
func testKilledReplica(t *testing.T, db string) {
	// Everything reaches a through a proxy the test cuts: its remote, and
	// the other replica (a's replica URL is the proxy's).
	px := startCutProxyC(t)
	rs := startReplicaSetC(t, db, 2, Options{}, func(i int, o *Options) {
		if i == 0 {
			o.ReplicaURL = "http://" + px.addr
		}
	})
	a, b := rs[0], rs[1]
	px.setBackend(strings.TrimPrefix(a.url, "http://"))
	a.outpost("kill")
	id, token := externalSessionC(t, a.testServer, "kill")
	r1 := connectRemoteC(t, "ws://"+px.addr+api.GatewayPath, id, token, true)
	waitFrame(t, r1.frames, api.FrameWelcome)
	waitRunning(t, b.testServer, id)

	// Cut a off: nothing answers at its address, its remote's link is gone.
	px.cut()
	<-r1.done
	// b still takes a for live: the forward fails before the body is sent
	// and b answers as a server without the remote does.
	if code := b.do("POST", "/v1/sessions/"+id+"/tools/list_dir", b.admin, map[string]any{}, nil); code != http.StatusServiceUnavailable {
		t.Fatalf("tool call while the owner is unreachable: %d, want 503", code)
	}
	r2 := connectRemoteC(t, b.srv.gatewayURL, id, token, true)
	waitFrame(t, r2.frames, api.FrameWelcome)
	waitfor.True(t, "b to own the session", func() bool { return ownerOf(t, b.testServer, id) == "r1" })
	res := toolCallC(t, b.testServer, id)
	if !res.OK {
		t.Fatalf("tool call after the move: %+v", res)
	}
	err := a.srv.loopStore().AppendEvents(t.Context(), id, []api.Event{{Type: api.EventMessage, Text: "from the dead"}})
	if _, ok := errors.AsType[errNotOwner](err); !ok {
		t.Fatalf("the cut-off replica's loop write: %v, want errNotOwner", err)
	}
	b.mustDo(200, "POST", "/v1/sessions/"+id+"/terminate", b.admin, nil, nil)
	waitFrame(t, r2.frames, api.FrameEnd)
	checkOneResultEach(t, b.testServer, id, 1)
}

// cutProxyC forwards TCP connections to a backend until cut, which closes
// its listener and every connection through it: a replica's host gone.
type cutProxyC struct {
	addr string
	ln   net.Listener
	wg   sync.WaitGroup

	mu      sync.Mutex // guards the following
	backend string
	conns   []net.Conn
}

func startCutProxyC(t *testing.T) *cutProxyC {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxyC{addr: ln.Addr().String(), ln: ln}
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			backend := p.backend
			p.mu.Unlock()
			up, err := net.Dial("tcp", backend)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(up, c); up.Close() })
			p.wg.Go(func() { _, _ = io.Copy(c, up); c.Close() })
		}
	})
	return p
}

func (p *cutProxyC) setBackend(addr string) {
	p.mu.Lock()
	p.backend = addr
	p.mu.Unlock()
}

func (p *cutProxyC) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// testSuspendThroughOther: a suspend sent to the replica without the
// remote is run by the one with it, and the remote's snapshot upload,
// arriving at the other replica too, reaches the suspend waiting for it.
func testSuspendThroughOther(t *testing.T, db string) {
	rs := startReplicaSetC(t, db, 2, Options{})
	a, b := rs[0], rs[1]
	a.outpost("sus")
	var s api.Session
	a.mustDo(201, "POST", "/v1/sessions", a.admin, `{"outpost":"sus","agent":{"kind":"script","steps":[{"tool":"list_dir"},{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	claim := a.claimFor(id, "m1")
	r, _ := dialGateway(t, a.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r.expect(api.FrameWelcome)
	r.expect(api.FrameCall)
	done := b.suspendAsync(id)
	waitfor.True(t, "the suspend to pause the calls on a", func() bool { return a.paused(id) })
	r.send(api.Frame{Type: api.FrameResult, Seq: 1, OK: true, Value: json.RawMessage(`{}`)})
	r.untilSuspend()
	archive := []byte(strings.Repeat("workspace ", 1000))
	if code, raw := b.snapshotRequest("PUT", id, "opc_wrong", archive); code != http.StatusUnauthorized {
		t.Fatalf("PUT through b with a wrong token: %d %s", code, raw)
	}
	if code, raw := b.snapshotRequest("PUT", id, claim.Status.ConnectToken, archive); code != http.StatusCreated {
		t.Fatalf("PUT snapshot through b: %d %s", code, raw)
	}
	r.send(api.Frame{Type: api.FrameSuspended, Snapshot: &api.SnapshotInfo{Size: int64(len(archive)), SHA256: sha(archive)}})
	if code := <-done; code != http.StatusOK {
		t.Fatalf("suspend through b: %d", code)
	}
	var sess api.Session
	b.mustDo(200, "GET", "/v1/sessions/"+id, b.admin, nil, &sess)
	if sess.Status.Status != api.StatusSuspended {
		t.Fatalf("session %+v, want suspended", sess.Status)
	}
}

// testHeartbeats: every replica has a live row with its URL; the cache of
// each knows the others.
func testHeartbeats(t *testing.T, db string) {
	rs := startReplicaSetC(t, db, 3, Options{})
	for _, r := range rs {
		if !r.srv.shared {
			t.Fatal("a PostgreSQL server does not take its store for shared")
		}
	}
	got, err := rs[0].srv.store.ListReplicas(t.Context(), time.Now().Add(-replicaLiveFor))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("live replicas %+v, want 3", got)
	}
	for i, r := range got {
		if r.ID != fmt.Sprintf("r%d", i) || r.URL != rs[i].srv.opts.ReplicaURL || !strings.HasPrefix(r.URL, "http://127.0.0.1:") {
			t.Errorf("replica row %+v, want r%d at %s", r, i, rs[i].srv.opts.ReplicaURL)
		}
	}
	if u := rs[2].srv.replicaURL(t.Context(), "r0"); u != rs[0].srv.opts.ReplicaURL {
		t.Errorf("r2 knows r0 at %q, want %q", u, rs[0].srv.opts.ReplicaURL)
	}
}

// replicaLabel matches the replica label of a sample, with its comma.
var replicaLabel = regexp.MustCompile(`\{replica="[^"]*"\}|,replica="[^"]*"|replica="[^"]*",`)

// withoutReplicaLabel removes the replica label from a /metrics text, for
// the tests that look for samples by their other labels.
func withoutReplicaLabel(text string) string { return replicaLabel.ReplaceAllString(text, "") }

// counterValue reads a counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// testRealRemoteHandOver: a real remote behind a round-robin balancer in
// front of two replicas runs a multi-step script; the replica it is
// connected to stops gracefully mid-way. The remote reconnects at once,
// the balancer sends it to the other replica, and the session ends with
// every step run exactly once.
func testRealRemoteHandOver(t *testing.T, db string) {
	rs := startReplicaSetC(t, db, 2, Options{ReconnectGrace: 30 * time.Second})
	a, b := rs[0], rs[1]
	lb := startBalancerC(t, strings.TrimPrefix(a.url, "http://"), strings.TrimPrefix(b.url, "http://"))
	a.outpost("real")
	marker := filepath.Join(t.TempDir(), "markers")
	var steps []string
	for i := 1; i <= 5; i++ {
		steps = append(steps, fmt.Sprintf(`{"tool":"exec","args":{"command":"echo %d >> %s; sleep 0.2"}}`, i, marker))
	}
	var s api.Session
	a.mustDo(201, "POST", "/v1/sessions", a.admin, `{"outpost":"real","agent":{"kind":"script","steps":[`+strings.Join(steps, ",")+`]}}`, &s)
	id := s.Metadata.SessionID
	claim := a.claimFor(id, "m1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- remote.Serve(ctx, remote.Options{
			GatewayURL:   "ws://" + lb + api.GatewayPath,
			ConnectToken: claim.Status.ConnectToken,
			SessionID:    id,
			StateDir:     t.TempDir(),
			WorkDir:      t.TempDir(),
			Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
			Capabilities: &api.Capabilities{OS: "test", Tools: api.ToolNames()},
		})
	}()
	waitfor.True(t, "the first result on a", func() bool {
		if ownerOf(t, b.testServer, id) != "r0" {
			return false
		}
		for _, ev := range sessionEvents(t, b.testServer, id) {
			if ev.Type == api.EventResult {
				return true
			}
		}
		return false
	})
	start := time.Now()
	go a.stop()
	deadline := time.Now().Add(10 * time.Second)
	for ownerOf(t, b.testServer, id) != "r1" {
		if time.Now().After(deadline) {
			t.Fatalf("the session did not move to b:\n%s", logs.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	moved := time.Since(start)
	t.Logf("graceful stop: the real remote was on the other replica after %s", moved.Round(time.Millisecond))
	if moved > 2*time.Second {
		t.Errorf("the hand-over took %s; it should not wait for a backoff or a lapse", moved)
	}
	if end := waitEnded(t, b.testServer, id); end.Status.Status != api.StatusExit {
		t.Fatalf("session ended %+v", end.Status)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("remote: %v\n%s", err, logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the remote did not exit after the session ended")
	}
	raw, err := os.ReadFile(marker)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(raw); got != "1\n2\n3\n4\n5\n" {
		t.Errorf("markers %q, want each step once, in order", got)
	}
	checkOneResultEach(t, b.testServer, id, 5)
	if !strings.Contains(logs.String(), "reconnecting now") {
		t.Errorf("the remote did not take the close as reconnect-now:\n%s", logs.String())
	}
}

// startBalancerC is a round-robin TCP load balancer over backends, per
// connection, skipping a backend that refuses: what sits in front of
// replicas. It returns its address.
func startBalancerC(t *testing.T, backends ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	var mu sync.Mutex
	next := 0
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				var up net.Conn
				mu.Lock()
				first := next
				next++
				mu.Unlock()
				for i := range backends {
					if up, err = net.Dial("tcp", backends[(first+i)%len(backends)]); err == nil {
						break
					}
				}
				if up == nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done
				c.Close()
				up.Close()
				<-done
			})
		}
	})
	return ln.Addr().String()
}

// TestReplicaReadyz: /readyz is 503 before the server serves, 200 once it
// does, 503 while its PostgreSQL database does not answer and 200 again
// when it is back.
func TestReplicaReadyz(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := New(ctx, Options{DatabaseURL: pg.Database(t), DataDir: t.TempDir(), Listen: "127.0.0.1:0", Stdout: io.Discard,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	srv.http.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("readyz before serving: %d, want 503", rec.Code)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	ready := func() int {
		resp, err := http.Get(srv.URL() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitfor.True(t, "ready", func() bool { return ready() == http.StatusOK })
	if err := pg.Crash(); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, "not ready while the database is down", func() bool { return ready() == http.StatusServiceUnavailable })
	if err := pg.Restart(); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, "ready again", func() bool { return ready() == http.StatusOK })
}

// TestReplicaOneServerUnchanged: with the embedded SQLite database nothing
// of the replicas runs — no heartbeat, no fence on the loop's store, no
// owner lookup — and every metric carries the replica label.
func TestReplicaOneServerUnchanged(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{ReplicaID: "solo-1"})
	if ts.srv.shared {
		t.Fatal("a SQLite server takes its store for shared")
	}
	if _, ok := ts.srv.loopStore().(ownedStore); ok {
		t.Error("a SQLite server fences its loop's store")
	}
	req := httptest.NewRequest("POST", "/v1/sessions/x/tools/exec", nil)
	if u := ts.srv.forwardTarget(t.Context(), req, "x"); u != nil {
		t.Errorf("a SQLite server forwards to %s", u)
	}
	if rs, err := ts.srv.store.ListReplicas(t.Context(), time.Time{}); err != nil || len(rs) != 0 {
		t.Errorf("replica rows of a SQLite server: %+v, %v", rs, err)
	}
	resp, err := http.Get(ts.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range strings.Split(string(raw), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !strings.Contains(line, `replica="solo-1"`) {
			t.Errorf("metric without the replica label: %s", line)
		}
	}
}

// TestReplicaEndServedElsewhereReachesRemote: a terminate served by a
// replica that does not hold the remote (the owner did not answer the
// forward, so it is served where it arrived) still ends the session on its
// remote, connected to the other replica.
func TestReplicaEndServedElsewhereReachesRemote(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{})
	rs := startReplicaSetC(t, pg.Database(t), 2, Options{}, func(i int, o *Options) {
		if i == 0 {
			o.ReplicaURL = "http://127.0.0.1:1" // nothing answers there
		}
	})
	a, b := rs[0], rs[1]
	a.outpost("endel")
	id, token := externalSessionC(t, a.testServer, "endel")
	rem := connectRemoteC(t, a.srv.gatewayURL, id, token, true)
	waitFrame(t, rem.frames, api.FrameWelcome)
	waitRunning(t, b.testServer, id)
	var s api.Session
	b.mustDo(200, "POST", "/v1/sessions/"+id+"/terminate", b.admin, nil, &s)
	if s.Status.Status != api.StatusExit {
		t.Fatalf("terminated session %+v", s.Status)
	}
	waitFrame(t, rem.frames, api.FrameEnd)
}

// TestReplicaSecondInstanceRefusedAcrossReplicas: a second remote process
// (another instance) under the claim a first one serves through replica a
// is refused when it connects through replica b, as it is by one server —
// not taken as the session's remote moving.
func TestReplicaSecondInstanceRefusedAcrossReplicas(t *testing.T) {
	t.Skip("known bug (r16rev review): otherLiveInstance looks only at this replica's hub, so the second instance is welcomed and the first one dropped")
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{})
	rs := startReplicaSetC(t, pg.Database(t), 2, Options{})
	a, b := rs[0], rs[1]
	a.outpost("twice2")
	id, token := externalSessionC(t, a.testServer, "twice2")
	hello := func(gw, instance string) *reader {
		r, code := dialGateway(t, gw, id, token)
		if code != 101 {
			t.Fatalf("dial: %d", code)
		}
		r.send(api.Frame{Type: api.FrameHello, SessionID: id, Instance: instance})
		rd := r.readInBackground()
		t.Cleanup(rd.stop)
		return rd
	}
	next := func(rd *reader) api.Frame {
		select {
		case f, ok := <-rd.frames:
			if !ok {
				return api.Frame{Type: "closed"}
			}
			return f
		case <-time.After(10 * time.Second):
			t.Fatal("no frame")
		}
		return api.Frame{}
	}
	first := hello(a.srv.gatewayURL, "aaaa")
	if f := next(first); f.Type != api.FrameWelcome {
		t.Fatalf("first remote got %s, want welcome", f.Type)
	}
	second := hello(b.srv.gatewayURL, "bbbb")
	if f := next(second); f.Type != api.FrameError {
		t.Errorf("second instance through the other replica got %s %q, want an error", f.Type, f.Reason)
	}
	if got := ownerOf(t, a.testServer, id); got != "r0" {
		t.Errorf("owner after the second instance: %q, want r0 (the first instance's replica)", got)
	}
}

// TestReplicaIDChecked: a replica id other replicas could not name (a
// space breaks the signed drop header) stops the start with a clear error.
func TestReplicaIDChecked(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"a b", "-lead", "tab\tid", strings.Repeat("x", 201)} {
		_, err := New(t.Context(), Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ReplicaID: id, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil || !strings.Contains(err.Error(), "replica id") {
			t.Errorf("replica id %q: %v, want a replica id error", id, err)
		}
	}
	for _, id := range []string{"outpost-0", "box.example.com-1a2b", "r1"} {
		if err := checkReplicaID(id); err != nil {
			t.Errorf("replica id %q refused: %v", id, err)
		}
	}
}
