package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// requestSession creates a script session of outpost whose first step asks
// for domains and whose second lists a directory, with its own policy
// when own is set.
func requestSession(ts *testServer, token, outpost string, own *api.NetworkPolicy, domains ...string) string {
	ts.t.Helper()
	body := map[string]any{
		"outpost": outpost, "title": "asks",
		"agent": map[string]any{"kind": "script", "steps": []any{
			map[string]any{"tool": api.ToolNetworkAccessRequest, "args": api.NetworkAccessRequestArgs{Domains: domains, Reason: "The tests fetch fixtures."}},
			map[string]any{"tool": api.ToolListDir, "args": map[string]any{}},
		}},
	}
	if own != nil {
		body["network_policy"] = own
	}
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", token, body, &s)
	return s.Metadata.SessionID
}

// connect claims session id and connects a fake remote to it.
func connect(ts *testServer, id string) *fakeRemote {
	ts.t.Helper()
	claim := ts.claimFor(id, "m-"+id)
	r, _ := dialGateway(ts.t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id, Capabilities: &api.Capabilities{OS: "test", Tools: api.RemoteToolNames()}})
	r.expect(api.FrameWelcome)
	return r
}

// events reads the whole transcript of session id.
func events(ts *testServer, id string) []api.Event {
	ts.t.Helper()
	var l api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events?limit=1000", ts.admin, nil, &l)
	return l.Items
}

// requestEvents are the network_request events of session id.
func requestEvents(ts *testServer, id string) []api.NetworkRequest {
	var out []api.NetworkRequest
	for _, ev := range events(ts, id) {
		if ev.Type == api.EventNetworkRequest && ev.NetworkRequest != nil {
			out = append(out, *ev.NetworkRequest)
		}
	}
	return out
}

// waitPending waits for session id's request 1 to show as pending.
func waitPending(ts *testServer, id string) api.NetworkRequest {
	ts.t.Helper()
	var reqs []api.NetworkRequest
	waitfor.True(ts.t, "the pending network_request event", func() bool { reqs = requestEvents(ts, id); return len(reqs) > 0 })
	if len(reqs) != 1 || reqs[0].State != api.NetworkRequestPending || reqs[0].ID != "1" {
		ts.t.Fatalf("network_request events %+v, want one pending request 1", reqs)
	}
	return reqs[0]
}

// toolResult is the result of call seq of session id, read from its
// transcript.
func toolResult(ts *testServer, id string, seq int64) (api.NetworkAccessResult, bool) {
	ts.t.Helper()
	for _, ev := range events(ts, id) {
		if ev.Type == api.EventResult && ev.CallSeq == seq {
			var res api.NetworkAccessResult
			if ev.OK == nil || !*ev.OK || json.Unmarshal(ev.Value, &res) != nil {
				ts.t.Fatalf("result of call %d: %+v", seq, ev)
			}
			return res, true
		}
	}
	return api.NetworkAccessResult{}, false
}

func hasHost(p *api.NetworkPolicy, host string) bool {
	return p != nil && slices.ContainsFunc(p.Allow, func(r api.NetworkPolicyRule) bool { return r.Hostname == host && len(r.Ports) == 0 })
}

// A request waits for a person without reaching the remote; a grant for
// the session adds the domain to the session's own policy and its queue
// entry (a MODIFIED entry for the worker) and is the call's result; the
// script goes on. Answering twice, unknown requests and other outposts'
// tokens are refused.
func TestNetworkRequestGrantForSession(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	ts.outpost("elsewhere")
	writer := ts.token([]string{api.ScopeSessionsWrite}, "")
	reader := ts.token([]string{api.ScopeSessionsRead}, "")
	limited := ts.token([]string{api.ScopeSessionsWrite, api.ScopeNetworkAdmin}, "elsewhere")
	machine := ts.token([]string{api.ScopeMachine}, "")
	narrow := &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "api.example.test", Ports: []int{443}}}}
	id := requestSession(ts, writer, "net", narrow, "Files.Example.test", "files.example.test")

	r := connect(ts, id)
	req := waitPending(ts, id)
	if !slices.Equal(req.Domains, []string{"files.example.test"}) || req.Reason == "" {
		t.Fatalf("pending request %+v", req)
	}
	var l api.QueueList
	ts.mustDo(200, "GET", "/v1/queue?outpost=net", machine, nil, &l)
	lw := openWatch(t, ts, machine, "/v1/queue?watch=true&outpost=net&cursor="+l.Cursor)

	base := "/v1/sessions/" + id + "/network-requests/"
	// The list shows the request to readers, with the ids the answers
	// take; another outpost's token does not see the session.
	var list api.NetworkRequestList
	ts.mustDo(200, "GET", base[:len(base)-1], reader, nil, &list)
	if len(list.Items) != 1 || list.Items[0].ID != "1" || list.Items[0].State != api.NetworkRequestPending ||
		!slices.Equal(list.Items[0].Domains, []string{"files.example.test"}) || list.Items[0].Reason == "" {
		t.Fatalf("pending list %+v", list)
	}
	ts.mustDo(404, "GET", base[:len(base)-1], limited, nil, nil)
	ts.mustDo(403, "GET", base[:len(base)-1], machine, nil, nil)
	ts.mustDo(403, "POST", base+"1/grant", reader, nil, nil)
	ts.mustDo(404, "POST", base+"1/grant", limited, nil, nil)
	ts.mustDo(404, "POST", base+"2/grant", writer, nil, nil) // list_dir: not a request
	ts.mustDo(404, "POST", base+"99/grant", writer, nil, nil)
	ts.mustDo(404, "POST", base+"x/deny", writer, nil, nil)
	ts.mustDo(400, "POST", base+"1/grant", writer, api.NetworkGrantRequest{Scope: "world"}, nil)
	ts.mustDo(400, "POST", base+"1/grant", writer, `{"scop":"outpost"}`, nil)
	ts.mustDo(400, "POST", base+"1/deny", writer, api.NetworkDenyRequest{Reason: strings.Repeat("x", api.MaxNetworkRequestReason+1)}, nil)
	// For the outpost: the outpost's right, which sessions.write is not.
	ts.mustDo(403, "POST", base+"1/grant", writer, api.NetworkGrantRequest{Scope: api.NetworkGrantOutpost}, nil)
	if got := requestEvents(ts, id); len(got) != 1 {
		t.Fatalf("refused answers left events %+v", got)
	}

	var answered api.NetworkRequest
	ts.mustDo(200, "POST", base+"1/grant", writer, nil, &answered)
	if answered.State != api.NetworkRequestGranted || answered.Scope != api.NetworkGrantSession || answered.AnsweredBy == "" {
		t.Fatalf("grant answered %+v", answered)
	}
	ts.mustDo(409, "POST", base+"1/grant", writer, nil, nil)
	ts.mustDo(409, "POST", base+"1/deny", writer, nil, nil)
	ts.mustDo(200, "GET", base[:len(base)-1], reader, nil, &list)
	if len(list.Items) != 0 {
		t.Fatalf("an answered request is still listed: %+v", list)
	}

	// The remote's first call is the script's second step: the request
	// never reached it.
	call := r.expect(api.FrameCall)
	if call.Seq != 2 || call.Tool != api.ToolListDir {
		t.Fatalf("first call the remote got: %+v", call)
	}
	var sess api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, writer, nil, &sess)
	if !sess.Spec.NetworkPolicyOwn || !hasHost(sess.Spec.NetworkPolicy, "files.example.test") || len(sess.Spec.NetworkPolicy.Allow) != 2 {
		t.Fatalf("session policy after the grant: %+v", sess.Spec.NetworkPolicy)
	}
	// The worker serving it sees the new policy as a MODIFIED entry.
	for {
		ev := lw.next(t)
		if ev.Type == api.WatchModified && ev.Object.Metadata.SessionID == id && hasHost(ev.Object.Spec.NetworkPolicy, "files.example.test") {
			break
		}
	}
	res, ok := toolResult(ts, id, 1)
	if !ok || !res.Granted || res.Scope != api.NetworkGrantSession || res.RequestID != "1" || !slices.Equal(res.Domains, []string{"files.example.test"}) {
		t.Fatalf("tool result %+v (found %v)", res, ok)
	}
	reqs := requestEvents(ts, id)
	if len(reqs) != 2 || reqs[1].State != api.NetworkRequestGranted || reqs[1].AnsweredBy != answered.AnsweredBy {
		t.Fatalf("network_request events %+v", reqs)
	}

	r.send(api.Frame{Type: api.FrameResult, Seq: 2, OK: true, Value: json.RawMessage(`{"entries":[]}`)})
	r.expect(api.FrameAck)
	r.expect(api.FrameEnd)
	ts.mustDo(200, "GET", "/v1/sessions/"+id, writer, nil, &sess)
	if sess.Status.Status != api.StatusExit || sess.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %+v", sess.Status)
	}
	ts.mustDo(409, "POST", base+"1/deny", writer, nil, nil)
}

// A denial is the tool's normal result, with the person's reason; a
// grant that would widen the outpost's policy needs network.admin.
func TestNetworkRequestDenyAndWiden(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	writer := ts.token([]string{api.ScopeSessionsWrite}, "")
	netAdmin := ts.token([]string{api.ScopeSessionsWrite, api.ScopeNetworkAdmin}, "")

	id := requestSession(ts, writer, "net", nil, "pkg.other.test")
	r := connect(ts, id)
	waitPending(ts, id)
	base := "/v1/sessions/" + id + "/network-requests/1/"
	// Following the outpost's policy, the session would get one wider than it.
	ts.mustDo(403, "POST", base+"grant", writer, nil, nil)
	var denied api.NetworkRequest
	ts.mustDo(200, "POST", base+"deny", writer, api.NetworkDenyRequest{Reason: "Use the mirror at files.example.test."}, &denied)
	if denied.State != api.NetworkRequestDenied || denied.Answer != "Use the mirror at files.example.test." {
		t.Fatalf("deny answered %+v", denied)
	}
	if call := r.expect(api.FrameCall); call.Seq != 2 {
		t.Fatalf("call after the denial: %+v", call)
	}
	res, _ := toolResult(ts, id, 1)
	if res.Granted || res.Reason != "Use the mirror at files.example.test." || res.Scope != "" {
		t.Fatalf("tool result of a denial: %+v", res)
	}
	var sess api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, writer, nil, &sess)
	if sess.Spec.NetworkPolicyOwn || hasHost(sess.Spec.NetworkPolicy, "pkg.other.test") {
		t.Fatalf("a denial changed the policy: %+v", sess.Spec)
	}

	// network.admin may widen: the session gets a copy of its outpost's
	// policy with the domain.
	id2 := requestSession(ts, writer, "net", nil, "pkg.other.test")
	connect(ts, id2)
	waitPending(ts, id2)
	ts.mustDo(200, "POST", "/v1/sessions/"+id2+"/network-requests/1/grant", netAdmin, api.NetworkGrantRequest{Scope: api.NetworkGrantSession}, nil)
	ts.mustDo(200, "GET", "/v1/sessions/"+id2, writer, nil, &sess)
	if !sess.Spec.NetworkPolicyOwn || !hasHost(sess.Spec.NetworkPolicy, "pkg.other.test") || !hasHost(sess.Spec.NetworkPolicy, "*.example.test") {
		t.Fatalf("widened session policy: %+v", sess.Spec.NetworkPolicy)
	}
}

// A grant for the outpost adds the domains to the outpost's policy, which
// its sessions that follow it see at once; it needs the outpost's right.
func TestNetworkRequestGrantForOutpost(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	ts.outpost("open")
	writer := ts.token([]string{api.ScopeSessionsWrite}, "")
	orch := ts.token([]string{api.ScopeSessionsWrite, api.ScopeOrchestrator}, "")
	machine := ts.token([]string{api.ScopeMachine}, "")

	id := requestSession(ts, writer, "net", nil, "pkg.other.test")
	bystander := requestSession(ts, writer, "net", nil, "unused.example.test")
	connect(ts, id)
	waitPending(ts, id)
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/network-requests/1/grant", orch, api.NetworkGrantRequest{Scope: api.NetworkGrantOutpost}, nil)
	var o api.Outpost
	ts.mustDo(200, "GET", "/v1/outposts/net", ts.admin, nil, &o)
	if !hasHost(o.Spec.NetworkPolicy, "pkg.other.test") || len(o.Spec.NetworkPolicy.Allow) != len(outpostPolicy.Allow)+1 {
		t.Fatalf("outpost policy after the grant: %+v", o.Spec.NetworkPolicy)
	}
	for _, sid := range []string{id, bystander} {
		var e api.QueueEntry
		ts.mustDo(200, "GET", "/v1/queue/"+sid, machine, nil, &e)
		if !hasHost(e.Spec.NetworkPolicy, "pkg.other.test") {
			t.Fatalf("entry of %s after the outpost grant: %+v", sid, e.Spec.NetworkPolicy)
		}
		var s api.Session
		ts.mustDo(200, "GET", "/v1/sessions/"+sid, writer, nil, &s)
		if s.Spec.NetworkPolicyOwn {
			t.Fatalf("session %s got a policy of its own", sid)
		}
	}
	res, _ := toolResult(ts, id, 1)
	if !res.Granted || res.Scope != api.NetworkGrantOutpost {
		t.Fatalf("tool result %+v", res)
	}

	// An unrestricted outpost: a grant for it would change nothing.
	open := requestSession(ts, writer, "open", nil, "a.test")
	connect(ts, open)
	waitPending(ts, open)
	ts.mustDo(409, "POST", "/v1/sessions/"+open+"/network-requests/1/grant", orch, api.NetworkGrantRequest{Scope: api.NetworkGrantOutpost}, nil)
	ts.mustDo(200, "POST", "/v1/sessions/"+open+"/network-requests/1/grant", writer, nil, nil)
	res, _ = toolResult(ts, open, 1)
	if !res.Granted || res.Reason == "" {
		t.Fatalf("grant on an unrestricted session: %+v", res)
	}
}

// A request still waiting when its session ends lapses: the list is empty
// and an answer is refused, so nobody answers into an ended session.
func TestNetworkRequestLapsesWithSession(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	id := requestSession(ts, ts.admin, "net", nil, "files.example.test")
	connect(ts, id)
	waitPending(ts, id)
	path := "/v1/sessions/" + id + "/network-requests"
	var list api.NetworkRequestList
	ts.mustDo(200, "GET", path, ts.admin, nil, &list)
	if len(list.Items) != 1 {
		t.Fatalf("pending list before the end %+v", list)
	}
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/terminate", ts.admin, nil, nil)
	waitfor.True(t, "the session to end", func() bool {
		var sess api.Session
		ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &sess)
		return api.IsFinal(sess.Status.Status)
	})
	ts.mustDo(200, "GET", path, ts.admin, nil, &list)
	if len(list.Items) != 0 {
		t.Fatalf("an ended session lists requests %+v", list)
	}
	ts.mustDo(409, "POST", path+"/1/grant", ts.admin, nil, nil)
	ts.mustDo(404, "GET", "/v1/sessions/nope/network-requests", ts.admin, nil, nil)
}

// Bad requests are refused when the session is created.
func TestNetworkRequestBadScriptStep(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("o")
	for _, args := range []string{`{"domains":["10.0.0.1"],"reason":"r"}`, `{"domains":[],"reason":"r"}`, `{"domains":["a.test"],"reason":""}`} {
		body := fmt.Sprintf(`{"outpost":"o","agent":{"kind":"script","steps":[{"tool":"network_access_request","args":%s}]}}`, args)
		ts.mustDo(400, "POST", "/v1/sessions", ts.admin, body, nil)
	}
}

// startStoppable is startServer with a stop the test calls itself: a
// server restarted on the same data directory.
func startStoppable(t *testing.T, opts Options) (*testServer, func()) {
	t.Helper()
	opts.Listen = "127.0.0.1:0"
	opts.Stdout = io.Discard
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := New(ctx, opts)
	if err != nil {
		cancel()
		t.Fatalf("new server: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &testServer{t: t, srv: srv, url: srv.URL(), admin: srv.AdminToken()}, stop
}

// A pending request survives a restart of the server: it is answered
// while no runner waits for it, and the next machine goes on after it.
func TestNetworkRequestAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts, stop := startStoppable(t, Options{DataDir: dir})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	id := requestSession(ts, ts.admin, "net", nil, "pkg.other.test")
	r := connect(ts, id)
	waitPending(ts, id)
	r.close()
	stop()

	ts2, _ := startStoppable(t, Options{DataDir: dir})
	ts2.admin = ts.admin // created once, by the first start
	if reqs := requestEvents(ts2, id); len(reqs) != 1 || reqs[0].State != api.NetworkRequestPending {
		t.Fatalf("after the restart: %+v", reqs)
	}
	ts2.mustDo(200, "POST", "/v1/sessions/"+id+"/network-requests/1/grant", ts2.admin, nil, nil)
	if res, ok := toolResult(ts2, id, 1); !ok || !res.Granted {
		t.Fatalf("tool result after the restart: %+v", res)
	}
	r2 := connect(ts2, id) // the same machine, back with a renewed claim
	if call := r2.expect(api.FrameCall); call.Seq != 2 || call.Tool != api.ToolListDir {
		t.Fatalf("first call of the next machine: %+v", call)
	}
}

// An outside agent's network_access_request waits in its HTTP call until
// a person answers, and gets the answer as the tool's result.
func TestNetworkRequestExternal(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"net","agent":{"kind":"external"}}`, &s)
	id := s.Metadata.SessionID
	connect(ts, id)
	type answer struct {
		code int
		res  api.ToolResult
	}
	got := make(chan answer, 1)
	go func() {
		var res api.ToolResult
		code := ts.do("POST", "/v1/sessions/"+id+"/tools/"+api.ToolNetworkAccessRequest, ts.admin,
			api.NetworkAccessRequestArgs{Domains: []string{"pkg.other.test"}, Reason: "go mod download"}, &res)
		got <- answer{code, res}
	}()
	req := waitPending(ts, id)
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/network-requests/"+req.ID+"/deny", ts.admin, api.NetworkDenyRequest{Reason: "not today"}, nil)
	a := <-got
	var res api.NetworkAccessResult
	if a.code != 200 || !a.res.OK || json.Unmarshal(a.res.Value, &res) != nil || res.Granted || res.Reason != "not today" {
		t.Fatalf("the outside agent's call answered %d %+v", a.code, a.res)
	}
	// A bad request is the caller's error at once, shown as no request.
	ts.mustDo(400, "POST", "/v1/sessions/"+id+"/tools/"+api.ToolNetworkAccessRequest, ts.admin, `{"domains":["*"],"reason":"x"}`, nil)
	if reqs := requestEvents(ts, id); len(reqs) != 2 {
		t.Fatalf("network_request events %+v", reqs)
	}
}

// Answers racing for one request: exactly one wins, the others get 409,
// and the transcript holds one answer and one result.
func TestNetworkRequestAnsweredOnce(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	id := requestSession(ts, ts.admin, "net", nil, "pkg.other.test")
	connect(ts, id)
	waitPending(ts, id)
	codes := make(chan int, 8)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			answer, body := "grant", any(api.NetworkGrantRequest{Scope: api.NetworkGrantOutpost})
			if i%2 == 1 {
				answer, body = "deny", api.NetworkDenyRequest{Reason: "no"}
			}
			codes <- ts.do("POST", "/v1/sessions/"+id+"/network-requests/1/"+answer, ts.admin, body, nil)
		})
	}
	wg.Wait()
	close(codes)
	won := 0
	for c := range codes {
		switch c {
		case 200:
			won++
		case 409:
		default:
			t.Errorf("an answer got %d", c)
		}
	}
	if won != 1 {
		t.Fatalf("%d answers won, want 1", won)
	}
	results := 0
	for _, ev := range events(ts, id) {
		if ev.Type == api.EventResult && ev.CallSeq == 1 {
			results++
		}
	}
	if reqs := requestEvents(ts, id); len(reqs) != 2 || results != 1 {
		t.Fatalf("%d results and network_request events %+v", results, reqs)
	}
}

// A request waiting on one replica is answered through another that
// cannot forward to it: the waiting runner sees the answer committed
// elsewhere and the outside agent's call returns it.
func TestNetworkRequestAcrossReplicas(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{})
	rs := startReplicaSetC(t, pg.Database(t), 2, Options{}, func(i int, o *Options) {
		if i == 0 {
			o.ReplicaURL = "http://127.0.0.1:1" // nothing answers there
		}
	})
	a, b := rs[0], rs[1]
	a.mustDo(201, "POST", "/v1/outposts", a.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	id, token := externalSessionC(t, a.testServer, "net")
	rem := connectRemoteC(t, a.srv.gatewayURL, id, token, true)
	waitFrame(t, rem.frames, api.FrameWelcome)
	waitRunning(t, a.testServer, id)
	got := make(chan api.ToolResult, 1)
	go func() {
		var res api.ToolResult
		a.do("POST", "/v1/sessions/"+id+"/tools/"+api.ToolNetworkAccessRequest, a.admin,
			api.NetworkAccessRequestArgs{Domains: []string{"pkg.other.test"}, Reason: "go mod download"}, &res)
		got <- res
	}()
	waitPending(b.testServer, id)
	b.mustDo(200, "POST", "/v1/sessions/"+id+"/network-requests/1/grant", b.admin, nil, nil)
	var res api.NetworkAccessResult
	if r := <-got; !r.OK || json.Unmarshal(r.Value, &res) != nil || !res.Granted {
		t.Fatalf("the call through replica a answered %+v", r)
	}
	var s api.Session
	a.mustDo(200, "GET", "/v1/sessions/"+id, a.admin, nil, &s)
	if !hasHost(s.Spec.NetworkPolicy, "pkg.other.test") {
		t.Fatalf("policy after the grant through b: %+v", s.Spec.NetworkPolicy)
	}
}

// TestNetworkRequestRedactsSecretsInAnyCase: a secret with capitals that
// the agent put into a requested domain is redacted from what people see
// of the request (the pending event, the list, the answer), although the
// domains are shown lower-cased, as rules hold them.
func TestNetworkRequestRedactsSecretsInAnyCase(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "net", NetworkPolicy: &outpostPolicy}, nil)
	writer := ts.token([]string{api.ScopeSessionsWrite}, "")
	const secret = "Tok3nXyZ"
	body := map[string]any{
		"outpost": "net", "title": "asks", "secrets": map[string]string{"API_TOKEN": secret},
		"agent": map[string]any{"kind": "script", "steps": []any{
			map[string]any{"tool": api.ToolNetworkAccessRequest, "args": api.NetworkAccessRequestArgs{
				Domains: []string{secret + ".leak.test"}, Reason: "The tests fetch fixtures."}},
			map[string]any{"tool": api.ToolListDir, "args": map[string]any{}},
		}},
	}
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", writer, body, &s)
	id := s.Metadata.SessionID
	connect(ts, id)
	leaks := func(what string, v any) {
		t.Helper()
		b, _ := json.Marshal(v)
		if strings.Contains(strings.ToLower(string(b)), strings.ToLower(secret)) {
			t.Errorf("%s shows the secret: %s", what, b)
		}
		if !strings.Contains(string(b), "[REDACTED:API_TOKEN]") {
			t.Errorf("%s does not say a secret was there: %s", what, b)
		}
	}
	leaks("the pending event", waitPending(ts, id))
	var list api.NetworkRequestList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/network-requests", writer, nil, &list)
	leaks("the list of requests", list)
	var denied api.NetworkRequest
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/network-requests/1/deny", writer, nil, &denied)
	leaks("the answer", denied)
	leaks("the answer's event", requestEvents(ts, id)[1])
	res, _ := toolResult(ts, id, 1)
	leaks("the result", res)
}
