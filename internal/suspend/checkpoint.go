package suspend

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// ErrCheckpointBusy skips a checkpoint: a call is in flight, a suspend or
// checkpoint is in progress, or the session moved on meanwhile.
var ErrCheckpointBusy = errors.New("the session is busy; the checkpoint waits for the next round")

// CheckpointKey is the blob key of a checkpoint taken by the claim of epoch
// after call seq.
func CheckpointKey(sessionID string, epoch, seq int64) string {
	return fmt.Sprintf("%s-%d-c%d", sessionID, epoch, seq)
}

// checkpointKeySeq matches the call sequence number in a checkpoint's key.
var checkpointKeySeq = regexp.MustCompile(`-c([0-9]+)$`)

// CheckpointSeq returns the call after which the snapshot sn was taken,
// when it is a checkpoint (not a suspend's snapshot).
func CheckpointSeq(sn store.Snapshot) (int64, bool) {
	m := checkpointKeySeq.FindStringSubmatch(sn.BlobKey)
	if m == nil {
		return 0, false
	}
	seq, err := strconv.ParseInt(m[1], 10, 64)
	return seq, err == nil
}

// CheckpointValue is the value of a checkpoint's snapshot event.
type CheckpointValue struct {
	api.SnapshotInfo
	// Checkpoint tells a checkpoint's snapshot event from a suspend's.
	Checkpoint bool `json:"checkpoint"`
	// AfterSeq is the last call whose result the server held when it was
	// taken.
	AfterSeq int64 `json:"after_seq"`
}

// CheckpointNote is the part of a resume event's reason for a workspace
// restored from the checkpoint from, taken after call seq, when the server
// holds results up to call lastSeq.
func CheckpointNote(info *api.SnapshotInfo, from store.Snapshot, seq, lastSeq int64) string {
	lost := "changes made to the workspace after it (by processes still running then) are lost"
	switch {
	case seq+1 == lastSeq:
		lost = fmt.Sprintf("the changes call %d made to the workspace are lost (its result above stands, its files do not): check the files before relying on them", lastSeq)
	case seq < lastSeq:
		lost = fmt.Sprintf("the changes calls %d to %d made to the workspace are lost (their results above stand, their files do not): check the files before relying on them", seq+1, lastSeq)
	}
	return fmt.Sprintf("The old machine ended without suspending: its workspace is restored there from the last checkpoint, taken at %s after call %d (%s, %d files), before the next call; %s. Processes and memory of the old machine are not restored.",
		from.CreatedAt.UTC().Format(time.RFC3339), seq, api.ByteSize(info.Size), info.Files, lost)
}
