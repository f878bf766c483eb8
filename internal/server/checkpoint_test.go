package server

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/suspend"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// checkpointFrom reads frames up to a checkpoint, uploads archive as the
// remote of token does and answers checkpointed. A call before it fails
// the test: no call may be in flight under a checkpoint.
func (r *fakeRemote) checkpointFrom(ts *testServer, id, token string, archive []byte) {
	r.t.Helper()
	for {
		f, err := r.recv()
		if err != nil {
			r.t.Fatalf("waiting for a checkpoint: %v", err)
		}
		if f.Type == api.FrameCall {
			r.t.Fatalf("call %d sent before the checkpoint", f.Seq)
		}
		if f.Type == api.FrameCheckpoint {
			break
		}
	}
	if code, raw := ts.snapshotRequest("PUT", id, token, archive); code != 201 {
		r.t.Fatalf("PUT checkpoint: %d %s", code, raw)
	}
	r.send(api.Frame{Type: api.FrameCheckpointed, Snapshot: &api.SnapshotInfo{Size: int64(len(archive)), SHA256: sha(archive), Files: 2}})
}

// nextCall reads frames up to the next call, whose seq must be seq.
func (r *fakeRemote) nextCall(seq int64) {
	r.t.Helper()
	for {
		f := r.expect2(api.FrameAck, api.FrameCall)
		if f.Type == api.FrameCall {
			if f.Seq != seq {
				r.t.Fatalf("call %d, want %d", f.Seq, seq)
			}
			return
		}
	}
}

// nextCallCheckpointing reads frames up to the next call, whose seq must
// be seq, answering a checkpoint asked for meanwhile with archive (the
// checkpoint loop may ask one before the call is sent).
func (r *fakeRemote) nextCallCheckpointing(ts *testServer, id, token string, archive []byte, seq int64) {
	r.t.Helper()
	for {
		f, err := r.recv()
		if err != nil {
			r.t.Fatalf("waiting for call %d: %v", seq, err)
		}
		switch f.Type {
		case api.FrameCheckpoint:
			if code, raw := ts.snapshotRequest("PUT", id, token, archive); code != 201 {
				r.t.Fatalf("PUT checkpoint: %d %s", code, raw)
			}
			r.send(api.Frame{Type: api.FrameCheckpointed, Snapshot: &api.SnapshotInfo{Size: int64(len(archive)), SHA256: sha(archive), Files: 2}})
		case api.FrameCall:
			if f.Seq != seq {
				r.t.Fatalf("call %d, want %d", f.Seq, seq)
			}
			return
		}
	}
}

// checkpointsOf returns the checkpoints' snapshot events that succeeded.
func checkpointsOf(t *testing.T, ts *testServer, id string) []suspend.CheckpointValue {
	t.Helper()
	var out []suspend.CheckpointValue
	for _, ev := range eventsOf(t, ts, id, api.EventSnapshot) {
		var v suspend.CheckpointValue
		if err := json.Unmarshal(ev.Value, &v); err != nil {
			t.Fatalf("snapshot event value %s: %v", ev.Value, err)
		}
		if v.Checkpoint && ev.OK != nil && *ev.OK {
			out = append(out, v)
		}
	}
	return out
}

// TestCheckpointRestoredOnLapse: with --snapshot-interval the server asks a
// running session's remote for a checkpoint only when no call is in flight
// and a call ran since the last one; a new checkpoint replaces the old (row
// and blob); when the machine dies without suspending and the claim lapses,
// the next machine's welcome carries the latest checkpoint and the resume
// event says which call it was taken after and that later changes are lost.
func TestCheckpointRestoredOnLapse(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{SnapshotInterval: time.Millisecond, ClaimTTL: 2 * time.Second, ReconnectGrace: 300 * time.Millisecond, SweepInterval: 20 * time.Millisecond})
	ts.outpost("ckpt")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"ckpt","agent":{"kind":"script","steps":[{"tool":"list_dir"},{"tool":"list_dir"},{"tool":"list_dir"},{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, "m1")
	token := claim.Status.ConnectToken
	r, _ := dialGateway(t, ts.srv.gatewayURL, id, token)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r.expect(api.FrameWelcome)
	r.expect(api.FrameCall)
	c := ts.srv.hub.Get(id)
	ctx := context.Background()

	// Call 1 in flight: no checkpoint, and the calls are not held.
	if err := ts.srv.checkpoints().Take(ctx, c, 0); !errors.Is(err, suspend.ErrCheckpointBusy) {
		t.Fatalf("checkpoint with a call in flight: %v, want busy", err)
	}
	if ts.paused(id) {
		t.Fatal("a refused checkpoint left the calls held")
	}

	// Call 2 waits (as if the agent took its time) while call 1's result
	// comes: the session is idle, the checkpoint comes.
	c.Gate.Pause()
	r.send(api.Frame{Type: api.FrameResult, Seq: 1, OK: true, Value: json.RawMessage(`{}`)})
	archive1 := []byte("the workspace after call 1")
	r.checkpointFrom(ts, id, token, archive1)
	r.nextCall(2) // the checkpoint let the calls go again
	var cps []suspend.CheckpointValue
	waitfor.True(t, "the first checkpoint's event", func() bool { cps = checkpointsOf(t, ts, id); return len(cps) == 1 })
	if cps[0].AfterSeq != 1 || cps[0].SHA256 != sha(archive1) {
		t.Fatalf("checkpoint event %+v", cps[0])
	}
	sn, err := ts.srv.store.GetSnapshot(ctx, id)
	if err != nil || sn.BlobKey != suspend.CheckpointKey(id, 1, 1) || sn.SHA256 != sha(archive1) {
		t.Fatalf("snapshot row %+v (%v)", sn, err)
	}
	blobs := filepath.Join(ts.srv.opts.DataDir, "snapshots")
	if _, err := os.Stat(filepath.Join(blobs, sn.BlobKey)); err != nil {
		t.Fatalf("checkpoint blob: %v", err)
	}
	// Call 2 in flight: still no checkpoint taken by hand either.
	if err := ts.srv.checkpoints().Take(ctx, c, 1); !errors.Is(err, suspend.ErrCheckpointBusy) {
		t.Fatalf("checkpoint with call 2 in flight: %v, want busy", err)
	}

	// After call 2, a second checkpoint replaces the first.
	c.Gate.Pause()
	r.send(api.Frame{Type: api.FrameResult, Seq: 2, OK: true, Value: json.RawMessage(`{}`)})
	archive2 := []byte("the workspace after call 2, larger")
	r.checkpointFrom(ts, id, token, archive2)
	r.nextCall(3)
	waitfor.True(t, "the second checkpoint's event", func() bool { cps = checkpointsOf(t, ts, id); return len(cps) == 2 })
	if cps[1].AfterSeq != 2 {
		t.Fatalf("second checkpoint event %+v", cps[1])
	}
	if sn, err = ts.srv.store.GetSnapshot(ctx, id); err != nil || sn.BlobKey != suspend.CheckpointKey(id, 1, 2) || sn.SHA256 != sha(archive2) {
		t.Fatalf("snapshot row after the second checkpoint %+v (%v)", sn, err)
	}
	if _, err := os.Stat(filepath.Join(blobs, suspend.CheckpointKey(id, 1, 1))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the replaced checkpoint's blob is still there: %v", err)
	}

	// Call 3's result comes, call 4 is in flight (or a checkpoint the
	// machine does not answer), and the machine dies.
	r.send(api.Frame{Type: api.FrameResult, Seq: 3, OK: true, Value: json.RawMessage(`{}`)})
	for {
		f, err := r.recv()
		if err != nil {
			t.Fatalf("waiting for call 4: %v", err)
		}
		if f.Type == api.FrameCall || f.Type == api.FrameCheckpoint {
			break
		}
	}
	r.close()
	waitLapsed(t, ts, id)
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
	if s.Status.Status != api.StatusResuming {
		t.Fatalf("after the lapse: %+v", s.Status)
	}

	claim2 := ts.claimFor(id, "m2")
	r2, _ := dialGateway(t, ts.srv.gatewayURL, id, claim2.Status.ConnectToken)
	r2.send(api.Frame{Type: api.FrameHello, SessionID: id})
	w := r2.expect(api.FrameWelcome)
	if w.Snapshot == nil || w.Snapshot.SHA256 != sha(archive2) || w.Snapshot.Size != int64(len(archive2)) {
		t.Fatalf("the welcome after the lapse names %+v, want the second checkpoint", w.Snapshot)
	}
	if code, body := ts.snapshotRequest("GET", id, claim2.Status.ConnectToken, nil); code != 200 || string(body) != string(archive2) {
		t.Fatalf("GET snapshot: %d %q", code, body)
	}
	resumes := eventsOf(t, ts, id, api.EventResume)
	if len(resumes) != 1 {
		t.Fatalf("resume events %+v", resumes)
	}
	for _, want := range []string{"without suspending", "last checkpoint", sn.CreatedAt.UTC().Format(time.RFC3339), "after call 2", "call 3 made to the workspace are lost"} {
		if !strings.Contains(resumes[0].Reason, want) {
			t.Errorf("resume event %q does not say %q", resumes[0].Reason, want)
		}
	}
	r2.send(api.Frame{Type: api.FrameRestored, SnapshotRestored: &api.SnapshotInfo{Size: int64(len(archive2)), SHA256: sha(archive2)}})
	// The restored workspace is the one after call 2 while the server
	// holds call 3's result: a checkpoint may be asked before call 4.
	r2.nextCallCheckpointing(ts, id, claim2.Status.ConnectToken, archive2, 4)
	r2.send(api.Frame{Type: api.FrameResult, Seq: 4, OK: true, Value: json.RawMessage(`{}`)})
	if end := waitEnded(t, ts, id); end.Status.Status != api.StatusExit {
		t.Fatalf("ended %+v", end.Status)
	}
	waitfor.True(t, "the checkpoint to be deleted", func() bool {
		_, err := ts.srv.store.GetSnapshot(ctx, id)
		return errors.Is(err, store.ErrNotFound)
	})
}

// TestCheckpointNote: the resume note names the checkpoint's time and call
// and what is lost.
func TestCheckpointNote(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	from := store.Snapshot{BlobKey: suspend.CheckpointKey("ses_1", 3, 7), CreatedAt: at}
	info := &api.SnapshotInfo{Size: 2048, Files: 4}
	cases := []struct {
		last int64
		want string
	}{
		{7, "changes made to the workspace after it"},
		{8, "the changes call 8 made to the workspace are lost"},
		{10, "the changes calls 8 to 10 made to the workspace are lost"},
	}
	for _, tc := range cases {
		got := resumeNote(nil, info, from, tc.last)
		if !strings.Contains(got, "2026-12-01T12:00:00Z after call 7") || !strings.Contains(got, tc.want) {
			t.Errorf("note at last seq %d = %q, want %q", tc.last, got, tc.want)
		}
	}
	// A suspend's snapshot keeps its note.
	if got := resumeNote(nil, info, store.Snapshot{BlobKey: "ses_1-3"}, 9); strings.Contains(got, "checkpoint") {
		t.Errorf("a suspend snapshot's note = %q", got)
	}
}
