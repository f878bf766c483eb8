package remote

import (
	"context"
	"fmt"

	"github.com/outpost-sh/outpost/api"
)

// A checkpoint (protocol version 3, FrameCheckpoint) is a suspend that does
// not stop: the remote uploads a snapshot of its workspace exactly as for a
// suspend, answers checkpointed and keeps serving. The server sends it
// periodically (outpost server --snapshot-interval), only while no call is
// in flight, so that a machine that dies without suspending loses only what
// changed since. A checkpoint that fails changes nothing here: the answer
// carries the error.

// handleCheckpoint starts a checkpoint in the background unless a
// checkpoint or a suspend is in progress.
func (s *session) handleCheckpoint() {
	if s.version < api.SnapshotsSince {
		s.log.Warn("ignoring a checkpoint frame: this remote speaks a protocol version without snapshots", "protocol_version", s.version)
		return
	}
	s.mu.Lock()
	if s.suspending || s.suspended != nil || s.checkpointing {
		s.mu.Unlock()
		return
	}
	s.checkpointing = true
	ctx := s.callCtx
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.checkpoint(ctx)
	}()
}

// checkpoint uploads a snapshot and queues the answer; calls go on.
func (s *session) checkpoint(ctx context.Context) {
	s.log.Info("checkpoint: snapshotting the workspace")
	s.waitRestored(ctx)
	info, err := s.snapshotWorkspace(ctx)
	s.mu.Lock()
	s.checkpointing = false
	s.mu.Unlock()
	if ctx.Err() != nil {
		return // Serve is stopping: nobody to answer
	}
	if err != nil {
		s.log.Warn("checkpoint failed; the session goes on", "err", err)
	}
	s.out.pushFrame(api.Frame{Type: api.FrameCheckpointed, Snapshot: &info})
}

// snapshotWorkspace uploads a snapshot of the workspace: the common part
// of a suspend and a checkpoint. On error info.Error says why, with the
// session's secrets masked.
func (s *session) snapshotWorkspace(ctx context.Context) (api.SnapshotInfo, error) {
	s.mu.Lock()
	why := s.unrestoredReasonLocked()
	s.mu.Unlock()
	if why != "" {
		err := fmt.Errorf("no snapshot was taken: %s, so the workspace is not the session's, and a snapshot of it would replace the one the server keeps", why)
		s.mu.Lock()
		info := api.SnapshotInfo{Error: s.secretSet.String(err.Error())}
		s.mu.Unlock()
		return info, err
	}
	info, err := s.uploadSnapshot(ctx)
	if err != nil {
		s.mu.Lock()
		info.Error = s.secretSet.String(err.Error())
		s.mu.Unlock()
		return info, err
	}
	s.log.Info("workspace snapshot uploaded", "size", info.Size, "files", info.Files, "bytes", info.Bytes, "skipped", info.Skipped, "duration_ms", info.DurationMS)
	return info, nil
}
