package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// claimAnswer claims id for acceptor and returns the status and the error
// code of the answer ("" on success).
func (ts *testServer) claimAnswer(id, acceptor string) (int, string) {
	ts.t.Helper()
	b, _ := json.Marshal(api.ClaimRequest{AcceptorID: acceptor})
	req, _ := http.NewRequest("POST", ts.url+"/v1/queue/"+id+"/claim", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+ts.admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e api.ErrorResponse
	_ = json.Unmarshal(raw, &e)
	return resp.StatusCode, e.Error.Code
}

// TestMaxRunning: an outpost with max_running 2 hands out two claims; the
// third answers 409 outpost_at_capacity (a renewal still succeeds), until a
// claim is released or the cap is raised through PATCH.
func TestMaxRunning(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	var o api.Outpost
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "capped", MaxRunning: 2}, &o)
	if o.Spec.MaxRunning != 2 || o.Spec.MaxAttempts != api.DefaultMaxAttempts {
		t.Fatalf("spec %+v, want max_running 2 and max_attempts %d", o.Spec, api.DefaultMaxAttempts)
	}
	var ids []string
	for range 4 {
		ids = append(ids, ts.session("capped").Metadata.SessionID)
	}
	ts.claimFor(ids[0], "a")
	ts.claimFor(ids[1], "b")
	if code, errCode := ts.claimAnswer(ids[2], "c"); code != 409 || errCode != api.CodeOutpostAtCapacity {
		t.Fatalf("claim beyond max_running: %d %q, want 409 %s", code, errCode, api.CodeOutpostAtCapacity)
	}
	ts.claimFor(ids[0], "a") // a renewal is not a new claim
	var e api.QueueEntry
	ts.mustDo(200, "GET", "/v1/queue/"+ids[2], ts.admin, nil, &e)
	if e.Status.Phase != api.PhasePending {
		t.Fatalf("the refused entry is %s, want pending", e.Status.Phase)
	}
	ts.mustDo(200, "POST", "/v1/queue/"+ids[1]+"/release", ts.admin, api.ClaimRequest{AcceptorID: "b"}, nil)
	ts.claimFor(ids[2], "c")
	if code, _ := ts.claimAnswer(ids[3], "d"); code != 409 {
		t.Fatalf("claim beyond max_running after a release and a claim: %d, want 409", code)
	}
	if v, _ := sample(t, ts, "outpost_claims_total", `outcome="at_capacity"`); v != 2 {
		t.Errorf("at_capacity claims = %v, want 2", v)
	}
	if v, _ := sample(t, ts, "outpost_max_running", `outpost="capped"`); v != 2 {
		t.Errorf("outpost_max_running = %v, want 2", v)
	}

	ts.mustDo(400, "PATCH", "/v1/outposts/capped", ts.admin, `{"max_running":-1}`, nil)
	ts.mustDo(400, "PATCH", "/v1/outposts/capped", ts.admin, `{"max_attempts":101}`, nil)
	ts.mustDo(404, "PATCH", "/v1/outposts/nope", ts.admin, `{"max_running":1}`, nil)
	machine := ts.token([]string{api.ScopeMachine}, "")
	ts.mustDo(403, "PATCH", "/v1/outposts/capped", machine, `{"max_running":0}`, nil)
	ts.mustDo(200, "PATCH", "/v1/outposts/capped", ts.admin, `{"max_running":0}`, &o)
	if o.Spec.MaxRunning != 0 || o.Status.ActiveClaims != 2 {
		t.Fatalf("after PATCH: spec %+v status %+v, want no cap and 2 claims", o.Spec, o.Status)
	}
	ts.claimFor(ids[3], "d")
	ts.mustDo(200, "GET", "/v1/outposts/capped", ts.admin, nil, &o)
	if o.Spec.MaxRunning != 0 || o.Status.ActiveClaims != 3 {
		t.Fatalf("outpost %+v, want no cap and 3 claims", o)
	}
	ts.mustDo(400, "POST", "/v1/outposts", ts.admin, `{"name":"bad","max_running":-2}`, nil)
}

// TestAttemptsByLapse: a session whose claims lapse is requeued until its
// max_attempts (the outpost's 2) are spent, then ends in error naming each
// lapse; the queue entry counts the attempts and the metrics too.
func TestAttemptsByLapse(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{ClaimTTL: 300 * time.Millisecond, SweepInterval: 20 * time.Millisecond})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "flaky", MaxAttempts: 2}, nil)
	id := ts.session("flaky").Metadata.SessionID
	pending := func() api.QueueEntry {
		var e api.QueueEntry
		waitfor.True(t, "the claim to lapse", func() bool {
			ts.mustDo(200, "GET", "/v1/queue/"+id, ts.admin, nil, &e)
			return e.Status.Phase == api.PhasePending
		})
		return e
	}
	first := ts.claimFor(id, "m1")
	if first.Status.Attempts != 0 || first.Status.MaxAttempts != 2 {
		t.Fatalf("first claim: attempts %d of %d, want 0 of 2", first.Status.Attempts, first.Status.MaxAttempts)
	}
	if e := pending(); e.Status.Attempts != 1 {
		t.Fatalf("after a lapse: %d attempts, want 1", e.Status.Attempts)
	}
	ts.claimFor(id, "m2")
	var s api.Session
	waitfor.True(t, "the session to end", func() bool {
		ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
		return api.IsFinal(s.Status.Status)
	})
	if s.Status.Status != api.StatusError || s.Status.StatusDetail != api.DetailError {
		t.Errorf("ended %s/%s, want error/error", s.Status.Status, s.Status.StatusDetail)
	}
	for _, want := range []string{"after 2 failed attempts (max_attempts 2)", "Attempt 1: The claim of m1 lapsed", "Attempt 2: The claim of m2 lapsed"} {
		if !strings.Contains(s.Status.Reason, want) {
			t.Errorf("reason %q does not say %q", s.Status.Reason, want)
		}
	}
	var e api.QueueEntry
	ts.mustDo(200, "GET", "/v1/queue/"+id, ts.admin, nil, &e)
	if e.Status.Phase != api.PhasePending || e.Status.SessionStatus != api.QueueSessionTerminated {
		t.Errorf("entry of the ended session: %+v, want it listed as pending and terminated", e.Status)
	}
	if code, _ := ts.claimAnswer(id, "m3"); code != 409 {
		t.Errorf("claim of the ended session: %d, want 409", code)
	}
	if v, _ := sample(t, ts, "outpost_attempts_failed_total", `how="lapsed",outpost="flaky"`); v != 1 {
		t.Errorf("lapsed attempts = %v, want 1", v)
	}
	if v, _ := sample(t, ts, "outpost_attempts_failed_total", `how="exhausted",outpost="flaky"`); v != 1 {
		t.Errorf("exhausted attempts = %v, want 1", v)
	}
}

// TestReleaseWithoutReasonIsNoAttempt: a claimer giving a session back
// without a reason (it never started it), or because it shuts down, spends
// none of its attempts.
func TestReleaseWithoutReasonIsNoAttempt(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "o", MaxAttempts: 1}, nil)
	id := ts.session("o").Metadata.SessionID
	for range 3 {
		ts.claimFor(id, "m")
		var e api.QueueEntry
		ts.mustDo(200, "POST", "/v1/queue/"+id+"/release", ts.admin, api.ClaimRequest{AcceptorID: "m"}, &e)
		if e.Status.Attempts != 0 || e.Status.Phase != api.PhasePending {
			t.Fatalf("after a release without a reason: %+v, want pending with no attempt", e.Status)
		}
	}
	ts.claimFor(id, "m")
	var e api.QueueEntry
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/release", ts.admin, api.ClaimRequest{AcceptorID: "m", Reason: "worker shutting down", Shutdown: true}, &e)
	if e.Status.Attempts != 0 || e.Status.Phase != api.PhasePending {
		t.Fatalf("after a release on shutdown: %+v, want pending with no attempt", e.Status)
	}
	ts.claimFor(id, "m")
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/release", ts.admin, api.ClaimRequest{AcceptorID: "m", Reason: "provisioning failed"}, nil)
	var s api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
	if s.Status.Status != api.StatusError || !strings.Contains(s.Status.Reason, "Attempt 1: Released by m: provisioning failed.") {
		t.Errorf("after a release with a reason and max_attempts 1: %s %q", s.Status.Status, s.Status.Reason)
	}
}

// TestPriority: a session's priority is on it and its queue entry, is
// validated, and order=priority lists the queue in claim order.
func TestPriority(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("p")
	create := func(priority int) string {
		var s api.Session
		ts.mustDo(201, "POST", "/v1/sessions", ts.admin, api.CreateSessionRequest{Outpost: "p", Priority: priority,
			Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}}, &s)
		if s.Spec.Priority != priority {
			t.Fatalf("session priority %d, want %d", s.Spec.Priority, priority)
		}
		return s.Metadata.SessionID
	}
	low, high, mid1, mid2 := create(-1), create(7), create(3), create(3)
	var e api.QueueEntry
	ts.mustDo(200, "GET", "/v1/queue/"+high, ts.admin, nil, &e)
	if e.Spec.Priority != 7 {
		t.Errorf("entry priority %d, want 7", e.Spec.Priority)
	}
	var l api.QueueList
	ts.mustDo(200, "GET", "/v1/queue?outpost=p&order=priority&first=3", ts.admin, nil, &l)
	var got []string
	for _, it := range l.Items {
		got = append(got, it.Metadata.SessionID)
	}
	if want := []string{high, mid1, mid2}; strings.Join(got, ",") != strings.Join(want, ",") || !l.HasNextPage || l.Total != 4 {
		t.Errorf("order=priority first=3: %v (has_next_page %v, total %d), want %v, more, 4", got, l.HasNextPage, l.Total, want)
	}
	ts.mustDo(200, "GET", "/v1/queue?outpost=p", ts.admin, nil, &l)
	if l.Items[0].Metadata.SessionID != low {
		t.Errorf("the default order is not the change order: first %s, want %s", l.Items[0].Metadata.SessionID, low)
	}
	ts.mustDo(400, "GET", "/v1/queue?outpost=p&order=priority&cursor=1", ts.admin, nil, nil)
	ts.mustDo(400, "GET", "/v1/queue?outpost=p&order=size", ts.admin, nil, nil)
	for _, body := range []string{
		`{"outpost":"p","priority":1000001,"agent":{"kind":"script"}}`,
		`{"outpost":"p","limits":{"max_attempts":101},"agent":{"kind":"script"}}`,
		`{"outpost":"p","limits":{"max_attempts":-1},"agent":{"kind":"script"}}`,
	} {
		ts.mustDo(400, "POST", "/v1/sessions", ts.admin, body, nil)
	}
}

// TestFleetGauges: running and suspended sessions per outpost are gauges,
// and so are the bytes of its sessions' snapshots in the store.
func TestFleetGauges(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("g")
	ts.session("g")
	for _, name := range []string{"outpost_sessions_running", "outpost_sessions_suspended"} {
		if v, ok := sample(t, ts, name, `outpost="g"`); !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0", name, v, ok)
		}
	}
	// The snapshot bytes are the store's, whichever replica wrote them.
	sess := ts.session("g")
	if _, err := ts.srv.store.PutSnapshot(t.Context(), store.Snapshot{SessionID: sess.Metadata.SessionID, BlobKey: "k", Size: 600, SHA256: "x", CreatedAt: time.Now()}); err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	if v, _ := sample(t, ts, "outpost_snapshot_bytes", `outpost="g"`); v != 600 {
		t.Errorf("outpost_snapshot_bytes = %v, want 600", v)
	}
}
