package suspend

import (
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// TestOpsOnePerSession: a session has one suspend or checkpoint in
// progress at most; it goes once finished, and only by its own Finish.
func TestOpsOnePerSession(t *testing.T) {
	t.Parallel()
	var o Ops
	op := o.Start("ses_1", 2, "ses_1-2")
	if op == nil || op.Epoch != 2 || op.Key != "ses_1-2" || op.Checkpoint {
		t.Fatalf("Start = %+v", op)
	}
	if again := o.StartCheckpoint("ses_1", 2, CheckpointKey("ses_1", 2, 5)); again != nil {
		t.Fatalf("a checkpoint started under a suspend: %+v", again)
	}
	if o.Get("ses_1") != op || o.Get("ses_2") != nil {
		t.Fatal("Get does not return the op in progress")
	}
	o.Finish("ses_1", &Op{})
	if o.Get("ses_1") != op {
		t.Fatal("another op's Finish ended the one in progress")
	}
	o.Finish("ses_1", op)
	if o.Get("ses_1") != nil {
		t.Fatal("the op is still in progress after its Finish")
	}
	if cp := o.StartCheckpoint("ses_1", 2, "k"); cp == nil || !cp.Checkpoint {
		t.Fatalf("StartCheckpoint after Finish = %+v", cp)
	}
}

// TestOpsDeliver: a suspended frame reaches the suspend of its claim, a
// checkpointed frame the checkpoint; a frame of another claim or kind is
// refused.
func TestOpsDeliver(t *testing.T) {
	t.Parallel()
	var o Ops
	suspended := api.Frame{Type: api.FrameSuspended, Snapshot: &api.SnapshotInfo{Size: 3}}
	if o.Deliver("ses_1", 1, suspended) {
		t.Fatal("a frame without a suspend in progress was taken")
	}
	op := o.Start("ses_1", 2, "ses_1-2")
	if o.Deliver("ses_1", 1, suspended) {
		t.Fatal("the frame of an older claim was taken")
	}
	if o.Deliver("ses_1", 2, api.Frame{Type: api.FrameCheckpointed}) {
		t.Fatal("a checkpointed frame was taken by a suspend")
	}
	if !o.Deliver("ses_1", 2, suspended) {
		t.Fatal("the suspend's own frame was refused")
	}
	// A second frame does not block the remote's connection.
	if !o.Deliver("ses_1", 2, suspended) {
		t.Fatal("a repeated frame was refused")
	}
	if f := <-op.suspended; f.Snapshot == nil || f.Snapshot.Size != 3 {
		t.Fatalf("the suspend got %+v", f)
	}
}

// TestOpsUnrestored: a claim whose remote could not restore is remembered
// until a newer claim of the session.
func TestOpsUnrestored(t *testing.T) {
	t.Parallel()
	var o Ops
	if why := o.UnrestoredWhy("ses_1", 1); why != "" {
		t.Fatalf("UnrestoredWhy of nothing = %q", why)
	}
	o.MarkUnrestored("ses_1", 2, "disk full")
	if why := o.UnrestoredWhy("ses_1", 2); why != "disk full" {
		t.Fatalf("UnrestoredWhy of the claim = %q", why)
	}
	if why := o.UnrestoredWhy("ses_1", 3); why != "" {
		t.Fatalf("UnrestoredWhy of a newer claim = %q", why)
	}
	if why := o.UnrestoredWhy("ses_1", 2); why != "" {
		t.Fatalf("the older claim's entry stayed after a newer claim: %q", why)
	}
}

// TestOpsAutoFailed: a failed automatic suspend is not tried again until
// the session changes.
func TestOpsAutoFailed(t *testing.T) {
	t.Parallel()
	var o Ops
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if o.AutoFailed("ses_1", at) {
		t.Fatal("AutoFailed before a failure")
	}
	o.MarkAutoFailed("ses_1", at)
	if !o.AutoFailed("ses_1", at) {
		t.Fatal("AutoFailed false while the session is unchanged")
	}
	if o.AutoFailed("ses_1", at.Add(time.Second)) || o.AutoFailed("ses_1", at) {
		t.Fatal("AutoFailed true after the session changed")
	}
}

// TestCheckpointKeySeq: a checkpoint's key names its call; a suspend's
// snapshot key names none.
func TestCheckpointKeySeq(t *testing.T) {
	t.Parallel()
	if seq, ok := CheckpointSeq(store.Snapshot{BlobKey: CheckpointKey("ses_1", 3, 17)}); !ok || seq != 17 {
		t.Fatalf("CheckpointSeq of a checkpoint = %d, %v", seq, ok)
	}
	if _, ok := CheckpointSeq(store.Snapshot{BlobKey: "ses_1-3"}); ok {
		t.Fatal("a suspend's snapshot reads as a checkpoint")
	}
}

// TestOpsInterrupted: a call a suspend stopped is told once, by session
// and call; the last failure of a session's suspend is kept until cleared.
func TestOpsInterrupted(t *testing.T) {
	t.Parallel()
	var o Ops
	if _, ok := o.TakeInterrupted("ses_1", 3); ok {
		t.Fatal("an unmarked call reads as interrupted")
	}
	o.MarkInterrupted("ses_1", 3, "Interrupted: call 3")
	o.MarkInterrupted("ses_1", 4, "Interrupted: call 4")
	if _, ok := o.TakeInterrupted("ses_2", 3); ok {
		t.Fatal("another session's call reads as interrupted")
	}
	if why, ok := o.TakeInterrupted("ses_1", 3); !ok || why != "Interrupted: call 3" {
		t.Fatalf("TakeInterrupted(3) = %q, %v", why, ok)
	}
	if _, ok := o.TakeInterrupted("ses_1", 3); ok {
		t.Fatal("an interrupted call was told twice")
	}
	if why, ok := o.TakeInterrupted("ses_1", 4); !ok || why != "Interrupted: call 4" {
		t.Fatalf("TakeInterrupted(4) = %q, %v", why, ok)
	}
	if len(o.interrupted) != 0 {
		t.Errorf("marks left behind: %v", o.interrupted)
	}

	if o.LastErr("ses_1") != nil {
		t.Fatal("a last error before any suspend")
	}
	o.setLastErr("ses_1", conflict("withdrawn"))
	if err := o.LastErr("ses_1"); err == nil || o.LastErr("ses_2") != nil {
		t.Fatalf("LastErr = %v", err)
	}
	o.setLastErr("ses_1", nil)
	if o.LastErr("ses_1") != nil {
		t.Fatal("the last error outlived its clearing")
	}
}
