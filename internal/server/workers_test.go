package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// testClock is a clock tests move by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func workerInfo(session string) api.WorkerInfo {
	return api.WorkerInfo{Kind: api.WorkerKindWorker, Hostname: "box-1", Version: "dev", SessionID: session, MaxSessions: 1,
		Capabilities: &api.Capabilities{OS: "linux", Arch: "amd64", CPUs: 4, Git: "git version 2.39.5",
			ChromeVersion: "Chromium 156", FFmpeg: "ffmpeg version 5.1", PasswordlessSudo: true, Tools: []string{"exec"}}}
}

func (ts *testServer) workers(outpost, token string) api.WorkerList {
	ts.t.Helper()
	var l api.WorkerList
	ts.mustDo(200, "GET", "/v1/outposts/"+outpost+"/workers", token, nil, &l)
	return l
}

func TestWorkersAuthMatrix(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("alpha")
	ts.outpost("beta")
	machineA := ts.token([]string{api.ScopeMachine}, "alpha")
	machineAny := ts.token([]string{api.ScopeMachine}, "")
	orch := ts.token([]string{api.ScopeOrchestrator}, "")
	reader := ts.token([]string{api.ScopeSessionsRead}, "")
	readerB := ts.token([]string{api.ScopeSessionsRead}, "beta")
	writer := ts.token([]string{api.ScopeSessionsWrite}, "")
	put := "/v1/outposts/alpha/workers/worker-box-1"

	for _, tc := range []struct {
		name, method, path, token string
		want                      int
	}{
		{"no token", "PUT", put, "", 401},
		{"bad token", "PUT", put, "opt_nope", 401},
		{"reader cannot heartbeat", "PUT", put, reader, 403},
		{"writer cannot heartbeat", "PUT", put, writer, 403},
		{"wrong outpost", "PUT", "/v1/outposts/beta/workers/worker-box-1", machineA, 404},
		{"limited token, unknown outpost", "PUT", "/v1/outposts/nope/workers/worker-box-1", machineA, 404},
		{"unknown outpost", "PUT", "/v1/outposts/nope/workers/worker-box-1", machineAny, 404},
		{"own outpost", "PUT", put, machineA, 200},
		{"by outpost id", "PUT", "/v1/outposts/" + ts.outpost("gamma").Metadata.OutpostID + "/workers/w2", machineAny, 200},
		{"orchestrator", "PUT", "/v1/outposts/beta/workers/orch-1", orch, 200},
		{"admin", "PUT", "/v1/outposts/beta/workers/admin-w", ts.admin, 200},
		{"list without token", "GET", "/v1/outposts/alpha/workers", "", 401},
		{"list by reader", "GET", "/v1/outposts/alpha/workers", reader, 200},
		{"list by machine", "GET", "/v1/outposts/alpha/workers", machineA, 200},
		{"list other outpost", "GET", "/v1/outposts/alpha/workers", readerB, 404},
		{"list all without token", "GET", "/v1/workers", "", 401},
		{"list all by reader", "GET", "/v1/workers?offline=true", reader, 200},
		{"list all, bad offline", "GET", "/v1/workers?offline=maybe", reader, 400},
		{"list all of another outpost", "GET", "/v1/workers?outpost=alpha", readerB, 404},
		{"get by reader", "GET", put, reader, 200},
		{"get other outpost", "GET", put, readerB, 404},
		{"get unknown acceptor", "GET", "/v1/outposts/alpha/workers/nobody", reader, 404},
		{"get bad acceptor id", "GET", "/v1/outposts/alpha/workers/bad%20id", reader, 400},
		{"list unknown outpost", "GET", "/v1/outposts/nope/workers", reader, 404},
		{"goodbye by reader", "DELETE", put, reader, 403},
		{"goodbye wrong outpost", "DELETE", "/v1/outposts/beta/workers/orch-1", machineA, 404},
	} {
		var body any
		if tc.method == "PUT" {
			body = workerInfo("")
		}
		if got := ts.do(tc.method, tc.path, tc.token, body, nil); got != tc.want {
			t.Errorf("%s: %s %s = %d, want %d", tc.name, tc.method, tc.path, got, tc.want)
		}
	}
	l := ts.workers("alpha", reader)
	if l.Total != 1 || len(l.Items) != 1 || l.Items[0].AcceptorID != "worker-box-1" {
		t.Fatalf("alpha workers = %+v", l)
	}
	w := l.Items[0]
	if w.Capabilities == nil || w.Capabilities.OS != "linux" || w.Capabilities.Git == "" || !w.Capabilities.PasswordlessSudo ||
		w.Hostname != "box-1" || w.Kind != api.WorkerKindWorker || w.HeartbeatIntervalS != 30 || w.ExpiresAt-w.LastSeenAt != 90 {
		t.Errorf("worker = %+v", w)
	}
	if l := ts.workers("beta", ts.admin); l.Total != 2 || l.Items[0].AcceptorID != "admin-w" || l.Items[1].AcceptorID != "orch-1" {
		t.Errorf("beta workers = %+v, want admin-w and orch-1 in order", l)
	}
	// Goodbye removes the worker; a second goodbye is no error.
	ts.mustDo(204, "DELETE", put, machineA, nil, nil)
	ts.mustDo(204, "DELETE", put, machineA, nil, nil)
	if l := ts.workers("alpha", reader); l.Total != 0 || l.Items == nil {
		t.Errorf("after goodbye: %+v, want an empty list", l)
	}
}

func TestWorkersBadInput(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("alpha")
	good := workerInfo("ses_1")
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, tc := range []struct {
		name, acceptor string
		body           any
		want           int
	}{
		{"id with a space", "bad%20id", good, 400},
		{"id starting with a dot", ".hidden", good, 400},
		{"id too long", long(201), good, 400},
		{"id with a slash", "a%2Fb", good, 400},
		{"longest id", long(200), good, 200},
		{"empty body", "w1", "", 400},
		{"not JSON", "w1", "{", 400},
		{"unknown field", "w1", `{"kind":"worker","surprise":1}`, 400},
		{"bad kind", "w1", api.WorkerInfo{Kind: "robot"}, 400},
		{"no kind", "w1", api.WorkerInfo{Hostname: "x"}, 400},
		{"negative max", "w1", api.WorkerInfo{Kind: "worker", MaxSessions: -1}, 400},
		{"long hostname", "w1", api.WorkerInfo{Kind: "worker", Hostname: long(256)}, 400},
		{"control characters", "w1", api.WorkerInfo{Kind: "worker", Version: "1\n2"}, 400},
		{"long capability", "w1", api.WorkerInfo{Kind: "worker", Capabilities: &api.Capabilities{Git: long(1025)}}, 400},
		{"too many tools", "w1", api.WorkerInfo{Kind: "worker", Capabilities: &api.Capabilities{Tools: make([]string, 501)}}, 400},
		{"too large", "w1", `{"kind":"worker","hostname":"` + long(70000) + `"}`, 413},
		{"minimal", "w1", api.WorkerInfo{Kind: "orchestrator"}, 200},
	} {
		if got := ts.do("PUT", "/v1/outposts/alpha/workers/"+tc.acceptor, ts.admin, tc.body, nil); got != tc.want {
			t.Errorf("%s: PUT = %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := ts.do("DELETE", "/v1/outposts/alpha/workers/.bad", ts.admin, nil, nil); got != 400 {
		t.Errorf("goodbye with a bad id = %d, want 400", got)
	}
	if l := ts.workers("alpha", ts.admin); l.Total != 2 {
		t.Errorf("workers after bad input = %+v, want the two good ones only", l)
	}
}

// TestWorkersExpire moves the server's clock: a worker is listed until
// three heartbeats are missed, and a heartbeat keeps it listed.
func TestWorkersExpire(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Unix(1_800_000_000, 0)}
	ts := startServer(t, Options{Now: clock.Now})
	ts.outpost("alpha")
	ts.mustDo(200, "PUT", "/v1/outposts/alpha/workers/w1", ts.admin, workerInfo(""), nil)
	ts.mustDo(200, "PUT", "/v1/outposts/alpha/workers/w2", ts.admin, workerInfo(""), nil)
	first := ts.workers("alpha", ts.admin).Items[0].ConnectedAt

	clock.add(60 * time.Second)
	var w api.Worker
	ts.mustDo(200, "PUT", "/v1/outposts/alpha/workers/w2", ts.admin, workerInfo("ses_2"), &w)
	if w.ConnectedAt != first || w.LastSeenAt != first+60 || w.SessionID != "ses_2" {
		t.Errorf("renewed worker = %+v", w)
	}
	clock.add(29 * time.Second) // w1 last seen 89 s ago
	if l := ts.workers("alpha", ts.admin); l.Total != 2 {
		t.Fatalf("after 89 s: %+v, want both", l)
	}
	if m := metricsText(t, ts); !strings.Contains(m, `outpost_connected_workers{kind="worker",outpost="alpha"} 2`) {
		t.Errorf("metrics lack the connected workers gauge:\n%s", grep(m, "outpost_connected"))
	}
	clock.add(2 * time.Second) // w1: 91 s
	l := ts.workers("alpha", ts.admin)
	if l.Total != 1 || l.Items[0].AcceptorID != "w2" {
		t.Fatalf("after 91 s: %+v, want w2 only", l)
	}
	clock.add(60 * time.Second) // w2: 91 s
	if l := ts.workers("alpha", ts.admin); l.Total != 0 {
		t.Fatalf("after w2 expired: %+v", l)
	}
	if m := metricsText(t, ts); strings.Contains(m, `outpost_connected_workers{`) {
		t.Errorf("metrics still count expired workers:\n%s", grep(m, "outpost_connected"))
	}
	// A worker coming back is connected anew.
	ts.mustDo(200, "PUT", "/v1/outposts/alpha/workers/w1", ts.admin, workerInfo(""), &w)
	if now := clock.Now().Unix(); w.ConnectedAt != now {
		t.Errorf("reconnected at %d, want %d", w.ConnectedAt, now)
	}
}

// TestWorkersBounded fills an outpost to its (lowered) limit: one more
// acceptor is refused with 409, a known one may still heartbeat, and an
// expired one frees its place. Not parallel: it lowers a package limit.
func TestWorkersBounded(t *testing.T) {
	defer func(n int) { maxWorkersPerOutpost = n }(maxWorkersPerOutpost)
	maxWorkersPerOutpost = 3
	clock := &testClock{t: time.Unix(1_800_000_000, 0)}
	ts := startServer(t, Options{Now: clock.Now})
	ts.outpost("alpha")
	ts.outpost("beta")
	for i := range 3 {
		ts.mustDo(200, "PUT", fmt.Sprintf("/v1/outposts/alpha/workers/w%d", i), ts.admin, workerInfo(""), nil)
	}
	if got := ts.do("PUT", "/v1/outposts/alpha/workers/w3", ts.admin, workerInfo(""), nil); got != 409 {
		t.Errorf("fourth worker = %d, want 409", got)
	}
	ts.mustDo(200, "PUT", "/v1/outposts/alpha/workers/w0", ts.admin, workerInfo(""), nil)
	ts.mustDo(200, "PUT", "/v1/outposts/beta/workers/w3", ts.admin, workerInfo(""), nil) // per outpost
	clock.add(91 * time.Second)
	ts.mustDo(200, "PUT", "/v1/outposts/alpha/workers/w3", ts.admin, workerInfo(""), nil)
}

func metricsText(t *testing.T, ts *testServer) string {
	t.Helper()
	resp, err := http.Get(ts.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return withoutReplicaLabel(string(b))
}

func grep(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
