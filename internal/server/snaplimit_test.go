package server

import (
	"bytes"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// suspendOverLimit serves a two-step script session of outpost with a fake
// remote and suspends it after call 1 with archive as its snapshot, which
// the server must refuse (413). It returns the session and the PUT's
// answer, once the session has gone on with call 2.
func suspendOverLimit(t *testing.T, ts *testServer, outpost string, archive []byte) (string, []byte) {
	t.Helper()
	id, token, r, done := suspendAfterFirstCall(t, ts, outpost)
	code, raw := ts.snapshotRequest("PUT", id, token, archive)
	if code != 413 {
		t.Fatalf("PUT over the limit: %d %s, want 413", code, raw)
	}
	r.send(api.Frame{Type: api.FrameSuspended, Snapshot: &api.SnapshotInfo{Error: "the server refused the upload (413)"}})
	if code := <-done; code != 413 {
		t.Fatalf("suspend over the limit: status %d, want 413", code)
	}
	for r.expect2(api.FrameAck, api.FrameCall).Type != api.FrameCall {
	}
	var got api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &got)
	if got.Status.Status != api.StatusRunning {
		t.Fatalf("after a suspend over the limit: %+v, want running", got.Status)
	}
	r.close()
	return id, raw
}

// TestOutpostSnapshotLimit: an outpost's max_snapshot_bytes is set on
// create and PATCH, bounded by the server's limit, and refuses a larger
// snapshot with 413 naming the outpost's limit; the session goes on. Set
// back to 0 the server's limit applies: the same snapshot is stored.
func TestOutpostSnapshotLimit(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{MaxSnapshotBytes: 1000})
	var o api.Outpost
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "small", MaxSnapshotBytes: 100}, &o)
	if o.Spec.MaxSnapshotBytes != 100 {
		t.Fatalf("created spec %+v, want max_snapshot_bytes 100", o.Spec)
	}
	ts.mustDo(200, "GET", "/v1/outposts/small", ts.admin, nil, &o)
	if o.Spec.MaxSnapshotBytes != 100 {
		t.Fatalf("got spec %+v, want max_snapshot_bytes 100", o.Spec)
	}
	ts.mustDo(400, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "huge", MaxSnapshotBytes: 1001}, nil)
	ts.mustDo(400, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "neg", MaxSnapshotBytes: -1}, nil)
	ts.mustDo(400, "PATCH", "/v1/outposts/small", ts.admin, `{"max_snapshot_bytes":1001}`, nil)

	id, raw := suspendOverLimit(t, ts, "small", bytes.Repeat([]byte("x"), 150))
	if !strings.Contains(string(raw), "outpost small's limit of 100 B") || !strings.Contains(string(raw), "max_snapshot_bytes") {
		t.Errorf("PUT over the outpost's limit answered %s, want its limit (100 B) named as outpost small's", raw)
	}
	snaps := eventsOf(t, ts, id, api.EventSnapshot)
	if len(snaps) != 1 || !strings.Contains(snaps[0].Error, "outpost small's limit") {
		t.Errorf("snapshot events %+v, want the outpost's limit named", snaps)
	}
	if v, _ := sample(t, ts, "outpost_suspends_total", `outcome="too_large",outpost="small"`); v != 1 {
		t.Errorf("outpost_suspends_total{outcome=too_large} = %v, want 1", v)
	}

	// A PATCH of another field keeps the limit; 0 gives the server's.
	ts.mustDo(200, "PATCH", "/v1/outposts/small", ts.admin, `{"max_running":2}`, &o)
	if o.Spec.MaxSnapshotBytes != 100 || o.Spec.MaxRunning != 2 {
		t.Fatalf("after PATCH max_running: %+v", o.Spec)
	}
	ts.mustDo(200, "PATCH", "/v1/outposts/small", ts.admin, `{"max_snapshot_bytes":0}`, &o)
	if o.Spec.MaxSnapshotBytes != 0 {
		t.Fatalf("after PATCH max_snapshot_bytes 0: %+v", o.Spec)
	}
	suspendLive(t, ts, "small", bytes.Repeat([]byte("y"), 150))
	if v, _ := sample(t, ts, "outpost_snapshot_bytes", `outpost="small"`); v != 150 {
		t.Errorf("outpost_snapshot_bytes = %v, want 150", v)
	}
}

// TestOutpostSnapshotLimitAboveServer: an outpost's limit stored above the
// server's (the server restarted with a smaller one) gives way to the
// server's, which the refusal then names.
func TestOutpostSnapshotLimitAboveServer(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{MaxSnapshotBytes: 100})
	o := ts.outpost("wide")
	if err := ts.srv.store.SetOutpostLimits(t.Context(), o.Metadata.OutpostID, store.OutpostLimits{MaxSnapshotBytes: 500}); err != nil {
		t.Fatal(err)
	}
	_, raw := suspendOverLimit(t, ts, "wide", bytes.Repeat([]byte("x"), 150))
	if !strings.Contains(string(raw), "this server's limit of 100 B") || !strings.Contains(string(raw), "--max-snapshot-bytes") {
		t.Errorf("PUT over the server's limit answered %s, want the server's limit (100 B) named", raw)
	}
}
