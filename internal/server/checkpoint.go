package server

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/suspend"
)

// Periodic checkpoints (Options.SnapshotInterval, outpost server
// --snapshot-interval) are suspend.Checkpoints over the server's hub, store
// and blobs; the remote uploads a checkpoint exactly as a suspend's snapshot
// (putSnapshot). When the claim lapses, the session's next machine gets the
// checkpoint in its welcome (welcomeSnapshot) and its resume event says
// what was lost (resumeNote).

// checkpoints returns the checkpoint loop over the server's parts.
func (s *Server) checkpoints() *suspend.Checkpoints {
	return &suspend.Checkpoints{
		Ops: &s.suspends, Conns: s.hub, Store: s.store, Blobs: s.blobs, Log: s.log,
		Now:       func() time.Time { return s.now() },
		Interval:  s.opts.SnapshotInterval,
		Tick:      min(s.opts.SnapshotInterval, s.opts.SweepInterval),
		Committed: s.committed,
		Failed:    s.recordCheckpointFailure,
	}
}

// recordCheckpointFailure writes the first of a row of failed checkpoints on
// the transcript.
func (s *Server) recordCheckpointFailure(ctx context.Context, c *gateway.Conn, cause error) {
	msg := clientMessage(cause)
	ok := false
	value, _ := json.Marshal(suspend.CheckpointValue{SnapshotInfo: api.SnapshotInfo{Error: msg}, Checkpoint: true})
	ev := []api.Event{{Type: api.EventSnapshot, Time: s.now().UnixMilli(), AcceptorID: c.AcceptorID, OK: &ok, Error: msg, Value: value,
		Reason: fmt.Sprintf("The periodic checkpoint failed (it is tried again every %s): %s", s.opts.SnapshotInterval, msg)}}
	if err := s.store.AppendEvents(context.WithoutCancel(ctx), c.SessionID, ev); err != nil {
		s.log.Warn("record failed checkpoint", "session", c.SessionID, "err", err)
		return
	}
	s.topics.publish(c.SessionID, ev...)
}
