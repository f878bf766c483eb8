package remote

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/snapshot"
)

// TestServeCheckpointKeepsServing: on checkpoint the remote uploads an
// archive of its workspace, as on suspend, answers checkpointed with its
// size and checksum, and goes on running calls; a later checkpoint uploads
// the workspace as it is then.
func TestServeCheckpointKeepsServing(t *testing.T) {
	store := &snapshotStore{t: t}
	g := newSnapshotGateway(t, store)
	work := t.TempDir()
	errc, _ := startServe(t, g, t.TempDir(), work)
	gc := g.accept(t)
	gc.handshake(t, nil, nil)
	gc.send(t, execCall(1, "echo one > one.txt"))
	if res := gc.next(t, api.FrameResult); !res.OK {
		t.Fatalf("result = %+v", res)
	}
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 1})

	gc.send(t, api.Frame{Type: api.FrameCheckpoint})
	f := gc.next(t, api.FrameCheckpointed)
	archive, puts := store.stored()
	if f.Snapshot == nil || f.Snapshot.Error != "" || puts != 1 || f.Snapshot.SHA256 != sha(archive) || f.Snapshot.Size != int64(len(archive)) {
		t.Fatalf("checkpointed = %+v, %d uploads of %d bytes", f.Snapshot, puts, len(archive))
	}
	restored := func(archive []byte, info api.SnapshotInfo) string {
		t.Helper()
		dst := t.TempDir()
		if _, err := snapshot.Restore(context.Background(), bytes.NewReader(archive), dst, info, snapshot.Options{}); err != nil {
			t.Fatal(err)
		}
		return dst
	}
	dst := restored(archive, *f.Snapshot)
	if b, err := os.ReadFile(filepath.Join(dst, "one.txt")); err != nil || string(b) != "one\n" {
		t.Errorf("one.txt in the checkpoint = %q, %v", b, err)
	}

	// The session goes on: the next call runs.
	gc.send(t, execCall(2, "echo two > two.txt"))
	if res := gc.next(t, api.FrameResult); res.Seq != 2 || !res.OK {
		t.Fatalf("call after a checkpoint = %+v", res)
	}
	gc.send(t, api.Frame{Type: api.FrameAck, Seq: 2})
	if _, err := os.Stat(filepath.Join(work, "two.txt")); err != nil {
		t.Fatalf("the call after the checkpoint did not run: %v", err)
	}

	gc.send(t, api.Frame{Type: api.FrameCheckpoint})
	f = gc.next(t, api.FrameCheckpointed)
	archive, puts = store.stored()
	if f.Snapshot == nil || f.Snapshot.Error != "" || puts != 2 || f.Snapshot.SHA256 != sha(archive) {
		t.Fatalf("second checkpointed = %+v, %d uploads", f.Snapshot, puts)
	}
	if _, err := os.Stat(filepath.Join(restored(archive, *f.Snapshot), "two.txt")); err != nil {
		t.Errorf("the second checkpoint lacks two.txt: %v", err)
	}

	// A suspend still works after checkpoints.
	gc.send(t, api.Frame{Type: api.FrameSuspend})
	if s := gc.next(t, api.FrameSuspended); s.Snapshot == nil || s.Snapshot.Error != "" {
		t.Fatalf("suspended = %+v", s.Snapshot)
	}
	gc.send(t, api.Frame{Type: api.FrameEnd})
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}
}
