package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/gateway"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/loop"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/suspend"
)

// Periodic checkpoints (Options.SnapshotInterval, outpost server
// --snapshot-interval) make a machine that dies without suspending lose
// less. Every interval, a running session whose remote speaks protocol
// version 3 or later, that has run a call since its latest snapshot and has
// no call in flight, is asked for a checkpoint: the server holds calls back
// (gateway.CallGate) as for a suspend, sends checkpoint, the remote uploads its
// snapshot exactly as for a suspend (putSnapshot) and answers checkpointed,
// and keeps serving. The server stores it as the session's one snapshot
// (store.Snapshot; its blob key names the call after which it was taken),
// deletes the one it replaced and records a snapshot event (value
// checkpointValue). When the claim lapses, the session's next machine gets
// that snapshot in its welcome (welcomeSnapshot) and its resume event says
// what was lost (resumeNote). A checkpoint that fails changes nothing; the
// first of a row is on the transcript, and it is tried again an interval
// later.

// checkpointer is the state of the checkpoint loop.
type checkpointer struct {
	mu sync.Mutex // guards failed
	// failed holds, by session, when its latest checkpoint failed: it is
	// not tried again for an interval.
	failed map[string]time.Time
}

// checkpointSessions asks for checkpoints until ctx ends; a no-op unless
// Options.SnapshotInterval is set.
func (s *Server) checkpointSessions(ctx context.Context) {
	interval := s.opts.SnapshotInterval
	if interval <= 0 {
		return
	}
	tick := max(min(interval, s.opts.SweepInterval), 10*time.Millisecond)
	cp := &checkpointer{failed: map[string]time.Time{}}
	var wg sync.WaitGroup
	defer wg.Wait()
	loop.Every(ctx, tick, func(ctx context.Context) { s.checkpointRound(ctx, cp, &wg) })
}

// checkpointRound starts the checkpoints that are due.
func (s *Server) checkpointRound(ctx context.Context, cp *checkpointer, wg *sync.WaitGroup) {
	now := s.now()
	for _, c := range s.hub.List() {
		if c.Version < api.SnapshotsSince || s.suspends.Get(c.SessionID) != nil {
			continue
		}
		cp.mu.Lock()
		failedAt, failed := cp.failed[c.SessionID]
		cp.mu.Unlock()
		if failed && now.Sub(failedAt) < s.opts.SnapshotInterval {
			continue
		}
		seq, due, err := s.checkpointDue(ctx, c, now)
		if err != nil {
			s.log.Warn("checkpoint", "session", c.SessionID, "err", err)
			continue
		}
		if !due {
			continue
		}
		wg.Go(func() {
			err := s.checkpoint(ctx, c, seq)
			if errors.Is(err, suspend.ErrCheckpointBusy) || ctx.Err() != nil {
				return
			}
			cp.mu.Lock()
			defer cp.mu.Unlock()
			if err == nil {
				delete(cp.failed, c.SessionID)
				return
			}
			if _, again := cp.failed[c.SessionID]; !again {
				s.recordCheckpointFailure(ctx, c, err)
			}
			s.log.Warn("checkpoint failed; the session goes on", "session", c.SessionID, "err", err)
			cp.failed[c.SessionID] = s.now()
		})
	}
}

// checkpointDue reports whether the session of c is due a checkpoint and
// the call after which it would be taken: it runs, has run a call since
// its latest snapshot, and that snapshot is older than the interval; and
// the remote of c did not fail to restore the snapshot.
func (s *Server) checkpointDue(ctx context.Context, c *gateway.Conn, now time.Time) (int64, bool, error) {
	if s.suspends.UnrestoredWhy(c.SessionID, c.Epoch) != "" {
		return 0, false, nil // its workspace is not the session's: keep the snapshot
	}
	sess, err := s.store.GetSession(ctx, c.SessionID)
	if err != nil {
		return 0, false, fmt.Errorf("get session: %w", err)
	}
	if sess.Status != api.StatusRunning || sess.LastSeq == 0 {
		return 0, false, nil
	}
	sn, err := s.store.GetSnapshot(ctx, c.SessionID)
	if errors.Is(err, store.ErrNotFound) {
		return sess.LastSeq, true, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("get snapshot: %w", err)
	}
	if seq, ok := suspend.CheckpointSeq(sn); ok && seq >= sess.LastSeq {
		return 0, false, nil // nothing ran since
	}
	return sess.LastSeq, now.Sub(sn.CreatedAt) >= s.opts.SnapshotInterval, nil
}

// checkpoint takes a checkpoint of the session of c after call seq, the
// last whose result the server holds: suspend.ErrCheckpointBusy when a call is in
// flight, a suspend or checkpoint is in progress or another call ended
// meanwhile.
func (s *Server) checkpoint(ctx context.Context, c *gateway.Conn, seq int64) error {
	op := s.suspends.StartCheckpoint(c.SessionID, c.Epoch, suspend.CheckpointKey(c.SessionID, c.Epoch, seq))
	if op == nil {
		return suspend.ErrCheckpointBusy
	}
	defer s.suspends.Finish(c.SessionID, op)
	if !c.Gate.PauseIfIdle() {
		return suspend.ErrCheckpointBusy
	}
	defer c.Gate.Unpause()
	if sess, err := s.store.GetSession(ctx, c.SessionID); err != nil || sess.LastSeq != seq || sess.Status != api.StatusRunning {
		return suspend.ErrCheckpointBusy
	}
	start := s.now()
	info, err := suspend.Ask(ctx, c, op, api.FrameCheckpoint)
	if err != nil {
		_ = s.blobs.Delete(context.WithoutCancel(ctx), op.Key)
		return err
	}
	info.DurationMS = max(info.DurationMS, s.now().Sub(start).Milliseconds())
	return s.commitCheckpoint(ctx, c, op, info, seq)
}

// commitCheckpoint stores the checkpoint as the session's snapshot, records
// its event and deletes the snapshot it replaced. When the session changed
// meanwhile (it ended, its claim moved) the replaced snapshot is put back.
func (s *Server) commitCheckpoint(ctx context.Context, c *gateway.Conn, op *suspend.Op, info api.SnapshotInfo, seq int64) error {
	ctx = context.WithoutCancel(ctx) // a half-stored checkpoint helps nobody
	now := s.now()
	prev, err := suspend.Put(ctx, s.store, s.blobs, c.SessionID, op, info, now, "checkpoint")
	if err != nil {
		return err
	}
	value, _ := json.Marshal(suspend.CheckpointValue{SnapshotInfo: info, Checkpoint: true, AfterSeq: seq})
	ok := true
	m, err := s.store.UpdateSession(ctx, c.SessionID, func(sess store.Session, e store.QueueEntry) (store.Mutation, error) {
		if !lifecycle.RunsUnder(sess, e, op.Epoch) {
			return store.Mutation{}, fmt.Errorf("session %s changed during its checkpoint (it is %s now): %w", c.SessionID, sess.Status, suspend.ErrCheckpointBusy)
		}
		return store.Mutation{Events: []api.Event{{Type: api.EventSnapshot, Time: now.UnixMilli(), AcceptorID: c.AcceptorID, OK: &ok, Value: value,
			Reason: fmt.Sprintf("Took a checkpoint of the workspace after call %d: %s. Should the machine end without suspending, the next one restores it; changes after it would be lost.",
				seq, suspend.Taken(info))}}}, nil
	})
	if err != nil {
		suspend.UndoPut(ctx, s.store, s.blobs, s.log, c.SessionID, prev, op.Key)
		return err
	}
	s.committed(c.SessionID, m)
	suspend.DeleteReplaced(ctx, s.blobs, s.log, c.SessionID, prev, op.Key)
	s.log.Info("checkpoint stored", "session", c.SessionID, "after_seq", seq, "snapshot_bytes", info.Size, "key", op.Key)
	return nil
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
