package server

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestAcceptorIDValidation: claims, releases, machine events, queue
// filters and heartbeats take acceptor ids by one rule, and a bad one gets
// a 400 that says the rule and changes nothing.
func TestAcceptorIDValidation(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("ids")
	s := ts.session("ids")
	id := s.Metadata.SessionID
	long := func(n int) string { return "a" + strings.Repeat("b", n-1) }
	bad := []struct{ name, acceptor string }{
		{"empty", ""},
		{"space", "worker 1"},
		{"slash", "ns/pod"},
		{"leading dash", "-w"},
		{"leading dot", ".w"},
		{"newline", "w\n1"},
		{"non-ASCII", "wörker"},
		{"too long", long(201)},
	}
	for _, tc := range bad {
		for _, action := range []string{"claim", "release"} {
			resp, raw := ts.raw("POST", "/v1/queue/"+id+"/"+action, ts.admin, "application/json", jsonBody(t, api.ClaimRequest{AcceptorID: tc.acceptor}))
			var e api.ErrorResponse
			_ = json.Unmarshal(raw, &e)
			if resp.StatusCode != http.StatusBadRequest || e.Error.Code != api.CodeBadRequest || !strings.Contains(e.Error.Message, "1 to 200 letters") {
				t.Errorf("%s with acceptor %s: %d %s, want 400 naming the rule", action, tc.name, resp.StatusCode, raw)
			}
		}
		ev := api.MachineEventRequest{AcceptorID: tc.acceptor, Step: api.MachineStepCreate}
		if got := ts.do("POST", "/v1/queue/"+id+"/events", ts.admin, ev, nil); got != http.StatusBadRequest {
			t.Errorf("machine event with acceptor %s: %d, want 400", tc.name, got)
		}
		if tc.acceptor != "" {
			if got := ts.do("GET", "/v1/queue?acceptor_id="+url.QueryEscape(tc.acceptor), ts.admin, nil, nil); got != http.StatusBadRequest {
				t.Errorf("queue filter with acceptor %s: %d, want 400", tc.name, got)
			}
		}
	}
	var e api.QueueEntry
	ts.mustDo(200, "GET", "/v1/queue/"+id, ts.admin, nil, &e)
	if e.Status.Phase != api.PhasePending {
		t.Fatalf("bad acceptor ids changed the entry: %+v", e.Status)
	}
	for _, good := range []string{"w", "worker-box-1", "orch:pod@ns.cluster_1", long(200)} {
		ts.claimFor(id, good)
		ts.mustDo(200, "POST", "/v1/queue/"+id+"/release", ts.admin, api.ClaimRequest{AcceptorID: good}, nil)
		ts.mustDo(200, "PUT", "/v1/outposts/ids/workers/"+good, ts.admin, api.WorkerInfo{Kind: api.WorkerKindWorker}, nil)
	}
}

// TestHeartbeatOneInstancePerAcceptor: while an acceptor's entry is live,
// a heartbeat of another process (instance) under the same id is refused
// with acceptor_in_use; heartbeats without an instance (a worker serving
// one session under its orchestrator's id) are not; and a goodbye naming
// an instance removes only that instance's entry.
func TestHeartbeatOneInstancePerAcceptor(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("dup")
	path := "/v1/outposts/dup/workers/worker-shared"
	first := workerInfo("")
	first.Instance, first.PID = "inst-a", 4242
	second := workerInfo("")
	second.Instance, second.PID = "inst-b", 4343
	ts.mustDo(200, "PUT", path, ts.admin, first, nil)
	ts.mustDo(200, "PUT", path, ts.admin, first, nil) // its own renewal

	resp, raw := ts.raw("PUT", path, ts.admin, "application/json", jsonBody(t, second))
	var e api.ErrorResponse
	_ = json.Unmarshal(raw, &e)
	if resp.StatusCode != http.StatusConflict || e.Error.Code != api.CodeAcceptorInUse ||
		!strings.Contains(e.Error.Message, "box-1 (pid 4242)") || !strings.Contains(e.Error.Message, "never share") {
		t.Fatalf("second instance: %d %s, want 409 acceptor_in_use naming the holder", resp.StatusCode, raw)
	}
	if l := ts.workers("dup", ts.admin); l.Total != 1 || l.Items[0].Instance != "inst-a" || l.Items[0].PID != 4242 {
		t.Fatalf("after the refused heartbeat: %+v, want inst-a only", l)
	}

	// A session worker under the same id sends no instance: not refused.
	ts.mustDo(200, "PUT", path, ts.admin, workerInfo("ses_1"), nil)
	ts.mustDo(200, "PUT", path, ts.admin, first, nil)

	// The refused process's goodbye leaves the holder listed; the
	// holder's removes it, after which another instance may announce.
	ts.mustDo(204, "DELETE", path+"?instance=inst-b", ts.admin, nil, nil)
	if l := ts.workers("dup", ts.admin); l.Total != 1 {
		t.Fatalf("another instance's goodbye removed the holder: %+v", l)
	}
	ts.mustDo(204, "DELETE", path+"?instance=inst-a", ts.admin, nil, nil)
	ts.mustDo(200, "PUT", path, ts.admin, second, nil)
	if l := ts.workers("dup", ts.admin); l.Total != 1 || l.Items[0].Instance != "inst-b" {
		t.Fatalf("after the holder's goodbye: %+v, want inst-b", l)
	}
	for _, q := range []string{"?instance=has%20space", "?instance=" + strings.Repeat("x", 65)} {
		if got := ts.do("DELETE", path+q, ts.admin, nil, nil); got != 400 {
			t.Errorf("goodbye %s = %d, want 400", q, got)
		}
	}
	badInst := workerInfo("")
	badInst.Instance = "a/b"
	if got := ts.do("PUT", path, ts.admin, badInst, nil); got != 400 {
		t.Errorf("heartbeat with a bad instance = %d, want 400", got)
	}
}

func jsonBody(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
