package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// snapshotRequest sends a request to the gateway's snapshot path as the
// remote of a claim does.
func (ts *testServer) snapshotRequest(method, sessionID, token string, body []byte) (int, []byte) {
	ts.t.Helper()
	req, err := http.NewRequest(method, ts.url+api.SnapshotPath, bytes.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(api.HeaderSessionID, sessionID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatalf("%s snapshot: %v", method, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// paused reports whether the session's connection holds its calls back.
func (ts *testServer) paused(id string) bool {
	c := ts.srv.hub.Get(id)
	if c == nil {
		return false
	}
	return c.Gate.Paused()
}

// suspendAsync posts a suspend and returns its status on the channel.
func (ts *testServer) suspendAsync(id string) <-chan int {
	done := make(chan int, 1)
	go func() {
		var s api.Session
		done <- ts.do("POST", "/v1/sessions/"+id+"/suspend", ts.admin, nil, &s)
	}()
	return done
}

// untilSuspend reads frames up to the suspend frame; a call before it
// fails the test: no call may start under a snapshot.
func (r *fakeRemote) untilSuspend() {
	r.t.Helper()
	for {
		f, err := r.recv()
		if err != nil {
			r.t.Fatalf("waiting for suspend: %v", err)
		}
		switch f.Type {
		case api.FrameSuspend:
			return
		case api.FrameCall:
			r.t.Fatalf("call %d sent while the session was being suspended", f.Seq)
		}
	}
}

// expect2 reads the next frame, which must be of one of two types.
func (r *fakeRemote) expect2(a, b string) api.Frame {
	r.t.Helper()
	f, err := r.recv()
	if err != nil {
		r.t.Fatalf("waiting for %s or %s: %v", a, b, err)
	}
	if f.Type != a && f.Type != b {
		r.t.Fatalf("got %s frame, want %s or %s: %+v", f.Type, a, b, f)
	}
	return f
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func eventsOf(t *testing.T, ts *testServer, id, typ string) []api.Event {
	t.Helper()
	var out []api.Event
	for _, ev := range sessionEvents(t, ts, id) {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// TestSuspendAndResume walks a session through suspend and resume with
// fake remotes: the suspend waits for the call in flight and holds the
// next one back, the snapshot is uploaded and recorded, the session is
// suspended and its entry out of the queue until resumed; the next
// remote's welcome names the snapshot, it downloads the same bytes, its
// restore is recorded, it gets the held call; and the snapshot is deleted
// once the session ends.
func TestSuspendAndResume(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{SweepInterval: 20 * time.Millisecond})
	ts.outpost("sus")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"sus","agent":{"kind":"script","steps":[{"tool":"list_dir"},{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, "m1")
	r, _ := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	if w := r.expect(api.FrameWelcome); w.Snapshot != nil {
		t.Fatalf("a new session's welcome names a snapshot: %+v", w.Snapshot)
	}
	if f := r.expect(api.FrameCall); f.Seq != 1 {
		t.Fatalf("first call %+v", f)
	}

	// Call 1 is in flight: the suspend waits for it, and holds call 2.
	done := ts.suspendAsync(id)
	waitfor.True(t, "the suspend to pause the calls", func() bool { return ts.paused(id) })
	r.send(api.Frame{Type: api.FrameResult, Seq: 1, OK: true, Value: json.RawMessage(`{}`)})
	r.untilSuspend()

	archive := bytes.Repeat([]byte("workspace "), 1000)
	if code, raw := ts.snapshotRequest("PUT", id, "opc_wrong", archive); code != 401 {
		t.Fatalf("PUT with a wrong token: %d %s", code, raw)
	}
	code, raw := ts.snapshotRequest("PUT", id, claim.Status.ConnectToken, archive)
	if code != 201 {
		t.Fatalf("PUT snapshot: %d %s", code, raw)
	}
	var put api.SnapshotInfo
	if err := json.Unmarshal(raw, &put); err != nil || put.Size != int64(len(archive)) || put.SHA256 != sha(archive) {
		t.Fatalf("PUT answer %s (%v)", raw, err)
	}
	r.send(api.Frame{Type: api.FrameSuspended, Snapshot: &api.SnapshotInfo{Size: int64(len(archive)), SHA256: sha(archive), Files: 3, Bytes: 12345, DurationMS: 7}})
	for r.expect2(api.FrameAck, api.FrameEnd).Type != api.FrameEnd {
	}
	if code := <-done; code != 200 {
		t.Fatalf("suspend: status %d", code)
	}
	r.close()

	var got api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &got)
	if got.Status.Status != api.StatusSuspended {
		t.Fatalf("after suspend: %+v", got.Status)
	}
	e := entry(t, ts, id)
	if e.Status.SessionStatus != api.QueueSessionSuspended {
		t.Fatalf("entry after suspend: %+v", e.Status)
	}
	snaps := eventsOf(t, ts, id, api.EventSnapshot)
	if len(snaps) != 1 || snaps[0].OK == nil || !*snaps[0].OK || !strings.Contains(snaps[0].Reason, "blob store") {
		t.Fatalf("snapshot events %+v", snaps)
	}
	var info api.SnapshotInfo
	if err := json.Unmarshal(snaps[0].Value, &info); err != nil || info.Size != int64(len(archive)) || info.Files != 3 {
		t.Fatalf("snapshot event value %s (%v)", snaps[0].Value, err)
	}
	if v, _ := sample(t, ts, "outpost_snapshot_bytes", `outpost="sus"`); v != float64(len(archive)) {
		t.Errorf("outpost_snapshot_bytes after the suspend = %v, want %d", v, len(archive))
	}
	if v, _ := sample(t, ts, "outpost_suspends_total", `outcome="suspended",outpost="sus"`); v != 1 {
		t.Errorf("outpost_suspends_total{outcome=suspended} = %v, want 1", v)
	}

	// Nobody else may claim it; its holder releases, and it stays out of
	// the queue.
	ts.mustDo(409, "POST", "/v1/queue/"+id+"/claim", ts.admin, api.ClaimRequest{AcceptorID: "m2"}, nil)
	// With a reason, as a claimer whose machine went away says: suspending
	// meant that, so it is no failed attempt.
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/release", ts.admin, api.ClaimRequest{AcceptorID: "m1", Reason: "the machine was torn down"}, nil)
	e = entry(t, ts, id)
	if e.Status.Phase != api.PhasePending || e.Status.SessionStatus != api.QueueSessionSuspended || e.Spec.Kind != api.KindResume {
		t.Fatalf("entry after release: %+v %+v", e.Spec, e.Status)
	}
	if e.Status.Attempts != 0 {
		t.Fatalf("releasing the suspended session counted %d failed attempts, want 0", e.Status.Attempts)
	}
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &got)
	if got.Status.Status != api.StatusSuspended {
		t.Fatalf("release changed the suspended session: %+v", got.Status)
	}
	ts.mustDo(409, "POST", "/v1/queue/"+id+"/claim", ts.admin, api.ClaimRequest{AcceptorID: "m2"}, nil)
	ts.mustDo(409, "POST", "/v1/sessions/"+id+"/suspend", ts.admin, nil, nil)

	// Resume: pending, kind resume, claimable.
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/resume", ts.admin, nil, &got)
	if got.Status.Status != api.StatusResuming {
		t.Fatalf("after resume: %+v", got.Status)
	}
	e = entry(t, ts, id)
	if e.Status.Phase != api.PhasePending || e.Status.SessionStatus != api.QueueSessionPending || e.Spec.Kind != api.KindResume {
		t.Fatalf("entry after resume: %+v %+v", e.Spec, e.Status)
	}
	ts.mustDo(409, "POST", "/v1/sessions/"+id+"/resume", ts.admin, nil, nil)

	claim2 := ts.claimFor(id, "m2")
	if code, _ := ts.snapshotRequest("PUT", id, claim2.Status.ConnectToken, archive); code != 409 {
		t.Fatalf("PUT outside a suspend: %d, want 409", code)
	}
	r2, _ := dialGateway(t, ts.srv.gatewayURL, id, claim2.Status.ConnectToken)
	r2.send(api.Frame{Type: api.FrameHello, SessionID: id})
	w := r2.expect(api.FrameWelcome)
	if w.Snapshot == nil || w.Snapshot.SHA256 != sha(archive) || w.Snapshot.Size != int64(len(archive)) {
		t.Fatalf("resumed welcome's snapshot %+v", w.Snapshot)
	}
	code, body := ts.snapshotRequest("GET", id, claim2.Status.ConnectToken, nil)
	if code != 200 || !bytes.Equal(body, archive) {
		t.Fatalf("GET snapshot: %d, %d bytes", code, len(body))
	}
	if code, _ := ts.snapshotRequest("GET", id, claim.Status.ConnectToken, nil); code != 401 {
		t.Fatalf("GET with the old claim's token: %d, want 401", code)
	}
	r2.send(api.Frame{Type: api.FrameRestored, SnapshotRestored: &api.SnapshotInfo{Size: int64(len(archive)), SHA256: sha(archive), Files: 3, Bytes: 12345, DurationMS: 5}})
	if f := r2.expect(api.FrameCall); f.Seq != 2 {
		t.Fatalf("call after resume %+v, want seq 2", f)
	}
	var restores []api.Event
	waitfor.True(t, "the restore event", func() bool {
		restores = eventsOf(t, ts, id, api.EventRestore)
		return len(restores) > 0
	})
	if len(restores) != 1 || restores[0].OK == nil || !*restores[0].OK {
		t.Fatalf("restore events %+v", restores)
	}
	if v, _ := sample(t, ts, "outpost_snapshot_restores_total", `outcome="restored",outpost="sus"`); v != 1 {
		t.Errorf("outpost_snapshot_restores_total{outcome=restored} = %v, want 1", v)
	}
	resumes := eventsOf(t, ts, id, api.EventResume)
	if len(resumes) != 1 || !strings.Contains(resumes[0].Reason, "snapshot") {
		t.Fatalf("resume events %+v", resumes)
	}
	r2.send(api.Frame{Type: api.FrameResult, Seq: 2, OK: true, Value: json.RawMessage(`{}`)})
	if end := waitEnded(t, ts, id); end.Status.Status != api.StatusExit {
		t.Fatalf("ended %+v", end.Status)
	}
	// The ended session's snapshot goes, blob and row.
	blob := filepath.Join(ts.srv.opts.DataDir, "snapshots", id+"-1")
	waitfor.True(t, "the snapshot to be deleted", func() bool {
		_, err := ts.srv.store.GetSnapshot(context.Background(), id)
		_, serr := os.Stat(blob)
		return errors.Is(err, store.ErrNotFound) && errors.Is(serr, os.ErrNotExist)
	})
	waitfor.True(t, "the snapshot bytes to go", func() bool {
		v, ok := sample(t, ts, "outpost_snapshot_bytes", `outpost="sus"`)
		return ok && v == 0
	})
}

// TestSuspendRefused: a suspend or resume that does not fit the session's
// state is refused with 409 (404 for a session the caller cannot see) and
// changes nothing.
func TestSuspendRefused(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("ref")
	ts.outpost("other")
	pending := ts.session("ref").Metadata.SessionID
	foreign := ts.token([]string{api.ScopeSessionsWrite, api.ScopeSessionsRead}, "other")

	unchanged := func(id string, do func()) {
		t.Helper()
		var before, after api.Session
		ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &before)
		n := len(sessionEvents(t, ts, id))
		do()
		ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &after)
		if !reflect.DeepEqual(before.Status, after.Status) {
			t.Errorf("session %s changed: %+v → %+v", id, before.Status, after.Status)
		}
		if m := len(sessionEvents(t, ts, id)); m != n {
			t.Errorf("session %s got %d events", id, m-n)
		}
	}
	unchanged(pending, func() {
		ts.mustDo(409, "POST", "/v1/sessions/"+pending+"/suspend", ts.admin, nil, nil)
		ts.mustDo(409, "POST", "/v1/sessions/"+pending+"/resume", ts.admin, nil, nil)
		ts.mustDo(404, "POST", "/v1/sessions/"+pending+"/suspend", foreign, nil, nil)
		ts.mustDo(404, "POST", "/v1/sessions/"+pending+"/resume", foreign, nil, nil)
	})
	ts.mustDo(404, "POST", "/v1/sessions/ses_nope/suspend", ts.admin, nil, nil)

	// A running session: resume is refused; so is a suspend through a
	// remote of protocol version 2.
	id, _, r, rd := liveSession(t, ts, "ref", "m1")
	defer rd.stop()
	_ = r
	unchanged(id, func() {
		ts.mustDo(409, "POST", "/v1/sessions/"+id+"/resume", ts.admin, nil, nil)
	})
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"ref","agent":{"kind":"script","steps":[{"tool":"list_dir"}]}}`, &s)
	old := s.Metadata.SessionID
	claim := ts.claimFor(old, "m2")
	r2, _ := dialGateway(t, ts.srv.gatewayURL, old, claim.Status.ConnectToken)
	r2.send(api.Frame{V: 2, Type: api.FrameHello, SessionID: old})
	r2.expect(api.FrameWelcome)
	r2.expect(api.FrameCall)
	unchanged(old, func() {
		var e api.ErrorResponse
		req, _ := http.NewRequest("POST", ts.url+"/v1/sessions/"+old+"/suspend", nil)
		req.Header.Set("Authorization", "Bearer "+ts.admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(&e)
		if resp.StatusCode != 409 || !strings.Contains(e.Error.Message, "version 2") {
			t.Errorf("suspend through a version 2 remote: %d %q", resp.StatusCode, e.Error.Message)
		}
	})

	// An ended session.
	ts.mustDo(200, "POST", "/v1/sessions/"+pending+"/terminate", ts.admin, nil, nil)
	unchanged(pending, func() {
		ts.mustDo(409, "POST", "/v1/sessions/"+pending+"/suspend", ts.admin, nil, nil)
		ts.mustDo(409, "POST", "/v1/sessions/"+pending+"/resume", ts.admin, nil, nil)
	})
}

// TestSuspendTooLarge: a snapshot over the server's limit is refused with
// 413 naming it, the suspend fails with a clear error on the transcript
// and is counted as too_large, and the session goes on running: the held
// call is sent.
func TestSuspendTooLarge(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{MaxSnapshotBytes: 100})
	ts.outpost("big")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"big","agent":{"kind":"script","steps":[{"tool":"list_dir"},{"tool":"list_dir"},{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, "m1")
	r, _ := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r.expect(api.FrameWelcome)
	r.expect(api.FrameCall)
	r.send(api.Frame{Type: api.FrameResult, Seq: 1, OK: true, Value: json.RawMessage(`{}`)})
	r.expect(api.FrameAck)
	// Call 2 went out with the ack's transaction; answer it only after the
	// suspend has started waiting for it.
	if f := r.expect(api.FrameCall); f.Seq != 2 {
		t.Fatalf("call %+v", f)
	}
	done := ts.suspendAsync(id)
	waitfor.True(t, "the suspend to pause the calls", func() bool { return ts.paused(id) })
	r.send(api.Frame{Type: api.FrameResult, Seq: 2, OK: true, Value: json.RawMessage(`{}`)})
	r.untilSuspend()
	code, raw := ts.snapshotRequest("PUT", id, claim.Status.ConnectToken, bytes.Repeat([]byte("x"), 200))
	if code != 413 || !strings.Contains(string(raw), "this server's limit of 100 B") {
		t.Fatalf("PUT over the limit: %d %s, want 413 naming the server's limit", code, raw)
	}
	r.send(api.Frame{Type: api.FrameSuspended, Snapshot: &api.SnapshotInfo{Error: "the server refused the upload (413)"}})
	if code := <-done; code != 413 {
		t.Fatalf("suspend over the limit: status %d, want 413", code)
	}
	if v, _ := sample(t, ts, "outpost_suspends_total", `outcome="too_large",outpost="big"`); v != 1 {
		t.Errorf("outpost_suspends_total{outcome=too_large} = %v, want 1", v)
	}
	snaps := eventsOf(t, ts, id, api.EventSnapshot)
	if len(snaps) != 1 || snaps[0].OK == nil || *snaps[0].OK || !strings.Contains(snaps[0].Error, "limit") {
		t.Fatalf("snapshot events %+v", snaps)
	}
	var got api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &got)
	if got.Status.Status != api.StatusRunning {
		t.Fatalf("after a failed suspend: %+v", got.Status)
	}
	// The held call goes out now.
	for {
		f := r.expect2(api.FrameAck, api.FrameCall)
		if f.Type == api.FrameCall {
			if f.Seq != 3 {
				t.Fatalf("call %+v, want seq 3", f)
			}
			break
		}
	}
	r.send(api.Frame{Type: api.FrameResult, Seq: 3, OK: true, Value: json.RawMessage(`{}`)})
	if _, err := ts.srv.store.GetSnapshot(context.Background(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused snapshot was stored: %v", err)
	}
	if end := waitEnded(t, ts, id); end.Status.Status != api.StatusExit {
		t.Fatalf("ended %+v", end.Status)
	}
}

// TestAutoSuspendAndResumeOnMessage: an interactive llm session waiting for
// its user past limits.suspend_after_idle_s is suspended through the same
// path, and the user's message resumes it; the model's next turn comes on
// the new machine.
func TestAutoSuspendAndResumeOnMessage(t *testing.T) {
	t.Parallel()
	model := &fakeModel{answers: []string{"What next?", "Done with the changelog."}}
	ts := startServer(t, Options{LLM: model, SweepInterval: 20 * time.Millisecond})
	ts.outpost("idle")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"idle","prompt":"Do the task.","agent":{"kind":"llm","interactive":true},
		"limits":{"suspend_after_idle_s":1}}`, &s)
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, "m1")
	r, _ := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r.expect(api.FrameWelcome)
	r.untilSuspend()
	archive := []byte("an idle workspace")
	if code, raw := ts.snapshotRequest("PUT", id, claim.Status.ConnectToken, archive); code != 201 {
		t.Fatalf("PUT snapshot: %d %s", code, raw)
	}
	r.send(api.Frame{Type: api.FrameSuspended, Snapshot: &api.SnapshotInfo{Size: int64(len(archive)), SHA256: sha(archive)}})
	r.expect(api.FrameEnd)
	waitfor.True(t, "the session to be suspended", func() bool {
		ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
		return s.Status.Status == api.StatusSuspended
	})
	if !strings.Contains(s.Status.Reason, "suspend_after_idle_s") {
		t.Errorf("reason %q does not say why", s.Status.Reason)
	}
	r.close()
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/release", ts.admin, api.ClaimRequest{AcceptorID: "m1"}, nil)

	ts.mustDo(202, "POST", "/v1/sessions/"+id+"/messages", ts.admin, api.MessageRequest{Text: "Also the changelog."}, nil)
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
	if s.Status.Status != api.StatusResuming {
		t.Fatalf("after the message: %+v", s.Status)
	}
	if e := entry(t, ts, id); e.Status.Phase != api.PhasePending || e.Status.SessionStatus != api.QueueSessionPending || e.Spec.Kind != api.KindResume {
		t.Fatalf("entry after the message: %+v %+v", e.Spec, e.Status)
	}
	claim2 := ts.claimFor(id, "m2")
	r2, _ := dialGateway(t, ts.srv.gatewayURL, id, claim2.Status.ConnectToken)
	r2.send(api.Frame{Type: api.FrameHello, SessionID: id})
	if w := r2.expect(api.FrameWelcome); w.Snapshot == nil || w.Snapshot.SHA256 != sha(archive) {
		t.Fatalf("welcome snapshot %+v", w.Snapshot)
	}
	waitfor.True(t, "the model's turn on the user's message", func() bool { return len(model.requests()) >= 2 })
}

// suspendAfterFirstCall creates a script session of two steps on outpost,
// serves it with a fake remote of acceptor m1 and starts suspending it
// while call 1 runs: it returns once the remote got the suspend frame,
// with the claim's connect token and the suspend's answer to come (its
// status).
func suspendAfterFirstCall(t *testing.T, ts *testServer, outpost string) (id, token string, r *fakeRemote, done <-chan int) {
	t.Helper()
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"`+outpost+`","agent":{"kind":"script","steps":[{"tool":"list_dir"},{"tool":"list_dir"}]}}`, &s)
	id = s.Metadata.SessionID
	claim := ts.claimFor(id, "m1")
	r, _ = dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r.expect(api.FrameWelcome)
	r.expect(api.FrameCall)
	done = ts.suspendAsync(id)
	waitfor.True(t, "the suspend to pause the calls", func() bool { return ts.paused(id) })
	r.send(api.Frame{Type: api.FrameResult, Seq: 1, OK: true, Value: json.RawMessage(`{}`)})
	r.untilSuspend()
	return id, claim.Status.ConnectToken, r, done
}

// suspendLive creates a script session of two steps on outpost, serves it
// with a fake remote of acceptor m1 and suspends it after call 1, with
// archive as its snapshot. The remote is closed afterwards; the claim is
// not released.
func suspendLive(t *testing.T, ts *testServer, outpost string, archive []byte) string {
	t.Helper()
	id, token, r, done := suspendAfterFirstCall(t, ts, outpost)
	if code, raw := ts.snapshotRequest("PUT", id, token, archive); code != 201 {
		t.Fatalf("PUT snapshot: %d %s", code, raw)
	}
	r.send(api.Frame{Type: api.FrameSuspended, Snapshot: &api.SnapshotInfo{Size: int64(len(archive)), SHA256: sha(archive)}})
	if code := <-done; code != 200 {
		t.Fatalf("suspend: status %d", code)
	}
	r.close()
	return id
}

// TestSnapshotTTL: a session suspended longer than the snapshot TTL ends
// (exit, inactivity, saying why) and its snapshot goes; its claim, never
// released, lapses meanwhile without making it claimable.
func TestSnapshotTTL(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	ts := startServer(t, Options{Now: now, SnapshotTTL: time.Hour, SweepInterval: 20 * time.Millisecond})
	ts.outpost("ttl")
	id := suspendLive(t, ts, "ttl", []byte("kept for an hour"))

	// Once the connection is gone (its grace recorded), step past the
	// reconnect grace and the claim deadline: the claim lapses.
	waitfor.True(t, "the connection to go", func() bool { return ts.srv.hub.Get(id) == nil })
	offset.Store(int64(10 * time.Minute))
	waitfor.True(t, "the claim to lapse", func() bool {
		e := entry(t, ts, id)
		return e.Status.Phase == api.PhasePending
	})
	if e := entry(t, ts, id); e.Status.SessionStatus != api.QueueSessionSuspended {
		t.Fatalf("a lapsed suspended claim became claimable: %+v", e.Status)
	}
	var s api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
	if s.Status.Status != api.StatusSuspended {
		t.Fatalf("the lapse changed the suspended session: %+v", s.Status)
	}
	if _, err := ts.srv.store.GetSnapshot(context.Background(), id); err != nil {
		t.Fatalf("snapshot gone before its TTL: %v", err)
	}

	offset.Store(int64(2 * time.Hour))
	end := waitEnded(t, ts, id)
	if end.Status.Status != api.StatusExit || end.Status.StatusDetail != api.DetailInactivity || !strings.Contains(end.Status.Reason, "longer than the server keeps snapshots") {
		t.Fatalf("ended %+v", end.Status)
	}
	waitfor.True(t, "the snapshot to be deleted", func() bool {
		_, err := ts.srv.store.GetSnapshot(context.Background(), id)
		return errors.Is(err, store.ErrNotFound)
	})
}

// TestSuspendCommitFailureKeepsThePreviousSnapshot: a suspend whose
// commit fails (the session changed after the upload) leaves the session's
// previous snapshot its own, deletes the new upload's row, and says so on
// the transcript.
func TestSuspendCommitFailureKeepsThePreviousSnapshot(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("commit")
	id, token, r, done := suspendAfterFirstCall(t, ts, "commit")
	ctx := t.Context()
	prev := store.Snapshot{SessionID: id, BlobKey: id + "-prev", Size: 3, SHA256: sha([]byte("old")), CreatedAt: time.Now()}
	if _, err := ts.srv.store.PutSnapshot(ctx, prev); err != nil && !errors.Is(err, store.ErrNotFound) { // none replaced
		t.Fatal(err)
	}
	archive := []byte("new workspace")
	if code, raw := ts.snapshotRequest("PUT", id, token, archive); code != 201 {
		t.Fatalf("PUT snapshot: %d %s", code, raw)
	}
	// The session changes under the suspend: its commit must fail.
	if _, err := ts.srv.store.UpdateSession(ctx, id, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		sess.Status = api.StatusResuming
		return store.Mutation{Session: &sess}, nil
	}); err != nil {
		t.Fatal(err)
	}
	r.send(api.Frame{Type: api.FrameSuspended, Snapshot: &api.SnapshotInfo{Size: int64(len(archive)), SHA256: sha(archive)}})
	if code := <-done; code != 409 {
		t.Fatalf("suspend whose commit fails: status %d, want 409", code)
	}
	got, err := ts.srv.store.GetSnapshot(ctx, id)
	if err != nil || got.BlobKey != prev.BlobKey {
		t.Fatalf("snapshot after the failed commit: %+v, %v; want the previous one (%s)", got, err, prev.BlobKey)
	}
	var evs api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events?limit=500", ts.admin, nil, &evs)
	failed := 0
	for _, ev := range evs.Items {
		if ev.Type == api.EventSnapshot && ev.OK != nil && !*ev.OK {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d failed snapshot events on the transcript, want 1", failed)
	}
	r.close()
}

// TestSnapshotTTLSparesSessionsNotSuspended: past the snapshot TTL, the
// snapshot of a session that is not suspended (resuming, waiting for a
// machine to restore it; or running, its last checkpoint) stays: it goes
// when the session ends.
func TestSnapshotTTLSparesSessionsNotSuspended(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{SnapshotTTL: time.Hour})
	ts.outpost("spare")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"spare","agent":{"kind":"script","steps":[{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	ctx := t.Context()
	old := store.Snapshot{SessionID: id, BlobKey: id + "-old", Size: 3, SHA256: sha([]byte("old")), CreatedAt: time.Now().Add(-61 * time.Minute)}
	if _, err := ts.srv.store.PutSnapshot(ctx, old); err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	for _, status := range []string{api.StatusResuming, api.StatusRunning} {
		if _, err := ts.srv.store.UpdateSession(ctx, id, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
			sess.Status = status
			return store.Mutation{Session: &sess}, nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := ts.srv.suspendSweep().Expire(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := ts.srv.store.GetSnapshot(ctx, id); err != nil {
			t.Fatalf("%s session's snapshot past the TTL: %v, want it kept", status, err)
		}
	}
}

// TestSuspendRefusalAnswers: the state machine's refusals of a suspend and
// a resume reach the client as the same whole answers the handlers always
// gave: 409, code conflict, the sentence naming the session's status.
func TestSuspendRefusalAnswers(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("ref")
	id := ts.session("ref").Metadata.SessionID
	for _, tc := range []struct{ action, msg string }{
		{"suspend", "Session " + id + " is new: only a running session can be suspended."},
		{"resume", "Session " + id + " is new, not suspended: only a suspended session can be resumed."},
	} {
		resp, body := ts.raw("POST", "/v1/sessions/"+id+"/"+tc.action, ts.admin, "", "")
		want, err := json.Marshal(api.NewErrorResponse(api.CodeConflict, tc.msg))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusConflict || string(body) != string(want)+"\n" {
			t.Errorf("%s of a new session: %d %s\nwant 409 %s", tc.action, resp.StatusCode, body, want)
		}
	}
}

// TestSuspendWhileACallRunsAnswers: a suspend of a session whose call runs
// waits at most wait_s, then is withdrawn with a 409 that says so (the
// session goes on running; the progress says failed); asked to answer at
// once it answers 202 with the call it waits for and a Location; bad
// requests (a wait out of range, interrupting a script) get 400 and
// change nothing.
func TestSuspendWhileACallRunsAnswers(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("calls")
	id, _, _, rd := liveSession(t, ts, "calls", "m1")
	defer rd.stop()
	path := "/v1/sessions/" + id + "/suspend"

	var p api.SuspendProgress
	if ts.mustDo(200, "GET", path, ts.admin, nil, &p); p.State != api.SuspendNone {
		t.Errorf("progress before any suspend = %+v", p)
	}
	post := func(body string, want int) (*http.Response, []byte) {
		t.Helper()
		resp, raw := ts.raw("POST", path, ts.admin, "application/json", body)
		if resp.StatusCode != want {
			t.Fatalf("POST %s %s: %d %s, want %d", path, body, resp.StatusCode, raw, want)
		}
		return resp, raw
	}
	message := func(raw []byte) string {
		var e api.ErrorResponse
		_ = json.Unmarshal(raw, &e)
		return e.Error.Message
	}
	running := func() {
		t.Helper()
		var s api.Session
		if ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s); s.Status.Status != api.StatusRunning {
			t.Fatalf("the suspend changed the session: %+v", s.Status)
		}
	}
	for body, want := range map[string]string{
		`{"interrupt": true}`: "runs a script, whose steps cannot be interrupted",
		`{"wait_s": 601}`:     "wait_s 601 is out of range",
		`{"wait_s": -1}`:      "wait_s -1 is out of range",
		`{"wait": 5}`:         "unknown field",
	} {
		if _, raw := post(body, 400); !strings.Contains(message(raw), want) {
			t.Errorf("POST %s: %q, want %q", body, message(raw), want)
		}
	}
	running()

	if _, raw := post(`{"wait_s": 1}`, 409); !strings.Contains(message(raw), "still running after 1s: the suspend is withdrawn and the session goes on running") {
		t.Errorf("suspend with wait_s 1: %q", message(raw))
	}
	running()
	if ts.mustDo(200, "GET", path, ts.admin, nil, &p); p.State != api.SuspendFailed || !strings.Contains(p.Error, "withdrawn") {
		t.Errorf("progress after a withdrawn suspend = %+v", p)
	}

	resp, body := post(`{"wait_s": 1, "async": true}`, http.StatusAccepted)
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Location") != path || p.State != api.SuspendWaiting ||
		len(p.Calls) != 1 || p.Calls[0].Seq != 1 || p.Calls[0].Tool != api.ToolListDir || p.WaitS != 1 {
		t.Fatalf("async suspend = %d (Location %q) %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	waitfor.Within(t, 10*time.Second, "the async suspend to be withdrawn", func() bool {
		ts.mustDo(200, "GET", path, ts.admin, nil, &p)
		return p.State == api.SuspendFailed
	})
	running()
}
