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
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// suspendAnswer is the status and error envelope of a suspend.
type suspendAnswer struct {
	status int
	err    api.ErrorBody
}

// suspendAsyncBody posts a suspend and returns its answer on the channel.
func (ts *testServer) suspendAsyncBody(id string) <-chan suspendAnswer {
	done := make(chan suspendAnswer, 1)
	go func() {
		req, _ := http.NewRequest("POST", ts.url+"/v1/sessions/"+id+"/suspend", nil)
		req.Header.Set("Authorization", "Bearer "+ts.admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- suspendAnswer{}
			return
		}
		defer resp.Body.Close()
		var e api.ErrorResponse
		_ = json.NewDecoder(resp.Body).Decode(&e)
		done <- suspendAnswer{status: resp.StatusCode, err: e.Error}
	}()
	return done
}

// brokenBody yields some bytes and then the error a remote's archive writer
// meets on a file it cannot read.
type brokenBody struct {
	r   io.Reader
	err error
}

func (b *brokenBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, b.err
	}
	return n, err
}

// TestSuspendUnreadableFileBlamesTheRemote: a remote whose archive fails on
// a file it cannot read breaks its upload off and answers suspended with
// the error; the suspend answers 502 naming the remote and its reason, not
// 500, whichever of the two the server sees first, and the session goes on.
func TestSuspendUnreadableFileBlamesTheRemote(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("unread")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"unread","agent":{"kind":"script","steps":[{"tool":"list_dir"},{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, "m1")
	r, _ := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r.expect(api.FrameWelcome)
	r.expect(api.FrameCall)
	done := ts.suspendAsyncBody(id)
	waitfor.True(t, "the suspend to pause the calls", func() bool { return ts.paused(id) })
	r.send(api.Frame{Type: api.FrameResult, Seq: 1, OK: true, Value: json.RawMessage(`{}`)})
	r.untilSuspend()

	why := "snapshot /workspace: secret.txt: open /workspace/secret.txt: permission denied"
	req, _ := http.NewRequest("PUT", ts.url+api.SnapshotPath, &brokenBody{r: bytes.NewReader(bytes.Repeat([]byte("tar "), 50_000)), err: errors.New(why)})
	req.Header.Set("Authorization", "Bearer "+claim.Status.ConnectToken)
	req.Header.Set(api.HeaderSessionID, id)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the broken upload went through: %s", resp.Status)
	}
	// The server has seen the upload break before the remote's answer
	// comes: the order in which a 500 came out.
	waitfor.True(t, "the server to see the upload break", func() bool {
		op := ts.srv.suspends.Get(id)
		return op != nil && op.Uploaded() != nil
	})
	r.send(api.Frame{Type: api.FrameSuspended, Snapshot: &api.SnapshotInfo{Error: why}})
	var got suspendAnswer
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the suspend did not answer")
	}
	if got.status != http.StatusBadGateway || got.err.Code != api.CodeUnavailable ||
		!strings.Contains(got.err.Message, "remote") || !strings.Contains(got.err.Message, "permission denied") {
		t.Fatalf("suspend = %d %+v, want 502 naming the remote and its reason", got.status, got.err)
	}
	for r.expect2(api.FrameAck, api.FrameCall).Type != api.FrameCall {
	}
	var sess api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &sess)
	if sess.Status.Status != api.StatusRunning {
		t.Fatalf("after the failed suspend: %+v, want running", sess.Status)
	}
	if _, err := ts.srv.store.GetSnapshot(t.Context(), id); err == nil {
		t.Error("a snapshot was stored")
	}
	r.close()
}

// TestNoSuspendOverGoodSnapshotAfterFailedRestore: once the remote of a
// resumed session reports that it could not restore the snapshot, the
// server takes no snapshot of that machine's workspace: a suspend is
// refused with 409 saying why, no checkpoint is due, and the good snapshot
// stays the session's.
func TestNoSuspendOverGoodSnapshotAfterFailedRestore(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("unres")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"unres","agent":{"kind":"script","steps":[{"tool":"list_dir"},{"tool":"list_dir"},{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, "m1")
	r, _ := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r.expect(api.FrameWelcome)
	r.expect(api.FrameCall)
	done := ts.suspendAsync(id)
	waitfor.True(t, "the suspend to pause the calls", func() bool { return ts.paused(id) })
	r.send(api.Frame{Type: api.FrameResult, Seq: 1, OK: true, Value: json.RawMessage(`{}`)})
	r.untilSuspend()
	good := []byte("the good workspace")
	if code, raw := ts.snapshotRequest("PUT", id, claim.Status.ConnectToken, good); code != 201 {
		t.Fatalf("PUT snapshot: %d %s", code, raw)
	}
	r.send(api.Frame{Type: api.FrameSuspended, Snapshot: &api.SnapshotInfo{Size: int64(len(good)), SHA256: sha(good), Files: 1, Bytes: 100}})
	if code := <-done; code != 200 {
		t.Fatalf("suspend: status %d", code)
	}
	r.close()
	ts.mustDo(200, "POST", "/v1/queue/"+id+"/release", ts.admin, api.ClaimRequest{AcceptorID: "m1"}, nil)
	before, err := ts.srv.store.GetSnapshot(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}

	// Resumed on m2, whose restore fails.
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/resume", ts.admin, nil, nil)
	claim2 := ts.claimFor(id, "m2")
	r2, _ := dialGateway(t, ts.srv.gatewayURL, id, claim2.Status.ConnectToken)
	r2.send(api.Frame{Type: api.FrameHello, SessionID: id})
	if w := r2.expect(api.FrameWelcome); w.Snapshot == nil || w.Snapshot.SHA256 != sha(good) {
		t.Fatalf("welcome's snapshot %+v", w.Snapshot)
	}
	r2.send(api.Frame{Type: api.FrameRestored, SnapshotRestored: &api.SnapshotInfo{Size: before.Size, SHA256: before.SHA256,
		Error: "restore snapshot into /workspace: read archive: unexpected EOF; the workspace was left as it was"}})
	if f := r2.expect(api.FrameCall); f.Seq != 2 {
		t.Fatalf("call after the resume %+v, want seq 2", f)
	}
	waitfor.True(t, "the failed restore event", func() bool { return len(eventsOf(t, ts, id, api.EventRestore)) > 0 })
	r2.send(api.Frame{Type: api.FrameResult, Seq: 2, OK: true, Value: json.RawMessage(`{}`)})
	if f := r2.expect2(api.FrameAck, api.FrameCall); f.Type == api.FrameAck {
		r2.expect(api.FrameCall) // call 3, in flight from now on
	}

	c := ts.srv.hub.Get(id)
	if c == nil {
		t.Fatal("no connection for the resumed session")
	}
	if _, due, err := ts.srv.checkpoints().Due(t.Context(), c, time.Now().Add(time.Hour)); err != nil || due {
		t.Errorf("checkpoint due = %v (%v) on a machine whose restore failed", due, err)
	}
	answer := ts.suspendAsyncBody(id)
	select {
	case got := <-answer:
		if got.status != http.StatusConflict || !strings.Contains(got.err.Message, "could not restore") || !strings.Contains(got.err.Message, "unexpected EOF") {
			t.Fatalf("suspend after the failed restore = %d %+v, want 409 saying why", got.status, got.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the suspend waits to snapshot a workspace whose restore failed, instead of refusing")
	}
	after, err := ts.srv.store.GetSnapshot(t.Context(), id)
	if err != nil || after != before {
		t.Fatalf("snapshot after the refused suspend: %+v (%v), want %+v", after, err, before)
	}
	var sess api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &sess)
	if sess.Status.Status != api.StatusRunning {
		t.Fatalf("after the refused suspend: %+v, want running", sess.Status)
	}
	r2.close()
}
